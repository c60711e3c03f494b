"""Model adapters, pooling, the HDF5 activation cache and the extraction runner."""
