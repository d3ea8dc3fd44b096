"""Queueing theory: M/G/1 mean response times under PS, FIFO, SRPT and classes (`mg1`), the
simulator's figures (`simfigs`) and their command line (`cli`, the `theory` verb). Imports
only the kit and `commands`.
"""
