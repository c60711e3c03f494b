"""UNITER: the clean-room model that reads the official checkpoints (:mod:`.model`) and its
cross-encoder adapter (:mod:`.adapter`)."""
