"""Where the rule files and the grammar live (no sympy or lark import here)."""
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


def lark_parser():
    """A new LALR parser of the rule language.  Building its parse tables takes longer than
    an interactive answer should, so they are kept in the user's cache directory as plain
    data (lark's own serialized form, through :mod:`engine.cache`, never a pickle)."""
    import lark
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    from .cache import read, source_key, write
    key = source_key()
    stored = read("grammar", key) if key else None
    if isinstance(stored, dict) and stored.get("lark") == lark.__version__:
        try:
            parser = lark.Lark._load_from_dict(stored["data"], stored["memo"])
            if all(getattr(parser.options, k) == v for k, v in LARK_OPTIONS.items()):
                return parser
        except Exception:  # not lark's tables after all: built afresh below
            pass
    parser = lark.Lark(grammar_path().read_text(encoding="utf-8"), **LARK_OPTIONS)
    if key:
        data, memo = parser.memo_serialize([TerminalDef, Rule])
        write("grammar", key, {"lark": lark.__version__, "data": data, "memo": memo})
    return parser
