"""A Deformable-DETR transformer whose multi-scale deformable attention is a swappable function.

The architecture of Deformable DETR's transformer (single-stage, no box refinement), written for
the model-level benchmark (:mod:`msda_labs.gpu.modelbench`):

* the **encoder**: ``encoder_layers`` layers, each multi-scale deformable self-attention over
  every pixel of every level (query = pixel feature + position, reference point = the pixel's
  centre, normalized, the same on every level), then a two-layer feed-forward block, each with a
  residual and a LayerNorm;
* the **decoder**: ``decoder_layers`` layers over ``queries`` object queries, each ordinary
  multi-head self-attention among the queries, multi-scale deformable cross-attention into the
  encoder's output (reference point = a linear map of the query's position embedding, through a
  sigmoid), then the feed-forward block;
* a **loss** that reaches every parameter: the decoder's output through a linear head, its mean
  squared difference from a fixed target.

Every level is fully valid (no padding mask) and dropout is 0, so that a step is a deterministic
function of the weights and the operator's outputs (the bench compares operators on it).

The attention function is any callable with mmcv's argument order ``(value, spatial_shapes,
level_start_index, sampling_locations, attention_weights) -> (B, Q, M * D)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

# The feature-map sizes of an 800 x 1333 image at strides 8, 16, 32 and 64.
IMAGE_LEVELS = ((100, 167), (50, 84), (25, 42), (13, 21))


@dataclass(frozen=True)
class DetrConfig:
    """The sizes of the transformer and of its input (Deformable DETR's defaults)."""

    d_model: int = 256
    heads: int = 8
    points: int = 4
    ffn: int = 1024
    encoder_layers: int = 6
    decoder_layers: int = 6
    queries: int = 300
    batch: int = 2
    levels: tuple = IMAGE_LEVELS

    @property
    def pixels(self) -> int:
        return sum(h * w for h, w in self.levels)


class DeformableAttention(nn.Module):
    """Multi-scale deformable attention (Deformable DETR's ``MSDeformAttn``) around ``sample``."""

    def __init__(self, cfg: DetrConfig, sample):
        super().__init__()
        self.heads, self.levels, self.points = cfg.heads, len(cfg.levels), cfg.points
        self.sample = sample
        mlk = cfg.heads * self.levels * cfg.points
        self.sampling_offsets = nn.Linear(cfg.d_model, mlk * 2)
        self.attention_weights = nn.Linear(cfg.d_model, mlk)
        self.value_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.output_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self._reset_parameters()

    def _reset_parameters(self):
        # Deformable DETR's start: head h's points fan out in direction 2 pi h / M, point k at
        # k + 1 pixels; uniform attention; the projections Xavier-uniform.
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.heads, dtype=torch.float32) * (2.0 * math.pi / self.heads)
        grid = torch.stack([angles.cos(), angles.sin()], -1)
        grid = grid / grid.abs().max(-1, keepdim=True)[0]
        grid = grid.view(self.heads, 1, 1, 2).repeat(1, self.levels, self.points, 1)
        grid = grid * torch.arange(1, self.points + 1, dtype=torch.float32).view(1, 1, -1, 1)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.reshape(-1))
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, query, reference_points, source, spatial_shapes, level_start_index,
                offset_scale):
        """query (B, Q, C), reference_points (B, Q, L, 2) normalized, source (B, S, C),
        offset_scale (L, 2) = 1 / (W_l, H_l) -> (B, Q, C)."""
        B, Q, _ = query.shape
        S = source.shape[1]
        M, L, K = self.heads, self.levels, self.points
        value = self.value_proj(source).view(B, S, M, -1)
        offsets = self.sampling_offsets(query).view(B, Q, M, L, K, 2)
        weights = self.attention_weights(query).view(B, Q, M, L * K).softmax(-1)
        locations = (reference_points[:, :, None, :, None, :]
                     + offsets * offset_scale[None, None, None, :, None, :])
        out = self.sample(value, spatial_shapes, level_start_index, locations,
                          weights.view(B, Q, M, L, K))
        return self.output_proj(out)


