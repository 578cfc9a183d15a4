# attack: numbers-loop
# lab: lab07
# task: 7.1
# rule-tests: test_grad_attention_weights_is_vectorized
# others-pass: test_grad_attention_weights
# Appended to the lab's chip. grad_attention_weights reads the corners, weights and upstream
# gradient out as Python numbers (.tolist(), a handful of torch calls whatever the sizes) and
# loops over every sample and channel in plain Python: the count of torch calls stays the same
# from a small problem to a big one, the lines run do not.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses


def grad_attention_weights(corners, g):
    shape = tuple(corners.w.shape[1:])  # (B, Q, M, L, K)
    B, Q, M, L, K = shape
    D = g.shape[-1]
    v = corners.v.tolist()
    w = corners.w.tolist()
    gl = g.tolist()
    out = [0.0] * (B * Q * M * L * K)
    i = 0
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                for lvl in range(L):
                    for k in range(K):
                        total = 0.0
                        for d in range(D):
                            sampled = sum(w[c][b][q][m][lvl][k] * v[c][b][q][m][lvl][k][d]
                                          for c in range(4))
                            total += sampled * gl[b][q][m][d]
                        out[i] = total
                        i += 1
    return torch.tensor(out, dtype=torch.float32).reshape(shape)
