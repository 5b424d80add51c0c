"""The ``nebius`` provider: Nebius instance topology (``provider``), the Nebius calls it makes (``api``)
through the Nebius SDK (``sdk``).
"""
