"""Task 0.3: the reference point of position (i, j) built as (i, j), rows first."""
import torch
from torch import nn


class DeformableAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_points):
        super().__init__()
        self.embed_dim, self.num_heads, self.num_points = embed_dim, num_heads, num_points
        self.head_dim = embed_dim // num_heads
        self.value_proj = nn.Linear(embed_dim, embed_dim)
        self.offset_proj = nn.Linear(embed_dim, num_heads * num_points * 2)
        self.weight_proj = nn.Linear(embed_dim, num_heads * num_points)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        B, H, W, C = x.shape
        M, K, D = self.num_heads, self.num_points, self.head_dim
        v = self.value_proj(x).reshape(B, H, W, M, D)
        off = self.offset_proj(x).reshape(B, H * W, M, K, 2)
        attn = torch.softmax(self.weight_proj(x).reshape(B, H * W, M, K), -1)
        ii, jj = torch.meshgrid(torch.arange(H, dtype=x.dtype), torch.arange(W, dtype=x.dtype),
                                indexing="ij")
        ref = torch.stack([ii.flatten(), jj.flatten()], dim=-1)  # (H*W, 2)
        pts = ref[None, :, None, None, :] + off
        out = torch.zeros(B, H * W, M, D, dtype=x.dtype)
        for b in range(B):
            for m in range(M):
                out[b, :, m] = deform_attend(v[b, :, :, m], pts[b, :, m], attn[b, :, m])  # noqa: F821
        return self.out_proj(out.reshape(B, H, W, C))
