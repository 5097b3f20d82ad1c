"""Swap a method of a transformers class for an export form inside a `with` block (the families' patchers)."""

import contextlib


@contextlib.contextmanager
def swapped(cls: type, name: str, replacement):
    """`cls.name` is `replacement` inside the block; the original is restored on exit, even on error."""
    original = getattr(cls, name)
    setattr(cls, name, replacement)
    try:
        yield
    finally:
        setattr(cls, name, original)
