"""The stored-object layout every stage shares, and the pure decisions over it.

Graph generations (:mod:`~topocast.pipeline.store`), rendered artifacts and their manifests
(:mod:`~topocast.pipeline.artifacts`), the guard's memory (:mod:`~topocast.pipeline.publish_state`)
over any bucket (:mod:`~topocast.pipeline.objects`); the blast-radius guard
(:mod:`~topocast.pipeline.guard`) and the debouncer (:mod:`~topocast.pipeline.debounce`,
:mod:`~topocast.pipeline.debounce_runner`). The use cases that run the stages are in
:mod:`topocast.app`, their ports in :mod:`topocast.ports.protocols`; the cloud adapters
(``topocast.aws``, ``topocast.gcp``) are thin shells around both.
"""
