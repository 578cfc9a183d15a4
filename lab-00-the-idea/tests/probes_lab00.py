"""Probes of lab 00: what the isolated child runs against your module (no test functions here).

The judge (``test_lab00_idea.py``, ``test_lab00_layers.py``) sends one of these functions with its
arguments; the child calls it with your module first and sends the result back.

A layer (and ``deform_attend``) is run twice in one request: with your own ``bilinear_sample``,
``deform_attend`` and ``msda``, and with those parts replaced by stand-ins that read a map in a way
of their own (:func:`smooth_msda`: every pixel weighed by a Gaussian of its distance to the point,
no corners, no padding). The stand-ins are not the answer to any task; the judge computes its
references both ways, and a test passes when either run matches. So a bug in a part costs points
in the part's own task only, and nothing the child holds is the grader's ground truth.
"""

import torch
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (see the NOTE below)

from msda_labs.grading.judge.probes import both_runs

# NOTE: torch.autograd.grad imports torch.fx.experimental.symbolic_shapes (and sympy) the first
# time it is given grad_outputs: 0.7-1.6 s here, paid again by every forked child. Importing it
# above lets the grading worker, which preloads this module, pay once (a
# gradient test went from 1.3 s to 0.2 s on a loaded 2-core machine).

# -- the stand-in reader --------------------------------------------------------------------------
def _smooth_read(maps, points):
    """(N, H, W, D) maps read at (N, P, 2) pixel points (x, y): (N, P, D). Each pixel (row i,
    col j) weighs exp(-((x - j)**2 + (y - i)**2)): smooth in the points, every pixel counts."""
    N, H, W, D = maps.shape
    cols = torch.arange(W, dtype=points.dtype, device=points.device).repeat(H)
    rows = torch.arange(H, dtype=points.dtype, device=points.device).repeat_interleave(W)
    dx = points[..., 0:1] - cols  # [N, P, H*W]
    dy = points[..., 1:2] - rows
    weights = torch.exp(-(dx * dx + dy * dy))
    return weights.to(maps.dtype) @ maps.reshape(N, H * W, D)


def smooth_sample(img, points):
    """Stand-in for ``bilinear_sample``: (H, W, D) image, (N, 2) pixel points -> (N, D)."""
    return _smooth_read(img.unsqueeze(0), points.to(img.dtype).unsqueeze(0))[0]


def smooth_attend(value, points, weights):
    """Stand-in for ``deform_attend``: (H, W, D), (Q, K, 2) pixel points, (Q, K) -> (Q, D)."""
    Q, K, _ = points.shape
    samples = smooth_sample(value, points.reshape(Q * K, 2)).reshape(Q, K, -1)
    return (weights.unsqueeze(-1) * samples).sum(dim=1)


def smooth_msda(value, spatial_shapes, sampling_locations, attention_weights):
    """Stand-in for ``msda``: value (B, S, M, D), shapes (L, 2) as (H, W), normalized locations
    (B, Q, M, L, K, 2), weights (B, Q, M, L, K) -> (B, Q, M * D), each level read with
    :func:`_smooth_read` at the pixel points x * W - 0.5, y * H - 0.5."""
    B, S, M, D = value.shape
    _, Q, _, L, K, _ = sampling_locations.shape
    shapes = [(int(h), int(w)) for h, w in torch.as_tensor(spatial_shapes).tolist()]
    out = 0
    start = 0
    for lvl, (h, w) in enumerate(shapes):
        maps = value[:, start:start + h * w].permute(0, 2, 1, 3).reshape(B * M, h, w, D)
        start += h * w
        size = torch.tensor([w, h], dtype=sampling_locations.dtype,
                            device=sampling_locations.device)
        pix = sampling_locations[:, :, :, lvl] * size - 0.5  # [B, Q, M, K, 2]
        pix = pix.permute(0, 2, 1, 3, 4).reshape(B * M, Q * K, 2)
        read = _smooth_read(maps, pix).reshape(B, M, Q, K, D)
        weights = attention_weights[:, :, :, lvl].permute(0, 2, 1, 3).unsqueeze(-1)
        out = out + (read * weights.to(read.dtype)).sum(dim=3)  # [B, M, Q, D]
    return out.permute(0, 2, 1, 3).reshape(B, Q, M * D)


