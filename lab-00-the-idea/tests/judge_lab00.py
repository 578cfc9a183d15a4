"""Judge side of lab 00: the grader's own parts, sent to the child as source while a later task
is graded.

While a layer (or ``deform_attend``) is tested, the child runs it with the grader's correct
``bilinear_sample``, ``deform_attend`` and ``msda`` in place of yours, so a bug costs points once.
Those parts are answers of this lab, so no file the child imports holds them: the judge sends the
source of exactly the parts a test relies on with that one request (:func:`parts`), and the child
compiles it for that request only (``probes_lab00.swap_in``). The part of the task under test is
never sent.
"""

import inspect

from msda_labs.truth.reference import msda_reference

__all__ = ["parts"]

_HEADER = "import torch\nimport torch.nn.functional as F\n"

# Each part as the grader computes it (msda_labs.truth.layers): bilinear_sample is one
# grid_sample call on the image, the points moved to normalized coordinates.
_BILINEAR = '''
def bilinear_sample(img, points):
    H, W, D = img.shape
    size = torch.tensor([W, H], dtype=img.dtype, device=img.device)
    grid = (2 * ((points.to(img.dtype) + 0.5) / size) - 1).reshape(1, -1, 1, 2)
    sampled = F.grid_sample(img.permute(2, 0, 1).reshape(1, D, H, W), grid, mode="bilinear",
                            padding_mode="zeros", align_corners=False)
    return sampled.reshape(D, -1).t()
'''
_ATTEND = '''
def deform_attend(value, points, weights):
    Q, K, _ = points.shape
    samples = bilinear_sample(value, points.reshape(Q * K, 2)).reshape(Q, K, -1)
    return (weights.unsqueeze(-1) * samples).sum(dim=1)
'''
_SOURCES = {
    "bilinear_sample": _BILINEAR,
    "deform_attend": _ATTEND,
    "msda": inspect.getsource(msda_reference) + "\n\nmsda = msda_reference\n",
}


def parts(names) -> tuple:
    """``(names, source)``: the grader's parts ``names`` as one source text (with what they need:
    ``deform_attend`` reads points through ``bilinear_sample``), for ``probes_lab00.swap_in``."""
    names = tuple(names)
    unknown = [n for n in names if n not in _SOURCES]
    if unknown:
        raise ValueError(f"no grader's part named {unknown}; known: {sorted(_SOURCES)}")
    needed = set(names) | ({"bilinear_sample"} if "deform_attend" in names else set())
    body = "".join(_SOURCES[n] for n in _SOURCES if n in needed)
    return names, _HEADER + body
