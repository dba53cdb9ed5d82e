"""``memform web``: the calculator as a static page, generated from the rules.

The page is one HTML file with its script and style inside it (``index.html``; or, for a host
whose content security policy refuses inline scripts, beside it as ``memform.js`` and
``memform.css``); it makes no network request and works from ``file://`` as from any static
host.  Everything it computes comes from the library:

- the arithmetic is the residual program of the compiled library with every input and option
  varying (:class:`engine.compile.codegen.Specialiser`), printed by the compiler's JavaScript
  backend (exact rationals over BigInt), each step computed when first read
  (:class:`engine.compile.codegen.JavaScriptOnDemand`: the page reads only the figures the
  command line computes, so a rule it does not ask for cannot stop it); a rule that a preset pins (a model's
  ``num_key_value_heads``) takes a pin flag and a value of its own, so one program serves
  every preset;
- the form is generated from the declarations (domains, choices, defaults, descriptions as
  help text), grouped by the rule file that declares them;
- the presets, the figures an estimate reports (:mod:`engine.compile.outline`), the layout's
  divisibility constraints (:data:`engine.library.layout.DIVIDES`) and the byte units are data.

The program is a factory over its runtime: with exact rationals it gives the figures, with
the page's polynomials (:class:`engine.compile.columns.Polynomials`' arithmetic, every rule a
step of its own: :attr:`engine.compile.codegen.Specialiser.every_rule_a_step`) the formula
column, printed as text and typeset as the reference typesets it (the names' MathML is
:func:`engine.present.display.mathml`'s).

The hand-written part of the script (``engine/present/web/page.js``) reads that data, checks
values as ``memform estimate`` does, calls the program and writes the figures; it holds no
formula.  A rule file of the user's own (``--rules``) compiles into the page the same way, and
a Hugging Face config.json given to ``--config`` becomes a model beside the presets.
"""
from __future__ import annotations

import json
import re
from fractions import Fraction
from html import escape
from pathlib import Path

import sympy

from ..answers.report import MAX_FIGURE, exact_fraction
from ..answers.search import UPPER
from ..answers.serve import ENGINES, LENGTH_STEP, MAX_REQUESTS, REFUSED, TP_SIZES
from ..compile import codegen
from ..compile.columns import MAX_BOUNDS, MAX_DEGREE, MAX_TERMS, SAMPLES, integer as integer_names, nonnegative, whole_positive
from ..compile.outline import (ALWAYS_SHOWN_SIZE, EXTRA, FIT_RULE, OPAQUE_RULES, PEAK_FIGURES, SHOWN_INPUTS, SIZES,
                               TOP_LEVEL, TOTAL_OPAQUE)
from ..lang.constants import MAX_BITS, MAX_VALUE
from ..lang.units import BYTE_UNITS
from ..library.layout import DIVIDES, SERVING_MULTIPLES, UNEVEN
from .display import mathml

#: the hand-written page: markup, script (no formula) and style
ASSETS = Path(__file__).with_name("web")

#: names a synthetic pin flag and value take in the program's parameters (never in the source)
PIN_FLAG, PIN_VALUE = "pin?", "pin="

#: the controls shown first, where the library declares them (the rest are grouped by file)
PRIMARY = ("mode", "finetune", "stack", "precision", "optimizer", "zero_stage", "recompute", "micro_batch",
           "seq_len", "dp", "tp", "pp", "cp", "ep", "lora_rank", "weight_dtype", "kv_dtype", "attention")


def _text(value) -> str:
    """An exact number as the page reads it: "n" or "n/d"."""
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _value(value):
    return value if isinstance(value, str) else _text(value)


def pinnable(compiled: dict) -> list[str]:
    """The rules some preset (or a default) pins: each takes a flag and a value in the page's
    program, so that one program computes them pinned or from their formula."""
    names = {n for _, values in _presets(compiled).items() for n, _ in values if n in compiled["rules"]}
    names |= {n for n in compiled["defaults"] if n in compiled["rules"]}
    return sorted(names)


def _presets(compiled: dict) -> dict:
    """The presets, with the models of config.json files given to ``memform web --config``."""
    return {**compiled["presets"], **compiled.get("configs", {})}


def with_configs(compiled: dict, configs: dict) -> dict:
    """``compiled`` with models read from config.json files beside its presets: name -> the
    values of its scenario (choice names, sympy or exact numbers), of which the page keeps
    those that differ from the defaults."""
    out = dict(compiled)
    out["configs"] = {}
    for name, values in configs.items():
        exact = ((n, v if isinstance(v, str) else exact_fraction(v)) for n, v in values.items())
        out["configs"][("model", name)] = tuple((n, v) for n, v in exact if compiled["defaults"].get(n) != v)
    return out


def _with_pins(rules: dict, names) -> dict:
    """The compiled rules with each of ``names`` made ``if pinned: its value, else: its formula``."""
    out = dict(rules)
    for name in names:
        dim, unit, tree = rules[name]
        out[name] = (dim, unit, ("if", (("==", ("v", PIN_FLAG + name), ("n", 1)), ("v", PIN_VALUE + name)),
                                 (("b", True), tree)))
    return out


