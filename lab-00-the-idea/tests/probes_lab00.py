"""Probes of lab 00: what the isolated child runs against your module (no test functions here).

The judge (``test_lab00_idea.py``) sends one of these functions with its arguments; the child
calls it with your module first and sends the result back. While a later task is graded, the
child swaps in the grader's correct ``bilinear_sample``, ``deform_attend`` and ``msda`` for
yours, so a bug costs points once: the judge sends their source with that request
(``judge_lab00.parts``); nothing imported here holds them.
"""

import torch
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (see the NOTE below)

from msda_labs.grading.spies import swap_in

# NOTE: torch.autograd.grad imports torch.fx.experimental.symbolic_shapes (and sympy) the first
# time it is given grad_outputs: 0.7-1.6 s here, paid again by every forked child. Importing it
# above lets the grading worker, which preloads this module, pay once (a
# gradient test went from 1.3 s to 0.2 s on a loaded 2-core machine).


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


def probe_function(module, name, args, *, parts=(), count=False, grad_out=None):
    """Call ``name(*args)``; optionally count grid_sample calls and take input gradients."""
    swap_in(module, parts)
    calls = count_grid_samples(module) if count else None
    wants = [grad_out is not None and isinstance(a, torch.Tensor) and a.is_floating_point()
             for a in args]
    args = [a.clone().requires_grad_(True) if w else a for a, w in zip(args, wants)]
    out = getattr(module, name)(*args)
    result = {"out": out}
    if calls is not None:
        result["calls"] = calls[0]
    if grad_out is not None:
        result["grads"] = grads(out, grad_out, [a for a, w in zip(args, wants) if w])
    return result


def probe_layer(module, cls_name, init_args, state, inputs, *, parts=(), grad_out=None,
                grad_params=()):
    """Build the layer, load the test's weights, run it (and optionally backward)."""
    swap_in(module, parts)
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
