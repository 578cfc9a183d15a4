"""Task 9.2: only a token ending in .cas.b32 counts as compare-and-swap (one spelling)."""


def classify_atomics(tokens):
    if any(t.endswith(".cas.b32") for t in tokens):
        return "emulated"
    return "native" if len(tokens) > 0 else "none"
