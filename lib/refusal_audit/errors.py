"""The errors every layer raises on bad input, in a module of their own so that nothing imports ``config``
(and its study registry) only to say that a value is wrong."""
from __future__ import annotations


class ParamsError(ValueError):
    """A params file (or a user's input file) that does not fit what the run expects; the message names the
    file, the key or row, what was expected and what was found."""


def need(ok: bool, where: str, key: str, expected: str, got) -> None:
    """Raise ParamsError naming the file, the dotted key, what was expected and what was found."""
    if not ok:
        raise ParamsError(f"{where}: {key}: expected {expected}, got {got!r}")
