"""ResNet C4 backbone (stem, res2-res4) and the bottleneck blocks the res5 RoI head reuses.

Layout and parameter names follow the Detectron2 port of the Caffe model (``stem.conv1``,
``res2.0.conv1``, ``res2.0.shortcut``, each convolution with its batch norm as ``.norm``):

* stem: 7x7/2 convolution, frozen batch norm, ReLU, then 3x3/2 max pooling, Caffe style (no
  padding, ceil mode) when ``model.max_pool`` is set;
* bottleneck: 1x1, 3x3, 1x1 convolutions with frozen batch norm, the stride in the first 1x1
  when ``resnets.stride_in_1x1`` (Caffe/MSRA) else in the 3x3; a 1x1 projection shortcut where
  the width changes; ReLU after the sum;
* res2 (stride 1), res3 and res4 (stride 2): widths ``res2_out_channels`` x 1, 2, 4.

Batch padding: every layer takes the valid ``(h, w)`` of each image and zeroes what lies
beyond it after each convolution. Each image then sees zeros past its border at every layer,
exactly as when it runs alone, so a padded batch gives each image its own single-image features.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import BLOCKS_PER_STAGE, DetectorConfig

__all__ = ["BottleneckBlock", "ConvNorm", "FrozenBatchNorm2d", "ResNetC4", "Stem", "apply_valid_mask"]

Sizes = Tensor | None  # (B, 2) int64 valid (h, w) per image, None when nothing is padded


class FrozenBatchNorm2d(nn.Module):
    """Batch norm with fixed statistics: ``(x - running_mean) / sqrt(running_var + eps) * weight + bias``."""

    weight: Tensor
    bias: Tensor
    running_mean: Tensor
    running_var: Tensor

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: Tensor) -> Tensor:
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        shift = self.bias - self.running_mean * scale
        return x * scale.view(1, -1, 1, 1).to(x.dtype) + shift.view(1, -1, 1, 1).to(x.dtype)


class ConvNorm(nn.Conv2d):
    """A convolution followed by its (optional) frozen batch norm, stored as ``.norm``."""

    def __init__(self, *args, use_norm: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.norm = FrozenBatchNorm2d(self.out_channels) if use_norm else None

    def forward(self, x: Tensor) -> Tensor:
        x = super().forward(x)
        return self.norm(x) if self.norm is not None else x

    def out_sizes(self, sizes: Tensor) -> Tensor:
        """Valid ``(h, w)`` after this convolution, by the convolution arithmetic."""
        k = torch.tensor(self.kernel_size, device=sizes.device)
        s = torch.tensor(self.stride, device=sizes.device)
        p = torch.tensor(self.padding, device=sizes.device)
        d = torch.tensor(self.dilation, device=sizes.device)
        return torch.div(sizes + 2 * p - d * (k - 1) - 1, s, rounding_mode="floor") + 1


def apply_valid_mask(x: Tensor, sizes: Sizes) -> Tensor:
    """Zero ``(B, C, H, W)`` activations outside each image's valid ``(h, w)`` (in place)."""
    if sizes is None:
        return x
    h, w = x.shape[-2:]
    rows = torch.arange(h, device=x.device)[None, :] < sizes[:, :1]
    cols = torch.arange(w, device=x.device)[None, :] < sizes[:, 1:2]
    mask = (rows[:, None, :, None] & cols[:, None, None, :]).to(x.dtype)
    return x.mul_(mask)


