"""Registry entry point for the Kubernetes publisher (``PUBLISHERS["kubernetes"]``).

The implementation lives in :mod:`topocast.k8s.publisher` (it needs the ``k8s``
extra); this module only re-exports it under the name the registry expects.
"""

from topocast.k8s.publisher import K8sPublishResult, KubernetesPublisher, KubernetesPublisherConfig

__all__ = ["K8sPublishResult", "KubernetesPublisher", "KubernetesPublisherConfig"]
