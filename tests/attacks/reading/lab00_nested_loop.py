# attack: nested-loop
# lab: lab00
# task: 0.1
# rule-tests: test_bilinear_one_grid_sample_no_loop
# Appended to the lab's chip. bilinear_sample is bound again, inside `if True:`, by a def that
# loops (once, around the chip's own one grid_sample call: the output and the call count stay
# right). Python binds the nested def as the module's bilinear_sample; a rule that read only the
# module's top-level statements would see the chip's def alone and keep the point.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses
if True:
    _chip_sample = bilinear_sample

    def bilinear_sample(img, points):
        for _ in range(1):
            out = _chip_sample(img, points)
        return out
