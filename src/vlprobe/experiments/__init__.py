"""Registered experiments (``probe run NAME``), metrics, plots and manifests."""
