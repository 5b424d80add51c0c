"""The ``oci`` provider: OCI instance topology (``provider``), the OCI calls it makes (``api``) through the
``oci`` SDK (``sdk``).
"""
