"""OpenCLIP's CLIP models in plain torch, with OpenCLIP's state-dict key names.

Written from OpenCLIP's documented architecture (``open_clip`` itself imports torchvision,
whose compiled operators do not load beside a CPU-only torch, so it is not used):

* :class:`VisionTransformer` (``visual.*``): ``conv1`` (patches, no bias), ``class_embedding``,
  ``positional_embedding``, ``ln_pre``, ``transformer.resblocks.N``, ``ln_post`` on the class
  token, ``proj`` (width x embed_dim).
* :class:`ModifiedResNet` (``visual.*``, OpenAI's RN50 ... RN50x64): a stem of three 3x3
  convolutions (``conv1..3``/``bn1..3``, the first with stride 2) and a 2x2 average pool; four
  stages ``layer1..4`` of :class:`Bottleneck` blocks whose strided ones average-pool before the
  third convolution (anti-aliasing) and in the shortcut (``downsample.0`` pool, ``.1`` conv,
  ``.2`` norm); an :class:`AttentionPool2d` (``attnpool``): the mean of the final feature map is
  prepended as a query token, a positional embedding added, one multi-head attention layer with
  ``q_proj``/``k_proj``/``v_proj``/``c_proj``; its first output is the image embedding.
* CLIP's causal text transformer at the top level: ``token_embedding``,
  ``positional_embedding``, ``transformer.resblocks.N``, ``ln_final``, ``text_projection``
  (width x embed_dim), pooled at the EOS token (the highest token id, ``argmax`` of the ids).
* or a Hugging Face text tower (``text.transformer.*``: transformers' roberta/xlm-roberta model
  without its pooler; ``text.proj``: a two-layer GELU MLP without biases (``proj.0``,
  ``proj.2``), a linear map, or none), pooled by the masked mean of its last states.
* ``logit_scale`` (log of the temperature's inverse).

A residual block (``resblocks.N``): ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``; ``attn``
holds ``in_proj_weight``/``in_proj_bias`` (q, k, v stacked) and ``out_proj`` as torch's
``MultiheadAttention`` names them; ``mlp`` is ``c_fc``, the activation (GELU or QuickGELU
``x * sigmoid(1.702 x)``), ``c_proj``. Layer norms have eps 1e-5.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlprobe.extract.models.openclip.archs import OpenClipConfig, TextConfig, VisionConfig

__all__ = [
    "AttentionPool2d",
    "Bottleneck",
    "HFTextTower",
    "ModifiedResNet",
    "OpenClipModel",
    "QuickGELU",
    "ResidualAttentionBlock",
    "TokenView",
    "Transformer",
    "VisionTransformer",
]


class QuickGELU(nn.Module):
    """OpenAI CLIP's activation, ``x * sigmoid(1.702 x)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def _activation(act: str) -> nn.Module:
    return QuickGELU() if act == "quick_gelu" else nn.GELU()


class Attention(nn.Module):
    """Multi-head self-attention with ``MultiheadAttention``'s parameter names (batch first)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width))
        self.out_proj = nn.Linear(width, width)
        nn.init.xavier_uniform_(self.in_proj_weight)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (y.view(b, t, self.heads, w // self.heads).transpose(1, 2) for y in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, w))


class ResidualAttentionBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, width: int, heads: int, mlp_width: int, act: str) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(width, mlp_width)), ("gelu", _activation(act)), ("c_proj", nn.Linear(mlp_width, width)),
        ]))

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """A stack of :class:`ResidualAttentionBlock` (``resblocks``)."""

    def __init__(self, width: int, layers: int, heads: int, mlp_width: int, act: str) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList([ResidualAttentionBlock(width, heads, mlp_width, act) for _ in range(layers)])

    @property
    def n_layers(self) -> int:
        return len(self.resblocks)

    def states(self, x: torch.Tensor, causal: bool = False) -> list[torch.Tensor]:
        """Each block's output, in order (the input not included)."""
        out = []
        for block in self.resblocks:
            x = block(x, causal)
            out.append(x)
        return out


class VisionTransformer(nn.Module):
    """OpenCLIP's ``VisionTransformer`` (see the module docstring)."""

    def __init__(self, cfg: VisionConfig, embed_dim: int, act: str) -> None:
        super().__init__()
        if cfg.patch_size is None or not isinstance(cfg.layers, int):
            raise ValueError("VisionTransformer needs a patch size and an int number of layers")
        w, grid = cfg.width, cfg.image_size // cfg.patch_size
        scale = w**-0.5
        self.conv1 = nn.Conv2d(3, w, kernel_size=cfg.patch_size, stride=cfg.patch_size, bias=False)
        self.class_embedding = nn.Parameter(scale * torch.randn(w))
        self.positional_embedding = nn.Parameter(scale * torch.randn(grid * grid + 1, w))
        self.ln_pre = nn.LayerNorm(w)
        self.transformer = Transformer(w, cfg.layers, cfg.heads, cfg.mlp_width, act)
        self.ln_post = nn.LayerNorm(w)
        self.proj = nn.Parameter(scale * torch.randn(w, embed_dim))

    def forward_states(self, pixels: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """States and embedding of a batch of images.

        Parameters
        ----------
        pixels : Tensor, shape (B, 3, S, S)

        Returns
        -------
        states : list of Tensor, each (B, 1 + grid**2, width)
            ``ln_pre(patch + class embeddings + positions)``, then each block's output.
        pooled : Tensor, shape (B, embed_dim)
            ``ln_post(class token) @ proj``.
        """
        x = self.conv1(pixels).flatten(2).transpose(1, 2)
        cls = self.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x)
        states = [x, *self.transformer.states(x)]
        pooled = self.ln_post(states[-1][:, 0]) @ self.proj
        return states, pooled


