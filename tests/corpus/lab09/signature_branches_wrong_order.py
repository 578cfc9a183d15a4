"""Task 9.4: the "_ptr" rule tested before the int64 tables and grad_value (branches in the wrong
order), so shapes_ptr, starts_ptr and grad_value_ptr get the value dtype."""


def backward_signature(kernel, value_dtype, grad_value_dtype):
    sig = {}
    for name, const in kernel_params(kernel):  # noqa: F821
        if const:
            kind = "constexpr"
        elif name.endswith("_ptr"):
            kind = "*" + value_dtype
        elif name in ("shapes_ptr", "starts_ptr"):
            kind = "*i64"
        elif name == "grad_value_ptr":
            kind = "*" + grad_value_dtype
        else:
            kind = "i64"
        sig[name] = kind
    return sig
