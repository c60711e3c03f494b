"""The run framework: experiment declarations, option groups, presets, and writing results with manifests."""
