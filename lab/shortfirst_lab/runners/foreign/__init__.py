"""The gatekeeper in front of backends the project did not write, installed from package
registries (`make foreign-backends`): `backends` (data, argv, request types), `bench` (the
runs), `verdict` (the targets and the table). Entry point: `python -m shortfirst_lab bench
gatekeeper-foreign`.
"""
