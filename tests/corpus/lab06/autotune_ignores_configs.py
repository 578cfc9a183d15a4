"""Task 6.2: make_autotuned_forward ignores the configs it is given (always the defaults)."""
import triton


def make_autotuned_forward(configs=None):
    return triton.autotune(configs=forward_configs(), key=AUTOTUNE_KEY)(  # noqa: F821
        msda_forward_chunked_kernel)  # noqa: F821
