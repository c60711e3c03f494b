"""Dataset loaders into one item model, the variants file format, synthetic fixtures."""
