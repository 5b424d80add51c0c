"""Kubernetes publishing: node labels, scheduler objects and the Slinky ConfigMap (needs the ``k8s`` extra).

Modules: :mod:`~topocast.k8s.client` (lightkube client, rate limit, retries),
:mod:`~topocast.k8s.auth` (EKS/GKE tokens and endpoints), :mod:`~topocast.k8s.labels`
(node matching and minimal label patches), :mod:`~topocast.k8s.objects` (server-side
apply, drift, HyperNode garbage collection), :mod:`~topocast.k8s.publisher`
(``KubernetesPublisher``) and :mod:`~topocast.k8s.node_source` (the Node LIST of the
``k8s-labels`` provider). Nothing is imported here, so ``topocast.k8s.auth`` works
without lightkube installed.
"""
