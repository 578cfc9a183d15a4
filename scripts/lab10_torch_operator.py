

# ---- a PyTorch stand-in appended to lab 10's chip (scripts/device_s18.sh): msda computed with
# grid_sample, no Triton kernel; the final exam must give it nothing.
import torch.nn.functional as _F  # noqa: N812


def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights, *,
         fp32_grad_accum=None):
    batch, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    sizes = [int(h) * int(w) for h, w in spatial_shapes.tolist()]
    grids = 2 * sampling_locations - 1
    out = 0
    for level, (h, w) in enumerate(spatial_shapes.tolist()):
        v = value.split(sizes, dim=1)[level].permute(0, 2, 3, 1)
        v = v.reshape(batch * heads, channels, int(h), int(w))
        g = grids[:, :, :, level].permute(0, 2, 1, 3, 4).reshape(batch * heads, queries, points, 2)
        s = _F.grid_sample(v, g, mode="bilinear", padding_mode="zeros", align_corners=False)
        a = attention_weights[:, :, :, level].permute(0, 2, 1, 3).reshape(
            batch * heads, 1, queries, points)
        out = out + (s * a).sum(-1)
    out = out.reshape(batch, heads, channels, queries).permute(0, 3, 1, 2)
    return out.reshape(batch, queries, heads * channels).contiguous()
