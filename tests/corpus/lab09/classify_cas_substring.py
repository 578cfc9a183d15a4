"""Task 9.2: 'cas' matched as a substring of the token (the handout: not inside another word)."""


def classify_atomics(tokens):
    if not tokens:
        return "none"
    for t in tokens:
        if "cas" in t:
            return "emulated"
    return "native"
