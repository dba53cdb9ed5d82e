"""The rule language's LALR parser, its parse tables kept in the user's cache."""
from __future__ import annotations

from ..lazy import lazy
from ..paths import LARK_OPTIONS, grammar_path
from ..store import read, source_key, write

lark = lazy("lark")


def lark_parser():
    """A new LALR parser of the rule language.  Building its parse tables takes longer than
    an interactive answer should, so they are kept in the user's cache directory as plain
    data (lark's own serialized form, through :mod:`engine.store`, never a pickle)."""
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
        data, memo = parser.memo_serialize([lark.lexer.TerminalDef, lark.grammar.Rule])
        write("grammar", key, {"lark": lark.__version__, "data": data, "memo": memo})
    return parser
