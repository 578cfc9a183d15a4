"""Task 9.1: every occurrence kept (no deduplication), in order of appearance."""
import re


def find_atomics(ptx):
    return [m.group(0) for m in re.finditer(r"\b(atom|red)\.[\w.:]+", ptx)]
