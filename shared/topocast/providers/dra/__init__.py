"""The ``dra`` provider: a graph from a DRA driver's ResourceSlices (``provider``, pure; the LIST is the
shell's).
"""
