"""The ``k8s-labels`` provider: a graph from the Kubernetes Node labels (``provider``, pure; the LIST is the
shell's).
"""
