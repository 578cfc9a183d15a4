# attack: patch-compare
# lab: lab01
# targets: 1.1 1.2
# Makes every comparison it can reach say "equal": torch.testing.assert_close, torch.allclose,
# torch.equal, Tensor.allclose, numpy's allclose / array_equal / testing.assert_allclose and the
# kit's own expect_close, then answers with zeros.
import numpy
import numpy.testing
import torch
import torch.testing

import msda_labs.grading as grading


def _yes(*args, **kwargs):
    return True


def _quiet(*args, **kwargs):
    return None


torch.allclose = torch.equal = torch.Tensor.allclose = torch.Tensor.equal = _yes
torch.testing.assert_close = torch.testing.assert_allclose = _quiet
numpy.allclose = numpy.array_equal = _yes
numpy.testing.assert_allclose = numpy.testing.assert_array_equal = _quiet
for _name in ("expect_close", "expect_equal"):
    setattr(grading, _name, _quiet)
    setattr(grading.judge.compare, _name, _quiet)


def bilinear_sample(img, x, y):
    return torch.zeros(img.shape[-1], dtype=img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
