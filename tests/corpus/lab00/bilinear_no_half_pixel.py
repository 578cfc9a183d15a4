"""Task 0.1: the grid maps a pixel p to 2 * p / size - 1, without the half pixel."""
import torch
import torch.nn.functional as F


def bilinear_sample(img, points):
    H, W, D = img.shape
    gx = 2 * points[:, 0] / W - 1
    gy = 2 * points[:, 1] / H - 1
    grid = torch.stack((gx, gy), dim=1).to(img.dtype).reshape(1, -1, 1, 2)
    res = F.grid_sample(img.permute(2, 0, 1)[None], grid, mode="bilinear",
                        padding_mode="zeros", align_corners=False)
    return res.squeeze(0).squeeze(-1).t()
