"""One reading of a submission: its bytes decoded once, as the compiler would decode them.

The judge reads the rules off this text, and the child compiles this very text (never the bytes
again), so the judge and the child cannot see two programs. The encoding is found as Python finds
it (a byte-order mark, a ``coding:`` declaration on the first two lines, else UTF-8:
:func:`tokenize.detect_encoding`), and only UTF-8 is accepted, with or without a byte-order mark
or a declaration that says UTF-8; anything else is refused with a message that says what to
change. Line breaks, tabs, form feeds and non-ASCII names are left as they are: the compiler
reads them from the text as it would from the file.
"""

from __future__ import annotations

import codecs
import io
import tokenize

__all__ = ["SourceRefused", "decode_submission", "source_lines"]

ACCEPTED = frozenset({"utf-8", "utf-8-sig"})
"""The codecs (by their canonical name) a submission may be written in."""


class SourceRefused(ValueError):
    """The submission's bytes are not a UTF-8 Python source; the message says what to change."""


def decode_submission(data: bytes, name: str = "your module") -> str:
    """The text of a submission's bytes, decoded exactly as the compiler would decode them, or
    :class:`SourceRefused` when they are not UTF-8 (a declaration of another encoding, a
    declaration that contradicts a byte-order mark, bytes that are not UTF-8)."""
    save = (f"save {name} as UTF-8 (the default of most editors; with or without a byte-order "
            f"mark)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # an unknown codec, or a declaration against the BOM
        raise SourceRefused(f"{name} cannot be read: {exc.msg}; the grader reads UTF-8 only: "
                            f"remove the `coding:` line and {save}") from None
    codec = codecs.lookup(encoding).name
    if codec not in ACCEPTED:
        raise SourceRefused(
            f"{name} declares the encoding {encoding!r} in a `coding:` comment on its first "
            f"lines; the grader reads UTF-8 only, and Python would read this file as another "
            f"program than its text shows: remove that line (or make it "
            f"`# -*- coding: utf-8 -*-`) and {save}")
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SourceRefused(f"{name} is not valid UTF-8 (line {line} holds the byte "
                            f"{data[exc.start]:#04x}, which UTF-8 does not allow there): "
                            f"{save}") from None


def source_lines(text: str) -> list[str]:
    """The lines of ``text`` as the compiler numbers them (ends of line ``\\n``, ``\\r\\n`` and
    ``\\r``, each kept as ``\\n``; a form feed or another Unicode line separator does not end a
    line, as :meth:`str.splitlines` would have it): what :mod:`linecache` holds, so that
    tracebacks and ``inspect.getsource`` show the lines the compiler ran."""
    return io.StringIO(text, newline=None).readlines()