def _stand_ins(names) -> tuple[dict, list]:
    """The stand-ins for the parts ``names``, and a one-element list counting the calls that reach
    the stand-in ``bilinear_sample``."""
    calls = [0]

    def counted_sample(img, points):
        calls[0] += 1
        return smooth_sample(img, points)

    every = {"bilinear_sample": counted_sample, "deform_attend": smooth_attend,
             "msda": smooth_msda}
    return {name: every[name] for name in names}, calls


# -- the probes -----------------------------------------------------------------------------------
def count_grid_samples(module):
    """Count every torch.grid_sampler call (where F.grid_sample ends), also through names the
    submission imported directly. Returns a one-element list that holds the count."""
    original = torch.grid_sampler
    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    torch.grid_sampler = counted
    for name, obj in list(vars(module).items()):
        if obj is original:
            setattr(module, name, counted)
    return calls


def grads(out, grad_out, tensors):
    """Gradients of <out, grad_out> for ``tensors``; None where none flows."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(grad_out.shape) \
            or not out.requires_grad:
        return [None] * len(tensors)
    return list(torch.autograd.grad(out, tensors, grad_out.to(out.dtype), allow_unused=True))


def _both_runs(module, names, run, *args):
    """``{"stand_in": run with the parts ``names`` replaced by the stand-ins, "own": run with
    yours}``; the stand-in run also says how many calls reached the stand-in bilinear_sample."""
    stand_ins, calls = _stand_ins(names)
    result = both_runs(module, stand_ins, run, *args)
    result["stand_in"]["sample_calls"] = calls[0]
    return result


def _call_function(module, name, args, grad_out):
    wants = [grad_out is not None and isinstance(a, torch.Tensor) and a.is_floating_point()
             for a in args]
    args = [a.clone().requires_grad_(True) if w else a for a, w in zip(args, wants)]
    out = getattr(module, name)(*args)
    result = {"out": out}
    if grad_out is not None:
        result["grads"] = grads(out, grad_out, [a for a, w in zip(args, wants) if w])
    return result


def probe_function(module, name, args, *, stand_ins=(), count=False, grad_out=None):
    """Call ``name(*args)``; optionally count grid_sample calls and take input gradients.

    With ``stand_ins`` (names of parts ``name`` is built on), two runs come back:
    ``{"stand_in": run with those parts replaced (and "sample_calls", the calls that reached the
    stand-in bilinear_sample), "own": run with yours (or {"error": ...})}``.
    """
    if stand_ins:
        return _both_runs(module, stand_ins, _call_function, name, args, grad_out)
    calls = count_grid_samples(module) if count else None
    result = _call_function(module, name, args, grad_out)
    if calls is not None:
        result["calls"] = calls[0]
    return result


def _run_layer(module, cls_name, init_args, state, inputs, grad_out, grad_params):
    torch.manual_seed(0)
    layer = getattr(module, cls_name)(*init_args)
    structure = {name: tuple(t.shape) for name, t in layer.named_parameters()}
    result = {"structure": structure}
    if any(structure.get(name) != tuple(t.shape) for name, t in state.items()):
        return result
    layer.load_state_dict(state, strict=False)
    wants = [grad_out is not None and t.is_floating_point() for t in inputs]
    leaves = [t.clone().requires_grad_(w) for t, w in zip(inputs, wants)]
    out = layer(*leaves)
    result["out"] = out
    if grad_out is not None:
        params = dict(layer.named_parameters())
        targets = [params[name] for name in grad_params] + [t for t in leaves if t.requires_grad]
        result["grads"] = grads(out, grad_out, targets)
    return result


def probe_layer(module, cls_name, init_args, state, inputs, *, stand_ins=(), grad_out=None,
                grad_params=()):
    """Build the layer, load the test's weights, run it (and optionally backward): with the
    parts ``stand_ins`` replaced by the stand-ins, and with yours (see :func:`probe_function`)."""
    args = (cls_name, init_args, state, inputs, grad_out, grad_params)
    if stand_ins:
        return _both_runs(module, stand_ins, _run_layer, *args)
    return _run_layer(module, *args)
