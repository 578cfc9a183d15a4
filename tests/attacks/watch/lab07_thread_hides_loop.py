# attack: thread-hides-loop
# lab: lab07
# task: 7.1
# rule-tests: test_grad_attention_weights_is_vectorized
# others-pass: test_grad_attention_weights
# Appended to the lab's chip. grad_attention_weights loops over the batch in Python (the loop the
# rule forbids), in a thread of its own: the grader's count of torch calls watches the thread that
# called the function, which makes no torch call at all, whatever the batch size.
# ruff: noqa: F821 - the chip this block is appended to defines the names it uses
import threading


def _attention_loop(corners, g, out):
    parts = []
    for b in range(g.shape[0]):
        sampled = (corners.w[:, b, ..., None] * corners.v[:, b]).sum(0)  # [Q, M, L, K, D]
        parts.append((sampled * g[b][:, :, None, None, :]).sum(-1))
    out.append(torch.stack(parts))


def grad_attention_weights(corners, g):
    out = []
    worker = threading.Thread(target=_attention_loop, args=(corners, g, out))
    worker.start()
    worker.join()
    return out[0]
