# attack: nested-prediction
# lab: lab08
# task: 8.1
# rule-tests: test_predict_racy_histogram test_predict_racy_histogram_skewed
# rule-tests: test_predict_racy_histogram_any_block
# Appended to the lab's chip. predict_racy_histogram is bound again, inside `if True:`, by a def
# that runs the racy kernel instead of predicting it: its answers are exactly right, and only the
# rule "predict without running it" tells it apart. Python binds the nested def as the module's
# predict_racy_histogram; a rule that read only the module's top-level statements would read the
# chip's prediction.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses
if True:
    def predict_racy_histogram(idx, n_bins, BLOCK):
        return histogram_racy(idx, n_bins, BLOCK)
