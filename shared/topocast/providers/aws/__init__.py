"""The ``aws`` provider: EC2 instance topology (``provider``), capacity reservations (``capacity``),
capacity block health (``health``), its EC2 calls (``ec2_calls``) and boto3 helpers (``sdk``).
"""
