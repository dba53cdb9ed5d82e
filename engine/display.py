"""Display names: the papers' symbols for the library's plain names (docs and --latex)."""
from __future__ import annotations

import sympy

#: plain name -> LaTeX symbol (Korthikanti et al. 2022, Rajbhandari et al. 2020 notation)
DISPLAY = {
    "hidden_size": "d", "num_hidden_layers": "L", "num_attention_heads": "a",
    "num_key_value_heads": "a_{kv}", "head_dim": "d_{h}", "intermediate_size": "d_{ff}",
    "vocab_size": "V", "seq_len": "s", "micro_batch": "b", "tp": "t", "pp": "p", "dp": "N",
    "n_params": "P", "capacity": "C",
}


def tex_name(symbol: sympy.Symbol) -> str:
    return DISPLAY.get(symbol.name) or r"\mathrm{%s}" % symbol.name.replace("_", r"\_")


def latex(expr: sympy.Basic) -> str:
    """LaTeX of ``expr`` with display names (``n_params`` -> ``P``)."""
    return sympy.latex(expr, symbol_names={s: tex_name(s) for s in expr.free_symbols})
