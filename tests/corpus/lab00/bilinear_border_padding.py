"""Task 0.1: padding_mode="border", so points outside the image read the edge pixels."""
import torch
import torch.nn.functional as F


def bilinear_sample(img, points):
    H, W, D = img.shape
    scale = torch.tensor([W, H], dtype=img.dtype)
    grid = ((points.to(img.dtype) + 0.5) / scale * 2 - 1)[None, :, None, :]
    res = F.grid_sample(img.permute(2, 0, 1)[None], grid, mode="bilinear",
                        padding_mode="border", align_corners=False)
    return res[0, :, :, 0].transpose(0, 1)
