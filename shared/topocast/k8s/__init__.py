"""The Kubernetes client and what it reads and writes (needs the ``k8s`` extra).

Modules: :mod:`~topocast.k8s.client` (lightkube client, rate limit, retries),
:mod:`~topocast.k8s.auth` (EKS/GKE tokens and endpoints), :mod:`~topocast.k8s.labels`
(node matching and minimal label patches), :mod:`~topocast.k8s.objects` (server-side
apply, drift, HyperNode garbage collection), :mod:`~topocast.k8s.inputs`
(the rendered files a publish decodes), :mod:`~topocast.k8s.node_source` and
:mod:`~topocast.k8s.resource_slices` (the Node and ResourceSlice LISTs of the ``k8s-labels`` and
``dra`` providers). The publisher that drives them is :mod:`topocast.publish.kubernetes`
(this package never imports it). Nothing is imported here, so ``topocast.k8s.auth`` works without
lightkube installed.
"""