class FeedForward(nn.Module):
    def __init__(self, cfg: DetrConfig):
        super().__init__()
        self.linear1 = nn.Linear(cfg.d_model, cfg.ffn)
        self.linear2 = nn.Linear(cfg.ffn, cfg.d_model)
        self.norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x):
        return self.norm(x + self.linear2(torch.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: DetrConfig, sample):
        super().__init__()
        self.self_attn = DeformableAttention(cfg, sample)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)

    def forward(self, src, pos, reference_points, spatial_shapes, level_start_index,
                offset_scale):
        attended = self.self_attn(src + pos, reference_points, src, spatial_shapes,
                                  level_start_index, offset_scale)
        return self.ffn(self.norm(src + attended))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DetrConfig, sample):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(cfg.d_model, cfg.heads, batch_first=True)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.cross_attn = DeformableAttention(cfg, sample)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)

    def forward(self, tgt, query_pos, reference_points, memory, spatial_shapes,
                level_start_index, offset_scale):
        q = tgt + query_pos
        tgt = self.norm1(tgt + self.self_attn(q, q, tgt, need_weights=False)[0])
        attended = self.cross_attn(tgt + query_pos, reference_points, memory, spatial_shapes,
                                   level_start_index, offset_scale)
        return self.ffn(self.norm2(tgt + attended))


def encoder_reference_points(levels, dtype=torch.float32) -> torch.Tensor:
    """(1, S, L, 2): each pixel's centre, normalized by its level's size, for every level."""
    points = []
    for h, w in levels:
        ys, xs = torch.meshgrid((torch.arange(h, dtype=dtype) + 0.5) / h,
                                (torch.arange(w, dtype=dtype) + 0.5) / w, indexing="ij")
        points.append(torch.stack([xs.reshape(-1), ys.reshape(-1)], -1))
    return torch.cat(points)[None, :, None, :].expand(1, -1, len(levels), 2).contiguous()


class DeformableDetrTransformer(nn.Module):
    """Encoder, decoder and a linear head; ``forward(features, pos) -> loss``."""

    def __init__(self, cfg: DetrConfig, sample):
        super().__init__()
        self.cfg = cfg
        L = len(cfg.levels)
        self.level_embed = nn.Parameter(torch.randn(L, cfg.d_model) * 0.02)
        self.encoder = nn.ModuleList(EncoderLayer(cfg, sample) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg, sample) for _ in range(cfg.decoder_layers))
        self.query_embed = nn.Embedding(cfg.queries, 2 * cfg.d_model)
        self.reference_points = nn.Linear(cfg.d_model, 2)
        self.head = nn.Linear(cfg.d_model, cfg.d_model)
        shapes = torch.tensor(cfg.levels, dtype=torch.int64)
        sizes = shapes[:, 0] * shapes[:, 1]
        self.register_buffer("spatial_shapes", shapes, persistent=False)
        self.register_buffer("level_start_index", torch.cumsum(sizes, 0) - sizes,
                             persistent=False)
        self.register_buffer("offset_scale", 1.0 / shapes.flip(-1).to(torch.float32),
                             persistent=False)
        self.register_buffer("encoder_points", encoder_reference_points(cfg.levels),
                             persistent=False)
        self.register_buffer("level_ids", torch.repeat_interleave(torch.arange(L), sizes),
                             persistent=False)

    def forward(self, features, pos, target):
        """features, pos: (B, S, C) flattened levels (a backbone's output and its position
        encoding); target: (B, Q, C). Returns the scalar loss."""
        B = features.shape[0]
        shapes, starts, scale = self.spatial_shapes, self.level_start_index, self.offset_scale
        pos = pos + self.level_embed[self.level_ids]
        points = self.encoder_points.expand(B, -1, -1, -1)
        memory = features
        for layer in self.encoder:
            memory = layer(memory, pos, points, shapes, starts, scale)
        query_pos, tgt = self.query_embed.weight.split(self.cfg.d_model, dim=1)
        query_pos = query_pos[None].expand(B, -1, -1)
        tgt = tgt[None].expand(B, -1, -1)
        reference = self.reference_points(query_pos).sigmoid()[:, :, None, :]
        reference = reference.expand(-1, -1, len(self.cfg.levels), -1)
        for layer in self.decoder:
            tgt = layer(tgt, query_pos, reference, memory, shapes, starts, scale)
        return (self.head(tgt) - target).pow(2).mean()


def trained_like(model, seed: int = 1, scale: float = 0.02):
    """``model`` with seeded small weights in the offset and attention predictors, as after some
    training: the locations then move with the query. At Deformable DETR's initialization every
    encoder location sits exactly on a pixel, where the bilinear derivative is one-sided and two
    correct operators may round to either side of it."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, DeformableAttention):
                for linear in (module.sampling_offsets, module.attention_weights):
                    linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) * scale)
    return model


def make_inputs(cfg: DetrConfig, device, seed: int = 0):
    """Seeded (features, pos, target) of the config's sizes, fp32, on ``device``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    features = torch.randn(cfg.batch, cfg.pixels, cfg.d_model, generator=gen)
    pos = torch.randn(cfg.batch, cfg.pixels, cfg.d_model, generator=gen)
    target = torch.randn(cfg.batch, cfg.queries, cfg.d_model, generator=gen)
    return features.to(device), pos.to(device), target.to(device)
