"""Task 0.6: the pixel offsets divided by spatial_shapes as it is, (H, W), not flipped."""
import torch
from torch import nn


class MSDACrossAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_levels, num_points):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.num_levels, self.num_points = num_levels, num_points
        self.head_dim = embed_dim // num_heads
        self.value_proj = nn.Linear(embed_dim, embed_dim)
        self.offset_proj = nn.Linear(embed_dim, num_heads * num_levels * num_points * 2)
        self.weight_proj = nn.Linear(embed_dim, num_heads * num_levels * num_points)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, reference_points, value, spatial_shapes):
        B, Q, C = query.shape
        M, L, K = self.num_heads, self.num_levels, self.num_points
        v = self.value_proj(value).view(B, value.shape[1], M, C // M)
        off = self.offset_proj(query).view(B, Q, M, L, K, 2)
        attn = torch.softmax(self.weight_proj(query).view(B, Q, M, L * K), dim=-1)
        norm = spatial_shapes.to(query.dtype)
        loc = reference_points.view(B, Q, 1, 1, 1, 2) + off / norm.view(1, 1, 1, L, 1, 2)
        return self.out_proj(msda(v, spatial_shapes, loc, attn.view(B, Q, M, L, K)))  # noqa: F821
