"""The ``oci`` provider: OCI instance topology (``provider``) through the ``oci`` SDK (``sdk``)."""
