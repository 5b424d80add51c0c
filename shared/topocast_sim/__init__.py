"""Offline simulators of cloud APIs that the usual fakes (moto...) lack.

Used by tests and benchmarks only; nothing here is imported by the functions
that run in the cloud.
"""
