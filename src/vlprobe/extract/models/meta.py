"""Build a model's skeleton on the meta device, for weights that all come from a checkpoint.

``with torch.device("meta")`` makes parameters without memory, but the modules' initialisers
still run on them, and a few meta operations (``normal_``, a tensor times or divided by a number)
go through torch's Python reference implementations, whose first call imports ``torch._dynamo``:
about a second of CPU in every process that loads such a model, for values nobody reads.
:func:`meta_skeleton` answers those operations with tensors of the right shape and dtype
instead; every other operation runs as on the meta device. The caller must then assign every
parameter and buffer (``load_state_dict(..., strict=True, assign=True)``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["meta_skeleton"]

_IN_PLACE_RANDOM = {torch.Tensor.normal_, torch.nn.init.normal_, torch.nn.init.trunc_normal_}
_SCALAR_ARITHMETIC = {torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.Tensor.div,
                      torch.Tensor.__truediv__}


class _ShapesOnly(TorchFunctionMode):
    """Random fills and arithmetic with a number on meta tensors: shape and dtype only."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args else kwargs.get("tensor")  # (torch.nn.init passes it by name)
        if isinstance(first, torch.Tensor) and first.is_meta:
            if func in _IN_PLACE_RANDOM:
                return first
            if func in _SCALAR_ARITHMETIC and len(args) == 2 and not kwargs and isinstance(
                    args[1], int | float | bool | complex):
                dtype = torch.result_type(first, args[1])
                return torch.empty(first.shape, dtype=dtype, device="meta")
        return func(*args, **kwargs)


@contextlib.contextmanager
def meta_skeleton() -> Iterator[None]:
    """Modules built in this block live on the meta device, their initial values unset."""
    with torch.device("meta"), _ShapesOnly():
        yield
