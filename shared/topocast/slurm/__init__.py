"""Everything that talks to a real Slurm controller.

- :mod:`~topocast.slurm.controller`: where a Slurm lives (this host or a chroot) and a throwaway ``slurmctld``.
- :mod:`~topocast.slurm.scontrol`: ping, show topology, update a node's topology, reconfigure.
- :mod:`~topocast.slurm.conffile`: read ``Key=Value`` files the way Slurm does (``\\n`` only, printable ASCII).
- :mod:`~topocast.slurm.topofile`: parse topology.conf (tree or block) and check its structure.
- :mod:`~topocast.slurm.topoyaml`: parse topology.yaml and check each topology in it.
- :mod:`~topocast.slurm.validate`: structure + a scratch controller of the right version = ``validate-slurm``.
- :mod:`~topocast.slurm.install`: verify, validate, atomically swap in and reconfigure, with rollback.
- :mod:`~topocast.slurm.live`: node updates instead of a reconfigure when only nodes were added or moved.
"""
