"""Running many commands: one step runner (local processes or Slurm jobs) for shards, sweeps and the testbed."""
