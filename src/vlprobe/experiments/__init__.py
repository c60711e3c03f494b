"""The registered experiments (``probe run NAME``): each a declaration and a function that returns rows,
with the helpers they share (cache features, MLP runs, probe tasks, minimal pairs)."""
