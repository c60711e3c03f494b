"""Imported by a fork server in a test: torch as if a module had initialised CUDA (what
``torch.cuda.is_initialized`` reports after ``torch.cuda.init()``), which the server must refuse."""

import torch

torch.cuda._initialized = True
