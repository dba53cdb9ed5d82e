"""The grammar builds as strict LALR, and every alias has a Transformer method."""
import re

from lark import Lark

from engine.paths import grammar_path
from engine.lang.transform import ToDecls


def test_grammar_is_strict_lalr():
    Lark(grammar_path().read_text(), parser="lalr", strict=True, start=["start", "expr"])


def test_every_alias_and_rule_has_a_transformer_method():
    text = grammar_path().read_text()
    aliases = set(re.findall(r"->\s*([a-z_]+)", text))
    rules = {m for m in re.findall(r"^\??([a-z_]+)\s*:", text, re.M) if not m.startswith("_")}
    inlined = {"expr", "cond", "conj", "neg_cond", "relation", "sum", "product", "unary", "power",
               "atom", "choice", "bound",  # `?` rules: always replaced by a child or an alias
               "domain"}  # every alternative has an alias
    missing = sorted(n for n in (aliases | rules) - inlined if not hasattr(ToDecls, n))
    assert missing == []
