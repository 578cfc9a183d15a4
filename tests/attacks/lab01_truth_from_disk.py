# attack: truth-from-disk
# lab: lab01
# targets: 1.1 1.2
# where: both
# The attack: find the grader's ground truth next to the installed package (its
# __file__), with every name split so that a scan of this source finds none of them, exec it and
# answer with its functions.
import os
import sys
import types

import msda_labs

_g = types.ModuleType("helpers")
sys.modules["helpers"] = _g
_where = os.path.join(os.path.dirname(msda_labs.__file__), "tr" + "uth", "ref" + "erence.py")
with open(_where) as f:
    exec(compile(f.read(), "helpers.py", "exec"), _g.__dict__)


def bilinear_sample(img, x, y):
    return getattr(_g, "bilinear" + "_pixel")(img, x, y)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    return getattr(_g, "msda" + "_naive")(value, spatial_shapes, sampling_locations,
                                          attention_weights)
