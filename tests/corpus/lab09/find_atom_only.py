"""Task 9.1: only atom. instructions found (red. reductions missed)."""
import re


def find_atomics(ptx):
    return sorted(set(re.findall(r"\batom\.[\w.:]+", ptx)))