def outputs(compiled: dict) -> list[str]:
    """The rules the page computes: what ``memform estimate`` reports and checks."""
    rules = compiled["rules"]
    wanted = [*TOP_LEVEL, *compiled["components"], *(n for n, _, _ in EXTRA), FIT_RULE, *SIZES,
              *(n for names in DIVIDES.values() for n in names), *serve_rules()]
    return [n for n in dict.fromkeys(wanted) if n in rules]


def serve_rules() -> list[str]:
    """What ``memform serve`` evaluates for any engine: each engine's figures and the rules
    that decide what it refuses."""
    names = [r.rule for r in REFUSED]
    for spec in ENGINES.values():
        names += [n for n, _ in spec.breakdown + spec.counts] + [n for _, n in spec.header] + list(spec.extra)
    return names


def program(compiled: dict) -> tuple[str, list[str], list[str], int, list[str]]:
    """The JavaScript program of the page: (source, its parameters' names, its outputs' names,
    steps, the rules its steps compute by index).  Parameters: every input, every option (its
    code), then a flag and a value for each rule a preset may pin."""
    pins = pinnable(compiled)
    varying = (*compiled["inputs"], *compiled["options"], *(p + n for n in pins for p in (PIN_FLAG, PIN_VALUE)))
    spec = codegen.Specialiser(_with_pins(compiled["rules"], pins), {}, tuple(varying), {})
    spec.every_rule_a_step = True  # the formula column keeps some rules as names
    names = outputs(compiled)
    top = dict(spec.top)
    trees = [spec.rule(n, top, frozenset()) for n in names]
    backend = codegen.JavaScriptOnDemand()
    source = backend.source(spec.steps, trees, len(varying), spec.labels)
    return source, list(varying), names, len(spec.steps), backend.rule_names


#: the fields of an input's and an option's row in the page's data, in order
FIELDS = {"inputs": ["dim", "integer", "lower", "strict", "upper", "unit", "doc", "group"],
          "options": ["choices", "numeric", "doc", "group"]}


def data(lib, compiled: dict, names: list[str], varying: list[str]) -> dict:
    """Everything the page's script reads besides the program: declarations, presets, what an
    estimate reports, the constraints it checks."""
    def group(decl) -> str:
        return Path(decl.span.file).stem if decl.span and decl.span.file else "other"

    # each declaration a row of FIELDS (the page makes them objects): the field names once, not
    # once a declaration, in a page whose weight is a budget
    inputs = {}
    for name, (dim, integer, lower, strict, upper) in compiled["inputs"].items():
        decl = lib.inputs.get(name)
        row = {"dim": dim, "integer": bool(integer), "lower": None if lower is None else _text(lower),
               "strict": bool(strict), "upper": None if upper is None else _text(upper),
               "unit": decl.unit if decl else "", "doc": decl.doc if decl else "",
               "group": group(decl) if decl else "other"}
        inputs[name] = [row[f] for f in FIELDS["inputs"]]
    options = {}
    for name, (choices, numeric) in compiled["options"].items():
        decl = lib.options.get(name)
        row = {"choices": list(choices), "numeric": bool(numeric), "doc": decl.doc if decl else "",
               "group": group(decl) if decl else "other"}
        options[name] = [row[f] for f in FIELDS["options"]]
    # a preset's values as [name's index in presetNames, value, ...] (the page makes them objects)
    presets = {"model": {}, "gpu": {}}
    preset_names: dict[str, int] = {}
    for (kind, name), values in _presets(compiled).items():
        if kind in presets:
            presets[kind][name] = [x for n, v in values for x in (preset_names.setdefault(n, len(preset_names)), _value(v))]
    # the inputs with no default that each output reads: without a value for them (no GPU, so
    # no capacity) the output cannot be computed, as the command line says
    undefaulted = [n for n in compiled["inputs"] if n not in compiled["defaults"]]
    spec = codegen.Specialiser(compiled["rules"], {}, (), {})
    needs = {n: found for n in names if (found := [i for i in undefaulted if i in spec.reads(n)])}
    rules = lib.rules
    return {
        "varying": varying,
        "outputs": names,
        "pinFlag": PIN_FLAG, "pinValue": PIN_VALUE,
        "inputs": inputs,
        "options": options,
        "fields": FIELDS,
        "defaults": {n: _value(v) for n, v in compiled["defaults"].items()},
        "models": presets["model"],
        "gpus": presets["gpu"],
        "presetNames": list(preset_names),
        "components": list(compiled["components"]),
        "topLevel": [n for n in TOP_LEVEL if n in compiled["rules"]],
        "extra": [[n, list(needs_), [list(w) for w in when]] for n, needs_, when in EXTRA],
        "extraPresent": sorted({n for _, needs_, _ in EXTRA for n in needs_ if n in compiled["rules"]}),
        "fitRule": FIT_RULE,
        "sizes": list(SIZES),
        "alwaysShownSize": ALWAYS_SHOWN_SIZE,
        "divides": {k: list(v) for k, v in DIVIDES.items()},
        "servingMultiples": {k: list(v) for k, v in SERVING_MULTIPLES.items()},
        "uneven": list(UNEVEN),
        "needs": needs,
        "units": {k: str(v) for k, v in BYTE_UNITS.items()},
        "maxValue": str(MAX_VALUE),
        "maxFigure": str(MAX_FIGURE),
        "primary": [n for n in PRIMARY if n in inputs or n in options],
        # the descriptions of the figures the estimate's tables show
        "docs": {n: rules[n].doc for n in (*TOP_LEVEL, *compiled["components"], *(n for n, _, _ in EXTRA))
                 if n in rules},
        "statistic": dict(PEAK_FIGURES),
        "searchUpper": UPPER,
        # the formula column (engine/compile/columns.py): the names it keeps, its limits
        "formula": {"keep": list(SHOWN_INPUTS), "opaque": list(OPAQUE_RULES), "totalOpaque": list(TOTAL_OPAQUE),
                    "nonnegative": sorted(nonnegative(compiled, SHOWN_INPUTS)),
                    "wholePositive": sorted(whole_positive(compiled, SHOWN_INPUTS)),
                    "integer": sorted(integer_names(compiled, SHOWN_INPUTS)),
                    "samples": list(SAMPLES), "maxBounds": MAX_BOUNDS,
                    "maxTerms": MAX_TERMS, "maxDegree": MAX_DEGREE, "maxBits": MAX_BITS,
                    # the names it keeps as the reference typesets them (the papers' symbols)
                    "symbols": {n: _symbol_mathml(n) for n in dict.fromkeys((*SHOWN_INPUTS, *OPAQUE_RULES, *TOTAL_OPAQUE))}},
        "engines": {name: {"breakdown": [list(x) for x in e.breakdown], "counts": [list(x) for x in e.counts],
                           "tokens": e.tokens, "concurrency": e.concurrency, "header": [list(x) for x in e.header],
                           "extra": list(e.extra), "advice": e.advice, "startup": list(e.startup),
                           "servesOne": list(e.serves_one), "longest": e.longest}
                    for name, e in ENGINES.items()},
        "refused": [[r.engine, r.rule, r.op, r.value, r.message] for r in REFUSED],
        "serveSolve": {"tpSizes": list(TP_SIZES), "lengthStep": LENGTH_STEP, "maxRequests": MAX_REQUESTS},
    }


