"""Display names: the papers' symbols for the library's plain names (docs, --latex, notebooks).

One table, :data:`DISPLAY`, maps a plain name to its LaTeX symbol; :func:`latex` and
:func:`mathml` print sympy expressions with it.  Names without a symbol stay whole
(``alloc_margin``, never "alloc subscript margin").
"""
from __future__ import annotations

import re

import sympy
from sympy.printing.latex import LatexPrinter
from sympy.printing.mathml import MathMLPresentationPrinter

#: plain name -> LaTeX symbol (Korthikanti et al. 2022, Rajbhandari et al. 2020 notation)
DISPLAY = {
    "hidden_size": "d", "num_hidden_layers": "L", "num_attention_heads": "a",
    "num_key_value_heads": "a_{kv}", "head_dim": "d_{h}", "intermediate_size": "d_{ff}",
    "vocab_size": "V", "seq_len": "s", "micro_batch": "b", "tp": "t", "pp": "p", "dp": "N",
    "n_params": "P", "capacity": "C",
    # what solve's closed forms fit against (a GPU's capacity less its driver's reserve): the
    # papers' C; the two never appear in one expression (usable_memory is a rule of capacity)
    "usable_memory": "C",
}


def tex_name(symbol: sympy.Symbol) -> str:
    return DISPLAY.get(symbol.name) or r"\mathrm{%s}" % symbol.name.replace("_", r"\_")


def latex(expr: sympy.Basic, **settings) -> str:
    """LaTeX of ``expr`` with display names (``n_params`` -> ``P``).

    ``settings`` go to sympy's LaTeX printer (e.g. ``long_frac_ratio``).

    Examples
    --------
    >>> print(latex(sympy.Symbol("n_params") / sympy.Symbol("alloc_margin")))
    \\frac{P}{\\mathrm{alloc\\_margin}}
    """
    key = tuple(sorted(settings.items()))
    printer = _LATEX.get(key)
    if printer is None:
        printer = _LATEX[key] = _Latex(settings)
    return printer.doprint(expr)


class _Latex(LatexPrinter):
    """sympy's LaTeX printer with display names, remembering what it printed.  Closed forms
    share large parts (the parameter count, the static states in every phase of the peak),
    which sympy printed again at every use: half of ``memform docs``.  The printer keeps no
    state between calls but its settings, so a part prints the same wherever it stands."""

    #: the most parts remembered; then the memory starts afresh
    MAX_REMEMBERED = 200_000

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self._printed: dict = {}

    def _print_Symbol(self, expr, style="plain"):
        return tex_name(expr)

    def _print(self, expr, **kwargs) -> str:
        try:
            key = (type(expr), expr, tuple(sorted(kwargs.items())))
            return self._printed[key]
        except KeyError:
            pass
        except TypeError:  # unhashable (a list of arguments): printed every time
            return super()._print(expr, **kwargs)
        if len(self._printed) >= self.MAX_REMEMBERED:
            self._printed.clear()
        shown = self._printed[key] = super()._print(expr, **kwargs)
        return shown


_LATEX: dict[tuple, _Latex] = {}


def equation(name: str, expr: sympy.Basic) -> sympy.Eq:
    """``name = expr`` as an unevaluated equation (its left side prints as a display name)."""
    return sympy.Eq(sympy.Symbol(name), expr, evaluate=False)


class _MathML(MathMLPresentationPrinter):
    """Presentation MathML with display names and ``Piecewise`` as a brace of cases.  Like
    :class:`_Latex` it remembers what it printed: a part printed before is its markup, as the
    raw text node sympy's printer writes as it is (a DOM node has one parent)."""

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self._printed: dict = {}

    def _print(self, expr, **kwargs):
        try:
            key = (type(expr), expr, tuple(sorted(kwargs.items())))
            found = self._printed[key]
        except KeyError:
            pass
        except TypeError:  # unhashable: printed every time
            return super()._print(expr, **kwargs)
        else:
            if not isinstance(found, str):  # its second use: its markup, from then on
                found = self._printed[key] = found.toxml()
            return self.dom.createTextNode(found)  # raw (MathMLPrinterBase): written unescaped
        if len(self._printed) >= _Latex.MAX_REMEMBERED:
            self._printed.clear()
        node = self._printed[key] = super()._print(expr, **kwargs)
        return node

    def _print_Symbol(self, sym, style="plain"):
        shown = DISPLAY.get(sym.name)
        if shown is None:  # a plain name: one identifier, underscores kept
            mi = self.dom.createElement("mi")
            mi.appendChild(self.dom.createTextNode(sym.name))
            return mi
        # "a_{kv}" -> Symbol("a_kv"), which sympy prints as a with subscript kv
        return super()._print_Symbol(sympy.Symbol(re.sub(r"[{}\\]", "", shown)), style)

    def _print_Piecewise(self, expr):
        table = self.dom.createElement("mtable")
        for value, cond in expr.args:
            row = self.dom.createElement("mtr")
            value_cell, cond_cell = self.dom.createElement("mtd"), self.dom.createElement("mtd")
            value_cell.appendChild(self._print(value))
            word = self.dom.createElement("mtext")
            word.appendChild(self.dom.createTextNode("otherwise" if cond == True else "if\u00a0"))
            cond_cell.appendChild(word)
            if cond != True:
                cond_cell.appendChild(self._print(cond))
            row.appendChild(value_cell)
            row.appendChild(cond_cell)
            table.appendChild(row)
        brace = self.dom.createElement("mo")
        brace.appendChild(self.dom.createTextNode("{"))
        mrow = self.dom.createElement("mrow")
        mrow.appendChild(brace)
        mrow.appendChild(table)
        return mrow


_MATHML = _MathML()


def mathml(expr: sympy.Basic, display: str = "block") -> str:
    """A complete ``<math>`` element for ``expr`` (presentation MathML, display names).

    Browsers render it natively (MathML Core): no script or network is needed.

    Examples
    --------
    >>> mathml(sympy.Symbol("n_params") / 2, display="inline")
    '<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline"><mrow><mfrac><mi>P</mi><mn>2</mn></mfrac></mrow></math>'
    """
    body = _MATHML.doprint(expr)
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="{display}">{body}</math>'
