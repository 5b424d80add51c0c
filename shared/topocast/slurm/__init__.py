"""Everything that talks to a real Slurm controller.

- :mod:`~topocast.slurm.controller`: run a throwaway ``slurmctld`` in a scratch dir.
- :mod:`~topocast.slurm.scontrol`: ping, show topology, reconfigure against any controller.
- :mod:`~topocast.slurm.topofile`: parse topology.conf and check its structure.
- :mod:`~topocast.slurm.validate`: structure + scratch controller = ``topocast validate-slurm``.
- :mod:`~topocast.slurm.install`: verify, validate, atomically swap in and reconfigure, with rollback.
"""
