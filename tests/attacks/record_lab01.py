# Not an attack: the recorder behind lab01_lookup_table.py. Graded once, unseparated, with the
# public cases, it writes every input its functions are called with to the folder RECORDS (filled
# in by tests/attacks/suite.py) and answers zeros: what a student learns by printing the inputs of
# a public grading. The answers are computed offline with the shipped reference, outside any
# grading (build_lookup_table).
import os
import uuid

import torch

RECORDS = ""


def _record(name, args):
    torch.save((name, args), os.path.join(RECORDS, f"{uuid.uuid4().hex}.pt"))


def bilinear_sample(img, x, y):
    _record("bilinear_sample", (img, float(x), float(y)))
    return torch.zeros(img.shape[-1], dtype=img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    _record("msda_naive_student", (value, spatial_shapes, sampling_locations, attention_weights))
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
