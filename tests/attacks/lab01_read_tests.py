# attack: read-tests
# lab: lab01
# targets: 1.1 1.2
# where: both
# Finds the lab's own grading tests on disk (next to this file in a student repository, or in the
# kit the package came from), runs them as a module and answers with what the judge compares
# against: the references the test module imported.
import glob
import os
import sys
import types

import msda_labs

_roots = [os.path.dirname(os.path.abspath(__file__)), os.getcwd(),
          os.path.dirname(os.path.dirname(os.path.dirname(msda_labs.__file__)))]
_found = [p for r in _roots for p in glob.glob(os.path.join(r, "**", "test_lab01*.py"),
                                               recursive=True)]
_t = types.ModuleType("lab01_tests")
sys.modules["lab01_tests"] = _t
sys.path.insert(0, os.path.dirname(_found[0]))
with open(_found[0]) as f:
    exec(compile(f.read(), _found[0], "exec"), _t.__dict__)


def bilinear_sample(img, x, y):
    return _t.pixel_reads(img, _t.torch.tensor([[x, y]], dtype=_t.torch.float64))[0].to(img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    return _t.msda_reference(value, spatial_shapes, sampling_locations, attention_weights)
