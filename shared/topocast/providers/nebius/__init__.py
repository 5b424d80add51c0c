"""The ``nebius`` provider: Nebius instance topology (``provider``) through the Nebius SDK (``sdk``)."""