class BottleneckBlock(nn.Module):
    """ResNet bottleneck (1x1, 3x3, 1x1) with a projection shortcut when the width changes."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        bottleneck_channels: int,
        stride: int = 1,
        num_groups: int = 1,
        stride_in_1x1: bool = True,
        dilation: int = 1,
        use_norm: bool = True,
    ) -> None:
        super().__init__()
        self.shortcut = (
            ConvNorm(in_channels, out_channels, 1, stride=stride, bias=False, use_norm=use_norm)
            if in_channels != out_channels
            else None
        )
        s1, s3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = ConvNorm(in_channels, bottleneck_channels, 1, stride=s1, bias=False, use_norm=use_norm)
        self.conv2 = ConvNorm(
            bottleneck_channels,
            bottleneck_channels,
            3,
            stride=s3,
            padding=dilation,
            dilation=dilation,
            groups=num_groups,
            bias=False,
            use_norm=use_norm,
        )
        self.conv3 = ConvNorm(bottleneck_channels, out_channels, 1, bias=False, use_norm=use_norm)

    def out_sizes(self, sizes: Tensor) -> Tensor:
        return self.conv3.out_sizes(self.conv2.out_sizes(self.conv1.out_sizes(sizes)))

    def forward(self, x: Tensor, sizes: Sizes = None) -> Tensor:
        s1 = None if sizes is None else self.conv1.out_sizes(sizes)
        s2 = None if s1 is None else self.conv2.out_sizes(s1)
        out = F.relu_(apply_valid_mask(self.conv1(x), s1))
        out = F.relu_(apply_valid_mask(self.conv2(out), s2))
        out = apply_valid_mask(self.conv3(out), s2)
        short = x if self.shortcut is None else apply_valid_mask(self.shortcut(x), s2)
        return F.relu_(out + short)


class Stem(nn.Module):
    """7x7/2 convolution with frozen batch norm, ReLU and 3x3/2 max pooling."""

    def __init__(self, out_channels: int, caffe_max_pool: bool, use_norm: bool = True) -> None:
        super().__init__()
        self.conv1 = ConvNorm(3, out_channels, 7, stride=2, padding=3, bias=False, use_norm=use_norm)
        self.caffe_max_pool = caffe_max_pool

    def out_sizes(self, sizes: Tensor) -> Tensor:
        s = self.conv1.out_sizes(sizes)
        if self.caffe_max_pool:
            # kernel 3, stride 2, no padding, ceil mode; the last window must start inside
            out = torch.div(s - 3 + 1, 2, rounding_mode="floor") + 1
            return torch.where((out - 1) * 2 >= s, out - 1, out)
        return torch.div(s - 1, 2, rounding_mode="floor") + 1

    def forward(self, x: Tensor, sizes: Sizes = None) -> Tensor:
        s = None if sizes is None else self.conv1.out_sizes(sizes)
        x = F.relu_(apply_valid_mask(self.conv1(x), s))
        # Inputs are >= 0 after the ReLU and masked to 0, so a window reaching into the padding
        # takes the same maximum as one clipped at the image border; windows past the border
        # are masked again.
        if self.caffe_max_pool:
            x = F.max_pool2d(x, kernel_size=3, stride=2, padding=0, ceil_mode=True)
        else:
            x = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
        return apply_valid_mask(x, None if sizes is None else self.out_sizes(sizes))


def make_stage(
    num_blocks: int,
    first_stride: int,
    in_channels: int,
    out_channels: int,
    bottleneck_channels: int,
    cfg: DetectorConfig,
    dilation: int = 1,
) -> nn.Sequential:
    blocks = []
    for i in range(num_blocks):
        blocks.append(
            BottleneckBlock(
                in_channels if i == 0 else out_channels,
                out_channels,
                bottleneck_channels,
                stride=first_stride if i == 0 else 1,
                num_groups=cfg.num_groups,
                stride_in_1x1=cfg.stride_in_1x1,
                dilation=dilation,
                use_norm=bool(cfg.norm),
            )
        )
    return nn.Sequential(*blocks)


def stage_blocks(stage: nn.Sequential) -> list[BottleneckBlock]:
    """The blocks of a stage built by :func:`make_stage`, typed as what they are."""
    return [cast(BottleneckBlock, block) for block in stage]


class ResNetC4(nn.Module):
    """Stem and res2-res4 of a ResNet: stride-16 features of width ``4 * res2_out_channels``."""

    def __init__(self, cfg: DetectorConfig) -> None:
        super().__init__()
        self.stem = Stem(cfg.stem_out_channels, cfg.caffe_max_pool, use_norm=bool(cfg.norm))
        in_ch, out_ch = cfg.stem_out_channels, cfg.res2_out_channels
        bottleneck = cfg.num_groups * cfg.width_per_group
        for idx, n in enumerate(BLOCKS_PER_STAGE[cfg.depth]):
            self.add_module(f"res{idx + 2}", make_stage(n, 1 if idx == 0 else 2, in_ch, out_ch, bottleneck, cfg))
            in_ch, out_ch, bottleneck = out_ch, out_ch * 2, bottleneck * 2
        self.out_channels = in_ch

    def stages(self) -> list[list[BottleneckBlock]]:
        return [stage_blocks(getattr(self, f"res{k}")) for k in (2, 3, 4)]

    def out_sizes(self, sizes: Tensor) -> Tensor:
        """Valid ``(h, w)`` of the res4 map for input sizes ``(B, 2)``."""
        s = self.stem.out_sizes(sizes)
        for blocks in self.stages():
            for block in blocks:
                s = block.out_sizes(s)
        return s

    def forward(self, x: Tensor, sizes: Sizes = None) -> Tensor:
        """``(B, 3, H, W)`` normalised images -> ``(B, C4, H/16, W/16)`` res4 features."""
        s = sizes
        x = self.stem(x, s)
        s = None if s is None else self.stem.out_sizes(s)
        for blocks in self.stages():
            for block in blocks:
                x = block(x, s)
                s = None if s is None else block.out_sizes(s)
        return x
