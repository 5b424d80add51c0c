"""The ``gcp`` provider: Compute Engine VM placement (``provider``), its Compute calls (``api``), sub-block
health (``health``) and google-cloud-compute helpers (``sdk``).
"""
