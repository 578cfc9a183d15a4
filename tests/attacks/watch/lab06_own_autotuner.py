# attack: own-autotuner
# lab: lab06
# task: 6.2
# rule-tests: test_autotune_config_space
# others-pass: test_autotuned_launch
# Appended to the lab's chip. The autotuner it really builds is keyed on M alone (a config tuned
# for one Q, D, L or K is kept for every other: the rule broken), and what it declares when asked
# without configs is an object of its own class, named Autotuner, that carries the declared
# search space, the full key and the kernel.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses


class Autotuner:
    """Not Triton's: only the attributes the grader reads."""

    def __init__(self, fn, configs, keys):
        self.fn, self.configs, self.keys = fn, configs, keys
        self.arg_names = list(fn.arg_names)


def make_autotuned_forward(configs=None):
    if configs is None:
        return Autotuner(msda_forward_chunked_kernel, forward_configs(), list(AUTOTUNE_KEY))
    return triton.autotune(configs=configs, key=["M"])(msda_forward_chunked_kernel)
