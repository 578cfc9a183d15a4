"""Task 9.5: the value and buffer dtypes handed to backward_signature in swapped order."""


def compile_backward(kernel, value_dtype, grad_value_dtype, cc):
    sig = backward_signature(kernel, grad_value_dtype, value_dtype)  # noqa: F821
    consts = {k: AOT_SIZES[k] for k, v in sig.items() if v == "constexpr"}  # noqa: F821
    return compile_ptx(kernel, sig, consts, cc)  # noqa: F821
