"""The ``azure`` provider: Azure VM scale set placement (``provider``), the ARM calls it makes (``api``)
through azure-mgmt-compute (``sdk``).
"""
