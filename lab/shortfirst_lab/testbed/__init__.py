"""The machine an experiment runs on: network namespaces and the shaped uplink (`bed`,
`netns`), the WAN emulator's namespace (`wan`), the SYN timers (`synrto`), CPUs (`cpus`,
`placement`) and the probes run inside the namespaces (`probe`, `wanprobe`). Knows no HTTP,
policy or experiment; only the runners import it (lab/tests/test_layers.py checks).
"""
