# Not an attack: the recorder behind lab01_lookup_table.py. Graded once, unseparated, with the
# public cases, it answers with the lab's chip (copied beside it as answers.py) and writes every
# (input hash, answer) pair to records/ beside itself: what a student learns by printing the
# inputs of a public grading and running the shipped reference on them offline.
import importlib.util
import os
import uuid

import torch

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("lookup",
                                               os.path.join(_here, "lab01_lookup_table.py"))
_lookup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lookup)
_spec = importlib.util.spec_from_file_location("answers", os.path.join(_here, "answers.py"))
_chip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_chip)
os.makedirs(os.path.join(_here, "records"), exist_ok=True)


def _record(key, out):
    torch.save((key, out), os.path.join(_here, "records", f"{uuid.uuid4().hex}.pt"))
    return out


def bilinear_sample(img, x, y):
    return _record(_lookup._key("bilinear_sample", img, float(x), float(y)),
                   _chip.bilinear_sample(img, x, y))


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    return _record(_lookup._key("msda_naive_student", value, spatial_shapes, sampling_locations,
                                attention_weights),
                   _chip.msda_naive_student(value, spatial_shapes, sampling_locations,
                                            attention_weights))
