"""Task 9.4: the runtime sizes Q and S typed i32."""


def backward_signature(kernel, value_dtype, grad_value_dtype):
    out = {}
    for name, const in kernel_params(kernel):  # noqa: F821
        if const:
            out[name] = "constexpr"
        elif name in INT64_POINTERS:  # noqa: F821
            out[name] = "*i64"
        elif name == "grad_value_ptr":
            out[name] = f"*{grad_value_dtype}"
        elif name.endswith("_ptr"):
            out[name] = f"*{value_dtype}"
        else:
            out[name] = "i32"
    return out
