"""Cases past 2**31 value elements that a CPU can run: sparse memory-mapped tensors.

A (B, S, M, D) fp32 ``value`` with one 16384 x 16384 level and M * D >= 8 has at least 2**31
elements per batch, so every element of batch 1 lies past the int32 range. On the CPU it is a
sparse file mapped into memory: only the pages written (one small window of pixels per batch) and
the pages a kernel touches cost memory, a few hundred KiB in all. Each batch's sampling points
stay inside its window, so the whole case is equivalent to a small one on the windows alone
(:meth:`BigCase.small_inputs`), which gives the expected values, forward and backward.

Every location is exact in fp32: W = H = 2**14 and the pixel positions are multiples of 1/64, so
``x * W - 0.5`` in a kernel is the very coordinate the small case uses.

The grader's int64-offset tests (labs 05, 06 and 08) and ``python labNN.py --big`` build their
cases with it, each with its own seed and windows.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, replace

import torch

from msda_labs.student.cases import MSDAInputs, seeded_generator

__all__ = ["BigCase", "sparse_zeros"]


def sparse_zeros(shape, device) -> torch.Tensor:
    """fp32 zeros of ``shape``: a sparse file mapped into memory on the CPU (only the pages
    touched take memory), an ordinary tensor elsewhere."""
    n = math.prod(shape)
    if str(device) != "cpu":
        return torch.zeros(shape, dtype=torch.float32, device=device)
    fd, path = tempfile.mkstemp(prefix="msda-int64-")
    try:
        os.ftruncate(fd, n * 4)
        os.close(fd)
        flat = torch.from_file(path, shared=True, size=n, dtype=torch.float32)
    finally:
        os.unlink(path)  # the mapping outlives the name
    return flat.view(shape)


@dataclass(frozen=True)
class BigCase:
    """B batches of one 2**14 x 2**14 level; batch b samples inside the 8 x 8 window whose
    top-left pixel is ``corners[b]`` = (row, col)."""

    id: str
    B: int
    Q: int
    M: int
    D: int
    K: int
    corners: tuple
    seed: int
    side: int = 1 << 14
    window: int = 8
    small: bool = False  # a twin (see twin()): the same samples on a small level

    @property
    def S(self) -> int:
        return self.side * self.side

    def twin(self) -> BigCase:
        """The same samples on a 32 x 32 level: each window keeps its distance from the level's
        far edges, so a kernel reads the same pixels at offsets far inside the int32 range."""
        side = 32

        def near(x: int) -> int:
            return x if x < side // 2 else x - self.side + side

        return replace(self, id=f"{self.id}_small_twin", side=side, small=True,
                       corners=tuple((near(r), near(c)) for r, c in self.corners))

    def __post_init__(self):
        if not self.small and self.S * self.M * self.D < 1 << 31:
            raise ValueError(f"{self.id}: one batch must hold at least 2**31 value elements, "
                             f"has {self.S * self.M * self.D}")

    def describe(self) -> str:
        if self.small:
            return (f"case '{self.id}' (B={self.B} Q={self.Q} M={self.M} D={self.D} K={self.K}, "
                    f"one {self.side}x{self.side} level)")
        return (f"case '{self.id}' (B={self.B} Q={self.Q} M={self.M} D={self.D} K={self.K}, one "
                f"{self.side}x{self.side} level: batch 1 starts at value element "
                f"{self.S * self.M * self.D:,} > 2**31)")

    def parts(self):
        """(windows (B, win, win, M, D), loc (B, Q, M, 1, K, 2), attn (B, Q, M, 1, K), u): fp32
        on the CPU; ``u`` are the window-relative pixel positions (float64)."""
        gen = seeded_generator(self.seed)
        win = self.window
        windows = torch.randn(self.B, win, win, self.M, self.D, generator=gen)
        steps = torch.randint(0, 64 * (win - 1), (self.B, self.Q, self.M, 1, self.K, 2),
                              generator=gen)
        u = steps.double() / 64
        loc = torch.empty_like(u)
        for b, (r0, c0) in enumerate(self.corners):
            loc[b, ..., 0] = (c0 + 0.5 + u[b, ..., 0]) / self.side
            loc[b, ..., 1] = (r0 + 0.5 + u[b, ..., 1]) / self.side
        attn = torch.rand(self.B, self.Q, self.M, 1, self.K, generator=gen)
        return windows, loc.float(), attn / attn.sum(-1, keepdim=True), u

    def upstream(self) -> torch.Tensor:
        """A seeded upstream gradient (B, Q, M * D) fp32."""
        gen = seeded_generator(self.seed + 7)
        return torch.randn(self.B, self.Q, self.M * self.D, generator=gen)

    def big_inputs(self, device):
        """(value, spatial_shapes, level_start_index, loc, attn) on ``device``; value sparse on
        the CPU with the windows written in."""
        windows, loc, attn, _ = self.parts()
        value = sparse_zeros((self.B, self.S, self.M, self.D), device)
        for b in range(self.B):
            self.window_view(value, b).copy_(windows[b].to(device))
        shapes = torch.tensor([[self.side, self.side]], dtype=torch.int64, device=device)
        starts = torch.zeros(1, dtype=torch.int64, device=device)
        return value, shapes, starts, loc.to(device), attn.to(device)

    def zeros_like_value(self, device) -> torch.Tensor:
        """(B, S, M, D) fp32 zeros, sparse on the CPU: a grad_value to add into."""
        return sparse_zeros((self.B, self.S, self.M, self.D), device)

    def window_view(self, t: torch.Tensor, b: int) -> torch.Tensor:
        """The (win, win, M, D) window of batch ``b`` of a (B, S, M, D) tensor, as a view."""
        r0, c0 = self.corners[b]
        rows = t[b].view(self.side, self.side, self.M, self.D)
        return rows[r0:r0 + self.window, c0:c0 + self.window]

    def windows_of(self, t: torch.Tensor) -> torch.Tensor:
        """(B, win, win, M, D) copy of every batch's window of ``t`` (on the CPU)."""
        return torch.stack([self.window_view(t, b).cpu().clone() for b in range(self.B)])

    def small_inputs(self) -> MSDAInputs:
        """The equivalent small case: the windows as one win x win level, fp32."""
        windows, _, attn, u = self.parts()
        win = self.window
        value = windows.reshape(self.B, win * win, self.M, self.D)
        shapes = torch.tensor([[win, win]], dtype=torch.int64)
        loc = ((u + 0.5) / win).float()  # exact: multiples of 1/512
        return MSDAInputs(value, shapes, torch.zeros(1, dtype=torch.int64), loc, attn)

    @property
    def scale(self) -> float:
        """d(small location) / d(big location) = side / window (exact): grad_loc of the big
        case is the small case's multiplied by this."""
        return self.side / self.window
