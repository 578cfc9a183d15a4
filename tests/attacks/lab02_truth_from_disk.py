# attack: truth-from-disk
# lab: lab02
# targets: 2.2
# The ground truth read off the disk through the package's __file__ (names split against the
# source scan), exec'd, and flat_msda answered with its vectorized float64 forward.
import os
import sys
import types

import msda_labs

_g = types.ModuleType("helpers")
sys.modules["helpers"] = _g
_where = os.path.join(os.path.dirname(msda_labs.__file__), "tr" + "uth", "ref" + "erence.py")
with open(_where) as f:
    exec(compile(f.read(), "helpers.py", "exec"), _g.__dict__)


def flat_index(b, s, m, d, S, M, D):
    raise NotImplementedError("Task 2.1: flat_index")


def flat_msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    out = getattr(_g, "msda" + "_float64")(value, spatial_shapes, sampling_locations,
                                           attention_weights, level_start_index)
    return out.to(value.dtype)


def max_flat_index(B, S, M, D):
    raise NotImplementedError("Task 2.3: max_flat_index")


def overflows_int32(B, S, M, D):
    raise NotImplementedError("Task 2.3: overflows_int32")