class Bottleneck(nn.Module):
    """ModifiedResNet's bottleneck block: 1x1, 3x3, (average pool when strided), 1x1; ReLU;
    the shortcut average-pools then projects when the shape changes."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.avgpool: nn.Module = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample: nn.Module | None = None
        if stride > 1 or inplanes != out:
            self.downsample = nn.Sequential(OrderedDict([
                ("-1", nn.AvgPool2d(stride)), ("0", nn.Conv2d(inplanes, out, 1, bias=False)), ("1", nn.BatchNorm2d(out)),
            ]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(self.avgpool(y)))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(y + shortcut)


class AttentionPool2d(nn.Module):
    """ModifiedResNet's attention pooling: [mean; positions] + positional embedding, one
    multi-head attention layer, ``c_proj`` to the embedding width."""

    def __init__(self, grid: int, width: int, heads: int, out_dim: int) -> None:
        super().__init__()
        self.positional_embedding = nn.Parameter(torch.randn(grid * grid + 1, width) / width**0.5)
        self.k_proj = nn.Linear(width, width)
        self.q_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.c_proj = nn.Linear(width, out_dim)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, 1 + H*W, out_dim): every query's output; row 0 is the pooled one."""
        b, c = x.shape[:2]
        tokens = x.flatten(2).transpose(1, 2)
        tokens = torch.cat([tokens.mean(dim=1, keepdim=True), tokens], dim=1) + self.positional_embedding.to(x.dtype)
        t = tokens.shape[1]

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, c // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(self.q_proj(tokens)), heads(self.k_proj(tokens)), heads(self.v_proj(tokens)))
        return self.c_proj(out.transpose(1, 2).reshape(b, t, c))


class TokenView(nn.Module):
    """A ResNet layer's states as tokens: ``[spatial mean; grid cells]``, channels zero-padded.

    A feature map (B, C, H, W) becomes (B, 1 + g*g, width): token 0 is its mean over all
    positions (what the attention pool takes as its query token), tokens 1.. its average over
    each cell of the final g x g grid (adaptive average pooling; exact block means when H is a
    multiple of g), so every layer has the same tokens and the mean over them is the map's mean;
    channels beyond C are zero. The attention pool's output (B, 1 + g*g, D) is padded alike.
    Parameterless: it exists so that each layer has a module whose output is its states.
    """

    def __init__(self, grid: int, width: int) -> None:
        super().__init__()
        self.grid, self.width = grid, width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            cells = F.adaptive_avg_pool2d(x, self.grid).flatten(2).transpose(1, 2)
            x = torch.cat([x.mean(dim=(2, 3))[:, None], cells], dim=1)
        return F.pad(x, (0, self.width - x.shape[-1]))


