"""Where the rule files and the grammar live (no sympy or lark import here)."""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def data_path(name: str) -> Path:
    """The folder ``grammar`` or ``formulas``: the copy inside the wheel, else the source tree."""
    packaged = _HERE / "_data" / name
    if packaged.is_dir():
        return packaged
    return _HERE.parent / name


def grammar_path() -> Path:
    return data_path("grammar") / "formulas.lark"


def lark_parser():
    """A new LALR parser of the rule language.  lark keeps its tables in the user's cache
    directory (checked by lark against a hash of the grammar, rebuilt when they differ)."""
    from lark import Lark
    from .cache import grammar_cache_file
    return Lark(grammar_path().read_text(encoding="utf-8"), parser="lalr", propagate_positions=True,
                start=["start", "expr"], maybe_placeholders=True, cache=grammar_cache_file())
