"""OpenCLIP checkpoints in plain torch: architectures (``archs``), the model (``model``),
checkpoint files (``checkpoint``), image preprocessing (``preprocess``) and the adapter
(``adapter``)."""
