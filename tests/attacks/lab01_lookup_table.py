# attack: lookup-table
# lab: lab01
# targets: 1.1 1.2
# Answers from a table computed offline with the shipped reference for the inputs the public
# grading uses, keyed by a hash of the inputs; anything else gets zeros. TABLE is filled in by
# tests/attacks/suite.py (build_lookup_table) from a recorded public grading run: the file that
# is graded carries the whole table.
import base64
import hashlib
import io
import zlib

import torch

TABLE = ""


def _key(name, *args):
    h = hashlib.sha256(name.encode())
    for a in args:
        if isinstance(a, torch.Tensor):
            t = a.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(a).encode())
    return h.hexdigest()


_answers = torch.load(io.BytesIO(zlib.decompress(base64.b64decode(TABLE)))) if TABLE else {}


def bilinear_sample(img, x, y):
    found = _answers.get(_key("bilinear_sample", img, float(x), float(y)))
    return found if found is not None else torch.zeros(img.shape[-1], dtype=img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    found = _answers.get(_key("msda_naive_student", value, spatial_shapes, sampling_locations,
                              attention_weights))
    if found is not None:
        return found
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
