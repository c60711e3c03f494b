"""ViLBERT and 12-in-1 (vilbert-multi-task checkpoints): the model (``model``) and the adapter (``adapter``)."""