def _symbol_mathml(name: str) -> str:
    """A name's presentation MathML as the reference prints it (``n_params`` is ``<mi>P</mi>``)."""
    math = mathml(sympy.Symbol(name), display="inline")
    return math[math.index(">") + 1:math.rindex("</math>")]


def _script_json(value) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).replace("<", "\\u003c") \
        .replace(">", "\\u003e").replace("&", "\\u0026")


def _compact(code: str) -> str:
    """JavaScript without its whole-line comments, indentation and blank lines, as the page
    ships it (its weight is a budget): sound while no string or template literal of it spans
    lines (tests/test_web.py checks page.js; the generated program has no such literal)."""
    return "\n".join(line.lstrip() for line in code.splitlines() if line.strip() and not line.lstrip().startswith("//"))


def site(lib, compiled: dict, title: str = "memform", inline: bool = False) -> dict[str, str]:
    """The page's files, name -> text: the page, its script and its style, or (``inline``)
    the page alone with both inside it (one file, one request: the first render is sooner)."""
    source, varying, names, _, step_rules = program(compiled)
    page = _compact((ASSETS / "page.js").read_text(encoding="utf-8"))
    script = "\n".join([
        "// memform: the memory calculator, generated from the rules (memform web).",
        "// The arithmetic below is the compiler's JavaScript backend's; the page's own code",
        "// (the end of this file) reads DATA and holds no formula.",
        '"use strict";',
        codegen.JS_RUNTIME.strip(),
        # the program over any runtime with Q's operations: exact rationals for the figures,
        # the page's polynomials for the formula column
        "function makeProgram(Q) {", _compact(source), "return program;", "}",
        "const program = makeProgram(Q);",
        f"const DATA = {_script_json(dict(data(lib, compiled, names, varying), stepRules=step_rules))};",
        page,
    ])
    html = (ASSETS / "page.html").read_text(encoding="utf-8").replace("{{title}}", escape(title))
    style = (ASSETS / "page.css").read_text(encoding="utf-8")
    if not inline:
        return {"index.html": html, "memform.js": script, "memform.css": style}
    for text in (script, style):  # the generator's own text (names and messages are escaped by _script_json)
        if re.search(r"</(script|style)", text, re.I):
            raise ValueError("a closing tag inside the page's script or style")
    html = html.replace('<link rel="stylesheet" href="memform.css">', f"<style>\n{style}</style>") \
        .replace('<script src="memform.js"></script>', f"<script>\n{script}</script>")
    return {"index.html": html}


def write(lib, compiled: dict, folder: str | Path, title: str = "memform", inline: bool = False) -> list[Path]:
    """Write the page's files into ``folder`` (created); their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in site(lib, compiled, title, inline).items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
