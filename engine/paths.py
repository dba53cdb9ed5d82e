"""Where the rule files, the grammar and the worked examples live (no sympy or lark import here)."""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent

#: how the rule language's parser is built (its parse tables are kept for these)
LARK_OPTIONS = dict(parser="lalr", propagate_positions=True, start=["start", "expr"],
                    maybe_placeholders=True)


#: the reference's file name in each format of ``memform docs``
DOC_FILES = {"md": "reference.md", "latex": "reference.tex", "html": "reference.html"}


def data_path(name: str) -> Path:
    """The folder ``grammar`` or ``formulas``: the copy inside the wheel, else the source tree."""
    packaged = _HERE / "_data" / name
    if packaged.is_dir():
        return packaged
    return _HERE.parent / name


def grammar_path() -> Path:
    return data_path("grammar") / "formulas.lark"
