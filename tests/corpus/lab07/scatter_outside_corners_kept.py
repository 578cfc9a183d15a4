"""Task 7.3: the corners outside their level not zeroed (their share lands on the clamped pixel)."""


def scatter_grad_value(grad_value_rows, corners, g, attention_weights):
    D = g.shape[-1]
    part = (attention_weights * corners.w)[..., None] * g[:, :, :, None, None, :]
    grad_value_rows.index_add_(0, corners.row.flatten(), part.reshape(-1, D))
    return grad_value_rows
