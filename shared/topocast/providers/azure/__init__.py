"""The ``azure`` provider: Azure VM scale set placement (``provider``) through azure-mgmt-compute (``sdk``)."""
