"""Programs that run on a head node or a collector host, not in a function: the pull agent
(``pull``, ``pull_watch``) and the fabric collectors (``collect``, ``collect_nvlink``)."""
