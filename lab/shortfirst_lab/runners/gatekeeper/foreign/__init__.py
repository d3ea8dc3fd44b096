"""The gatekeeper in front of backends the project did not write (`backends.foreign`:
datasette, json-server): `bench` (each backend's cost alone, its peak, the calibration, then
every mode at a multiple of the peak, on the harness's runner), `verdict` (the targets and the
table). Entry point: `python -m shortfirst_lab bench gatekeeper-foreign`.
"""