class ModifiedResNet(nn.Module):
    """OpenAI CLIP's ResNet image tower (see the module docstring)."""

    def __init__(self, cfg: VisionConfig, embed_dim: int) -> None:
        super().__init__()
        if not isinstance(cfg.layers, tuple):
            raise ValueError("ModifiedResNet needs four stage depths")
        w = cfg.width
        self.conv1 = nn.Conv2d(3, w // 2, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(w // 2)
        self.conv2 = nn.Conv2d(w // 2, w // 2, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(w // 2)
        self.conv3 = nn.Conv2d(w // 2, w, kernel_size=3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(w)
        self.avgpool = nn.AvgPool2d(2)
        inplanes = w
        stages = []
        for i, depth in enumerate(cfg.layers):
            planes = w * 2**i
            blocks = [Bottleneck(inplanes, planes, 1 if i == 0 else 2)]
            inplanes = planes * Bottleneck.expansion
            blocks += [Bottleneck(inplanes, planes) for _ in range(1, depth)]
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.grid = cfg.image_size // 32
        self.attnpool = AttentionPool2d(self.grid, w * 32, cfg.heads, embed_dim)
        #: The width of every layer's token view: the widest of the stages and the embedding.
        self.state_width = max(w * 32, embed_dim)
        self.token_views = nn.ModuleList([TokenView(self.grid, self.state_width) for _ in range(6)])

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return self.avgpool(x)

    def forward_states(self, pixels: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Token views of the stem, the four stages and the attention pool, and the embedding.

        Returns
        -------
        states : list of 6 Tensor, each (B, 1 + grid**2, state_width)
        pooled : Tensor, shape (B, embed_dim)
        """
        x = self.stem(pixels)
        maps = [x]
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = stage(x)
            maps.append(x)
        pooled_tokens = self.attnpool(x)
        states = [view(m) for view, m in zip(self.token_views, [*maps, pooled_tokens], strict=True)]
        return states, pooled_tokens[:, 0]


class HFTextTower(nn.Module):
    """OpenCLIP's Hugging Face text tower: ``transformer`` (a transformers model without its
    pooler), pooled (masked mean, or the model's own pooler for ``cls_pooler``), then ``proj``."""

    def __init__(self, cfg: TextConfig, embed_dim: int) -> None:
        super().__init__()
        from transformers import AutoConfig, AutoModel

        hf = dict(cfg.hf_config)
        model_type = hf.pop("model_type")
        config = AutoConfig.for_model(model_type, **hf)
        self.pooler = cfg.hf_pooler_type
        self.transformer = AutoModel.from_config(config, add_pooling_layer=self.pooler == "cls_pooler")
        d = int(config.hidden_size)
        self.pad_token_id = int(config.pad_token_id)
        self.proj: nn.Module
        if cfg.hf_proj_type == "mlp":
            mid = (d + embed_dim) // 2
            self.proj = nn.Sequential(nn.Linear(d, mid, bias=False), nn.GELU(), nn.Linear(mid, embed_dim, bias=False))
        elif cfg.hf_proj_type == "linear":
            self.proj = nn.Linear(d, embed_dim, bias=False)
        else:
            self.proj = nn.Identity()

    def forward_states(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Hidden states (embeddings, then each layer) and the projected pooled embedding."""
        out = self.transformer(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        last = out.last_hidden_state
        if self.pooler == "cls_pooler":
            pooled = out.pooler_output if out.pooler_output is not None else last[:, 0]
        else:
            m = mask.to(last.dtype).unsqueeze(-1)
            pooled = (last * m).sum(dim=1) / m.sum(dim=1)
        return list(out.hidden_states), self.proj(pooled)


class OpenClipModel(nn.Module):
    """An OpenCLIP CLIP model (``visual``, a text tower, ``logit_scale``) under OpenCLIP's key names."""

    def __init__(self, cfg: OpenClipConfig) -> None:
        super().__init__()
        self.config = cfg
        self.visual: VisionTransformer | ModifiedResNet
        if cfg.vision.resnet:
            self.visual = ModifiedResNet(cfg.vision, cfg.embed_dim)
        else:
            self.visual = VisionTransformer(cfg.vision, cfg.embed_dim, cfg.act)
        t = cfg.text
        if t.hf:
            self.text = HFTextTower(t, cfg.embed_dim)
        else:
            self.token_embedding = nn.Embedding(t.vocab_size, t.width)
            self.positional_embedding = nn.Parameter(torch.empty(t.context_length, t.width).normal_(std=0.01))
            #: Parameterless: its output is text layer 0 (token + position embeddings).
            self.embed_out = nn.Identity()
            self.transformer = Transformer(t.width, t.layers, t.heads, t.mlp_width, cfg.act)
            self.ln_final = nn.LayerNorm(t.width)
            self.text_projection = nn.Parameter(torch.empty(t.width, cfg.embed_dim).normal_(std=t.width**-0.5))
        self.logit_scale = nn.Parameter(torch.tensor(2.6592))  # log(1 / 0.07), OpenCLIP's initial value

    @property
    def hf_text(self) -> bool:
        return bool(self.config.text.hf)

    def text_states(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Text states (layer 0 = embeddings, then each block), the projected embedding and the
        position each row's ``cls`` pooling reads.

        Parameters
        ----------
        ids, mask : Tensor, shape (B, T)
            Right-padded token ids and their attention mask.

        Returns
        -------
        states : list of Tensor, each (B, T, width)
            CLIP's tower: before ``ln_final``. A HF tower: its ``hidden_states``.
        pooled : Tensor, shape (B, embed_dim)
        cls_index : Tensor, shape (B,)
            CLIP's tower: the EOS position (``argmax`` of the ids: EOS is the highest id, as
            OpenCLIP pools); a HF tower: 0 (``<s>``).
        """
        if isinstance(getattr(self, "text", None), HFTextTower):
            states, pooled = self.text.forward_states(ids, mask)
            return states, pooled, torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device)
        t = ids.shape[1]
        x = self.embed_out(self.token_embedding(ids) + self.positional_embedding[:t].to(self.token_embedding.weight.dtype))
        states = [x, *self.transformer.states(x, causal=True)]
        eos = ids.argmax(dim=-1)
        final = self.ln_final(states[-1])
        pooled = final[torch.arange(ids.shape[0], device=ids.device), eos] @ self.text_projection
        return states, pooled, eos

    def image_states(self, pixels: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Image states (see :meth:`VisionTransformer.forward_states`,
        :meth:`ModifiedResNet.forward_states`) and the image embedding."""
        return self.visual.forward_states(pixels)

    def text_blocks(self) -> list[Any]:
        """The text tower's blocks, in order."""
        if self.hf_text:
            return list(self.text.transformer.encoder.layer)
        return list(self.transformer.resblocks)
