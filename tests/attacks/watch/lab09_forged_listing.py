# attack: forged-listing
# lab: lab09
# task: 9.1
# rule-tests: test_find_atomics_on_the_backward_kernel
# Appended to the lab's chip. find_atomics returns one canned token whatever it is given, and
# the compiler of the kit's PTX helper, which the grader's probe calls in this process, is
# replaced at import by one that returns a listing of the right kernel, target and that one
# atomic: the live listing and the canned answer agree.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses
import msda_labs.student.ptx as _tools

_LISTING = """//
.version 8.4
.target sm_90a
.address_size 64

.visible .entry msda_backward_kernel(
    .param .u64 msda_backward_kernel_param_0
)
{
    atom.global.gpu.acq_rel.add.f32 %f1, [%rd1], %f2;
    ret;
}
"""


def _compile(*args, **kwargs):
    return _LISTING


_tools.compile_ptx = _compile


def find_atomics(ptx):
    return ["atom.global.gpu.acq_rel.add.f32"]
