"""Task 7.3: index assignment (rows[idx] += ...) where two samples share a pixel: lost updates."""


def scatter_grad_value(grad_value_rows, corners, g, attention_weights):
    D = g.shape[-1]
    part = (attention_weights * corners.w * corners.valid)[..., None] * g[:, :, :, None, None, :]
    idx = corners.row.reshape(-1)
    grad_value_rows[idx] += part.reshape(-1, D)
    return grad_value_rows
