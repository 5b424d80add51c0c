"""The functional core: the topology graph, names, host lists, fabric inference, placement and
the cloud-neutral change vocabulary. Imports nothing of topocast but ``errors`` and ``safeio``."""
