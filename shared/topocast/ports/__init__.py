"""What the use cases and the stores say to each other: the ports and the values they speak.

:mod:`~topocast.ports.records` (stored graphs, manifests, the guard's records, a publish's result),
:mod:`~topocast.ports.debounce` (the timer, the debounce policy, the debouncer's decision) and
:mod:`~topocast.ports.protocols` (the Protocols each cloud implements once and the use cases' port
bundles). This layer sits below :mod:`topocast.pipeline` (which implements the stores over a bucket)
and :mod:`topocast.app` (the use cases), so neither imports the other for a type.
"""
