"""The formula reference, generated from the rule library (Markdown, LaTeX, HTML).

Nothing in the reference is written by hand.  Inputs, options, dtypes and rules come
from the declarations in ``formulas/*.mem`` (doc strings, sources, each rule as
written); every closed form comes from :func:`closed_form`; every worked example's
figure comes from :meth:`Scenario.evaluate` on a query listed in ``docs/examples.toml``.
The document is assembled once (:func:`reference`) and printed by one of three writers
that differ only in syntax.  :class:`RuleView` shows one rule as typeset math in a
notebook.
"""
from __future__ import annotations

import html
import re
import shlex
import textwrap
import tomllib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Mapping

import sympy

from ..answers.estimate import formula
from ..answers.report import gb, gib, whole_bytes
from ..compile.model import Scenario
from ..compile.outline import SHOWN_INPUTS, TOTAL_OPAQUE
from ..errors import EngineError, UsageError, shown
from ..lang.rules import BYTE, Decl, DtypeDecl, InputDecl, OptionDecl, RuleDecl
from ..library.registry import Library
from ..paths import DOC_FILES, data_path
from .display import DISPLAY, equation, latex, mathml, tex_name

#: the reference's file name in each format

#: topics first, in this order (file stems, aliases included); other files follow alphabetically
TOPIC_ORDER = ("dtypes", "model", "parameters", "training", "activations", "inference", "kv_cache",
               "parallel", "parallelism", "overhead", "total")

#: the source tree's docs/ folder: the committed reference and the worked examples
#: (an installed package carries a copy of the examples only, under engine/_data/docs)
DOCS_DIR = data_path("formulas").parent / "docs"
EXAMPLES = DOCS_DIR / "examples.toml"
#: whether DOCS_DIR is a repository checkout's docs/ (else there is no committed reference)
IN_CHECKOUT = DOCS_DIR.parent.name != "_data"
#: how to regenerate the committed reference (from the repository root)
REGENERATE = "python -m engine docs --out docs"

#: verdicts on a seed document's claim (the scale of shared/reference/seed-cases.md)
VERDICTS = ("correct", "rounding", "imprecise", "wrong")


class StaleDocsError(EngineError):
    """The committed reference differs from what the rules generate."""

    exit_code = 1


# ---------------------------------------------------------------------------- closed forms
def closed_form(source: Library | Scenario, rule: str, keep: Iterable[str] | None = None,
                memo: dict | None = None) -> sympy.Expr:
    """``rule`` with every rule it uses inlined and the options substituted.

    From a :class:`Library`, the options take their defaults and every input stays
    symbolic (the reference's closed forms); from a :class:`Scenario`, its values are
    substituted except ``micro_batch`` and ``seq_len`` (as ``memform show``).  ``keep``
    overrides which inputs stay symbolic.  ``memo`` is shared by calls with the same source and
    ``keep`` (see :func:`engine.answers.estimate.formula`).

    Examples
    --------
    >>> import engine
    >>> closed_form(engine.load(), "attention_params")
    4*hidden_size**2
    """
    if isinstance(source, Library):
        scenario, default_keep = Scenario.create(source), tuple(source.inputs)
    else:
        scenario, default_keep = source, SHOWN_INPUTS
    if rule not in scenario.library.rules:
        scenario.library.check_value(rule, None)  # unknown-name error with a hint
    return formula(scenario, rule, keep=default_keep if keep is None else tuple(keep), opaque=(), memo=memo)


@dataclass(frozen=True)
class RuleView:
    """One rule as an equation, typeset with the papers' symbols in a notebook.

    Examples
    --------
    >>> import engine
    >>> view = RuleView.of(engine.load(), "attention_params")
    >>> view._repr_latex_()
    '$\\\\displaystyle \\\\mathrm{attention\\\\_params} = 4 d^{2}$'
    >>> str(view)
    'attention_params = 4*hidden_size**2'
    """

    name: str
    expr: sympy.Expr

    @classmethod
    def of(cls, source: Library | Scenario, rule: str, keep: Iterable[str] | None = None) -> "RuleView":
        """The closed form of ``rule`` (see :func:`closed_form`)."""
        return cls(rule, closed_form(source, rule, keep))

    def latex(self) -> str:
        return latex(equation(self.name, self.expr))

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"

    def __str__(self) -> str:
        return f"{self.name} = {sympy.sstr(self.expr)}"


# ---------------------------------------------------------------------------- the document model
@dataclass(frozen=True)
class Topic:
    """The declarations of one formula file, titled from the file's first comment line."""

    file: str
    title: str
    intro: str
    dtypes: tuple[DtypeDecl, ...]
    inputs: tuple[InputDecl, ...]
    options: tuple[OptionDecl, ...]
    rules: tuple[tuple[RuleDecl, sympy.Expr], ...]  # each rule with its closed form

    @property
    def anchor(self) -> str:
        return "topic-" + Path(self.file).stem


@dataclass(frozen=True)
class Example:
    """A seed document's claim and memform's figure for the same query."""

    case: str
    title: str
    model: str | None
    values: Mapping[str, object]
    rule: str
    claim: str
    verdict: str
    why: str | None
    note: str | None
    expected: object  # the correct figure per the seed analysis (tests compare it)
    value: sympy.Rational  # memform's figure, from the rules


@dataclass(frozen=True)
class Reference:
    """Everything the reference shows, in order: the library's topics and the examples."""

    library: Library
    topics: tuple[Topic, ...]
    examples: tuple[Example, ...]


def _read_header(file: str) -> list[str]:
    """The comment lines that open a formula file, without their ``#``."""
    path = Path(file)
    if not path.is_file():  # loaded from another working directory: the library's copy
        path = data_path("formulas") / path.name
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() and not lines:
            continue
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


def _title_and_intro(file: str, header: list[str]) -> tuple[str, str]:
    """Split a file's header comment into a title (the first line's first clause) and an
    introduction (the rest): ``"# kv.mem: the KV cache.  Heads ..."`` -> ``"The KV cache"``."""
    first, rest = (header[0], header[1:]) if header else ("", [])
    first = re.sub(r"^\S+\.mem\s*:\s*", "", first)
    clause = re.match(r"(.*?[.:;])(?:\s+|$)(.*)", first)
    title, tail = clause.groups() if clause else (first, "")
    intro = re.sub(r"\s+", " ", " ".join([tail, *rest])).strip()
    title = title.rstrip(".:;").strip()
    return _capitalized(title) or Path(file).stem, _capitalized(intro)


def _capitalized(text: str) -> str:
    """``text`` with a capital first letter, unless it opens with a name (``activation_model``)."""
    return text[:1].upper() + text[1:] if re.match(r"[a-z]+([\s,;.:]|$)", text) else text


def topics(lib: Library) -> tuple[Topic, ...]:
    """One :class:`Topic` per formula file that declares a dtype, input, option or rule,
    in :data:`TOPIC_ORDER`, then alphabetically.

    Examples
    --------
    >>> import engine
    >>> [t.file for t in topics(engine.load())][:2]
    ['dtypes.mem', 'model.mem']
    """
    by_file: dict[str, list[Decl]] = {}
    for decl in lib.decls.values():
        by_file.setdefault(decl.span.file, []).append(decl)
    scenario = Scenario.create(lib)
    memo: dict = {}  # every rule's expansion, shared by the closed forms below

    def order(file: str):
        stem = Path(file).stem
        return (TOPIC_ORDER.index(stem), "") if stem in TOPIC_ORDER else (len(TOPIC_ORDER), stem)

    out = []
    for file in sorted(by_file, key=order):
        decls = by_file[file]
        out.append(Topic(
            Path(file).name, *_title_and_intro(file, _read_header(file)),
            tuple(d for d in decls if isinstance(d, DtypeDecl)),
            tuple(d for d in decls if isinstance(d, InputDecl)),
            tuple(d for d in decls if isinstance(d, OptionDecl)),
            tuple((d, closed_form(scenario, d.name, keep=lib.inputs, memo=memo)) for d in decls
                  if isinstance(d, RuleDecl))))
    return tuple(out)


_EXAMPLE_KEYS = {"case": True, "title": True, "rule": True, "claim": True, "verdict": True,
                 "model": False, "set": False, "why": False, "note": False, "expected": False}


def load_examples(lib: Library, path: str | Path = EXAMPLES) -> tuple[Example, ...]:
    """Read the worked examples (TOML, ``[[example]]`` tables) and compute memform's
    figure for each with :meth:`Scenario.evaluate`.

    Every mistake in the file is a :class:`UsageError` naming the example.

    Examples
    --------
    >>> import engine
    >>> ex = {e.case: e for e in load_examples(engine.load())}
    >>> int(ex["D1-42"].value), ex["D1-42"].verdict
    (262500000000, 'wrong')
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read examples file '{path}': {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}") from None
    out = []
    for i, item in enumerate(data.get("example", []), 1):
        where = f"{path}: example {i}" + (f" ('{item['case']}')" if "case" in item else "")
        missing = [k for k, required in _EXAMPLE_KEYS.items() if required and k not in item]
        unknown = sorted(set(item) - set(_EXAMPLE_KEYS))
        if missing or unknown:
            raise UsageError(f"{where}: " + "; ".join(
                ([f"missing {', '.join(missing)}"] if missing else [])
                + ([f"unknown key {', '.join(unknown)}"] if unknown else [])),
                hint="keys are " + ", ".join(_EXAMPLE_KEYS))
        if item["verdict"] not in VERDICTS:
            raise UsageError(f"{where}: verdict '{item['verdict']}' is not one of {', '.join(VERDICTS)}")
        if item["verdict"] in ("wrong", "imprecise") and not item.get("why"):
            raise UsageError(f"{where}: a '{item['verdict']}' claim needs 'why'")
        try:
            scenario = Scenario.create(lib, item.get("model"), values=item.get("set", {}))
            value = scenario.evaluate(item["rule"])
        except EngineError as exc:
            raise UsageError(f"{where}: {exc.message}", hint=exc.hint) from None
        out.append(Example(item["case"], item["title"], item.get("model"), dict(item.get("set", {})),
                           item["rule"], item["claim"], item["verdict"], item.get("why"),
                           item.get("note"), item.get("expected"), value))
    return tuple(out)


def reference(lib: Library, examples: str | Path | None = EXAMPLES) -> Reference:
    """Everything the reference shows (``examples=None``: without worked examples; a
    missing default examples file, as in an installed wheel, also means none)."""
    if examples is not None and (examples != EXAMPLES or EXAMPLES.is_file()):
        shown = load_examples(lib, examples)
    else:
        shown = ()
    return Reference(lib, topics(lib), shown)


# ---------------------------------------------------------------------------- inline content
@dataclass(frozen=True)
class Code:
    """A name or a command, set in monospace."""

    text: str


@dataclass(frozen=True)
class Math:
    """An expression typeset in-line with the papers' symbols."""

    expr: sympy.Basic


@dataclass(frozen=True)
class Strong:
    """A label such as "Source:"."""

    text: str


@dataclass(frozen=True)
class Link:
    """A link to an anchor of the document (a rule's name, shown as code)."""

    text: str
    anchor: str


def _exact(value) -> sympy.Rational:
    """A TOML or sympy number as an exact sympy number (floats by their shortest repr)."""
    if isinstance(value, float):
        f = Fraction(repr(value))
        return sympy.Rational(f.numerator, f.denominator)
    return sympy.Integer(value) if isinstance(value, int) else value


def _number(value) -> str:
    """An exact number for text, as ``--set`` takes it.

    Examples
    --------
    >>> _number(70_000_000_000), _number(2048), _number(0.1), _number(sympy.Rational(1, 3))
    ('70e9', '2,048', '0.1', '1/3')
    """
    value = _exact(value)
    if value.is_Integer:
        digits = str(abs(int(value)))
        zeros = len(digits) - len(digits.rstrip("0"))
        exponent = zeros - zeros % 3  # engineering notation: 70e9, not 7e10
        if exponent >= 6:
            return f"{'-' if value < 0 else ''}{digits[:-exponent]}e{exponent}"
        return f"{int(value):,}"
    decimal = f"{float(value):.12g}"
    return decimal if Fraction(decimal) == Fraction(int(value.p), int(value.q)) else str(value)


def _bytes(value) -> str:
    """Bytes in the largest binary unit that holds them exactly (``512 MiB``)."""
    n = _exact(value)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
        if n.is_Integer and n and n % size == 0:
            return f"{int(n) // size:,} {unit}"
    return f"{_number(n)} B"


def _quantity(value, unit: str) -> str:
    """A value in its unit: bytes exactly and in GB and GiB; counts with separators."""
    if unit == "bytes":
        return f"{whole_bytes(value):,} B = {gb(value)} GB = {gib(value)} GiB"
    return _number(value)


def _default(decl: InputDecl) -> str:
    if decl.default is None:
        return "none (a model preset sets it)"
    value = decl.default.xreplace({BYTE: sympy.Integer(1)})
    return _bytes(value) if decl.unit == "bytes" else _number(value)


def _setting(value) -> str:
    """A preset's or an example's value as ``--set`` would take it."""
    if isinstance(value, (str, bool)):
        return value if isinstance(value, str) else str(value).lower()
    if isinstance(value, sympy.Basic) and value.has(BYTE):
        return _bytes(value.xreplace({BYTE: sympy.Integer(1)}))
    return _number(value)


# ---------------------------------------------------------------------------- the document
def _emit(ref: Reference, w: "_Writer") -> str:
    """Write ``ref`` with writer ``w`` (the document's structure, once for all formats)."""
    lib = ref.library
    rules = lib.rules
    w.begin("memform formula reference")
    w.paragraph(["Generated from the rule library (", Code("formulas/*.mem"), ") by ",
                 Code("memform docs"), "; do not edit it by hand: regenerate it with ",
                 Code(REGENERATE), f". {len(rules)} rules, {len(lib.inputs)} inputs, "
                 f"{len(lib.options)} options and {len(lib.dtypes)} dtypes in {len(ref.topics)} files."])
    toc = [(1, "notation", "Notation and closed forms")]
    for topic in ref.topics:
        toc.append((1, topic.anchor, topic.title))
        toc += [(2, f"rule-{r.name}", r.name) for r, _ in topic.rules]
    if ref.examples:
        toc.append((1, "examples", "Worked examples from the seed documents"))
    toc.append((1, "presets", "Presets"))
    w.toc(toc)

    w.heading(1, "Notation and closed forms", "notation")
    w.paragraph(["Formulas use the papers' symbols (Korthikanti et al. 2022, Rajbhandari et al. 2020) "
                 "for these names; every other name is printed as it is written in the rules."])
    w.table(["symbol", "name", "meaning"],
            [[[Math(sympy.Symbol(n))], [Code(n)], [lib.decls[n].doc]] for n in DISPLAY if n in lib.decls],
            weights=(1, 3, 8))
    defaults = []
    for name, opt in lib.options.items():
        defaults += ([", "] if defaults else []) + [Code(f"{name} = {opt.default}")]
    w.paragraph(["Each rule's closed form inlines every rule it uses and keeps every input "
                 "symbolic; the options take their defaults: "] + defaults + ["."])

    for topic in ref.topics:
        _emit_topic(topic, lib, w)
    if ref.examples:
        _emit_examples(ref.examples, lib, w)

    w.heading(1, "Presets", "presets")
    w.table(["preset", "description", "settings"],
            [[[Code(f"{kind} {name}")], [p.doc], [", ".join(f"{n} = {_setting(v)}" for n, v, _ in p.settings)]]
             for (kind, name), p in sorted(lib.presets.items())], weights=(3, 3, 8))
    return w.end()


def _emit_topic(topic: Topic, lib: Library, w: "_Writer") -> None:
    w.heading(1, f"{topic.title} ({topic.file})", topic.anchor)
    if topic.intro:
        w.paragraph([topic.intro])
    if topic.dtypes:
        w.paragraph([Strong("Dtypes")])
        w.table(["dtype", "bytes", "description"],
                [[[Code(d.name)], [_number(d.size)], [d.doc]] for d in topic.dtypes], weights=(2, 1, 9))
    if topic.inputs:
        w.paragraph([Strong("Inputs")])
        w.table(["input", "symbol", "unit", "domain", "default", "description"],
                [[[Code(d.name)], [Math(sympy.Symbol(d.name))] if d.name in DISPLAY else [],
                  [d.unit], [d.domain_text()], [_default(d)], [d.doc]] for d in topic.inputs],
                weights=(3, 1, 1.3, 2, 2.2, 5))
    if topic.options:
        w.paragraph([Strong("Options")])
        w.table(["option", "choices", "default", "description"],
                [[[Code(d.name)], [", ".join(d.choices)], [d.default], [d.doc]] for d in topic.options],
                weights=(2.5, 3.5, 1.5, 5))
    for rule, expr in topic.rules:
        w.heading(2, rule.name, f"rule-{rule.name}", code=True)
        w.paragraph([rule.doc])
        declared = rule.lower is not None or rule.upper is not None
        facts: list = [Strong("Unit:"), f" {rule.unit}" + (f", {rule.domain_text()}." if declared else ".")]
        if rule.source:
            facts += [" ", Strong("Source:"), f" {rule.source}."]
        uses = sorted(lib.deps.get(rule.name, ()))
        if uses:
            facts += [" ", Strong("Uses:"), " "]
            for i, name in enumerate(uses):
                facts += ([", "] if i else []) + [Link(name, f"rule-{name}")]
            facts.append(".")
        w.paragraph(facts)
        w.paragraph([Strong("As written:")])
        w.code_block(rule.text)
        w.paragraph([Strong("Closed form:")])
        w.equation(rule.name, expr)


def _emit_examples(examples: tuple[Example, ...], lib: Library, w: "_Writer") -> None:
    w.heading(1, "Worked examples from the seed documents", "examples")
    w.paragraph(["Claims of the two seed documents checked in ", Code("shared/reference/seed-cases.md"),
                 " (the case ids are that file's). memform's figure is computed from the rules "
                 "above when this reference is generated; the queries are listed in ",
                 Code("docs/examples.toml"), "."])
    for ex in examples:
        w.heading(2, f"{ex.case}: {ex.title}", f"example-{ex.case}")
        query: list = [Strong("Query:"), " ", Link(ex.rule, f"rule-{ex.rule}")]
        query += [" of ", Code(ex.model)] if ex.model else []
        for i, (name, value) in enumerate(ex.values.items()):
            query += [" with " if i == 0 else ", ", Code(f"{name}={_setting(value)}")]
        w.paragraph(query + ["."])
        w.paragraph([Strong("memform:"), f" {_quantity(ex.value, lib.decls[ex.rule].unit)}."])
        w.paragraph([Strong(f"Seed document ({ex.verdict}):"), f" {ex.claim}."])
        if ex.why:
            w.paragraph([Strong("Why:"), f" {ex.why}."])
        if ex.note:
            w.paragraph([Strong("Note:"), f" {ex.note}."])


# ---------------------------------------------------------------------------- writers
class _Writer:
    """The syntax of one format: block primitives over inline content.

    Inline content is a list of plain text (``str``), :class:`Code`, :class:`Math`,
    :class:`Strong` and :class:`Link`; each writer escapes text for its format.
    """

    def __init__(self) -> None:
        self.out: list[str] = []

    def inline(self, parts) -> str:
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(self.text(p))
            elif isinstance(p, Code):
                out.append(self.code(p.text))
            elif isinstance(p, Math):
                out.append(self.math(p.expr))
            elif isinstance(p, Strong):
                out.append(self.strong(p.text))
            else:
                out.append(self.link(p))
        return "".join(out)

    # inline primitives: each returns the formatted string
    def text(self, s: str) -> str: ...
    def code(self, s: str) -> str: ...
    def math(self, expr) -> str: ...
    def strong(self, s: str) -> str: ...
    def link(self, link: Link) -> str: ...

    # block primitives: each appends to self.out
    def begin(self, title: str) -> None:
        """The document's preamble and title."""

    def toc(self, entries) -> None:
        """A table of contents of ``(level, anchor, text)`` entries."""

    def heading(self, level: int, text: str, anchor: str, code: bool = False) -> None:
        """A heading (level 1: a topic, 2: a rule or an example) that links can target."""

    def paragraph(self, parts) -> None:
        """One paragraph of inline content."""

    def table(self, header, rows, weights=()) -> None:
        """A table; ``rows`` hold inline content per cell, ``weights`` hint column widths."""

    def code_block(self, text: str) -> None:
        """Monospace text as written (a rule's expression)."""

    def equation(self, name: str, expr) -> None:
        """``name = expr`` as display math, with the papers' symbols."""

    def end(self) -> str:
        """Close the document and return all of it."""
        raise NotImplementedError


class _Markdown(_Writer):
    """GitHub-flavoured Markdown: ``$...$`` and ``$$...$$`` math, ``<a id>`` anchors."""

    def text(self, s: str) -> str:
        s = s.replace("\\", "\\\\").replace("*", "\\*").replace("$", "\\$").replace("|", "\\|")
        s = s.replace("<", "&lt;").replace("`", "\\`")
        return re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", s)

    def code(self, s: str) -> str:
        return f"`{s}`"

    def math(self, expr) -> str:
        return f"${latex(expr)}$"

    def strong(self, s: str) -> str:
        return f"**{self.text(s)}**"

    def link(self, link: Link) -> str:
        return f"[{self.code(link.text)}](#{link.anchor})"

    def begin(self, title: str) -> None:
        self.out.append(f"# {title}\n")

    def toc(self, entries) -> None:
        lines = [f"{'  ' * (level - 1)}- [{self.code(text) if level > 1 else self.text(text)}](#{anchor})"
                 for level, anchor, text in entries]
        self.out.append("\n".join(lines) + "\n")

    def heading(self, level: int, text: str, anchor: str, code: bool = False) -> None:
        shown = self.code(text) if code else self.text(text)
        self.out.append(f'<a id="{anchor}"></a>\n\n{"#" * (level + 1)} {shown}\n')

    def paragraph(self, parts) -> None:
        self.out.append(self.inline(parts) + "\n")

    def table(self, header, rows, weights=()) -> None:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(self.inline(cell) for cell in row) + " |" for row in rows]
        self.out.append("\n".join(lines) + "\n")

    def code_block(self, text: str) -> None:
        self.out.append(f"```text\n{text}\n```\n")

    def equation(self, name: str, expr) -> None:
        self.out.append(f"$$\n{latex(equation(name, expr))}\n$$\n")

    def end(self) -> str:
        return "\n".join(self.out)


#: characters LaTeX treats specially in text, and a few non-ASCII ones doc strings may hold
_TEX_TEXT = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
             "^": r"\^{}", "_": r"\_", "%": r"\%", "~": r"\~{}", "<": r"\ensuremath{<}",
             ">": r"\ensuremath{>}", "|": r"\ensuremath{|}", "\u00d7": r"\ensuremath{\times}",
             "\u2264": r"\ensuremath{\leq}", "\u2265": r"\ensuremath{\geq}", "\u2192": r"\ensuremath{\to}",
             "\u2248": r"\ensuremath{\approx}", "\u00b7": r"\ensuremath{\cdot}", "\u2013": "--",
             "\u2014": "---", "\u2019": "'", "\u201c": "``", "\u201d": "''", "\u03a8": r"\ensuremath{\Psi}"}

def _group_end(tex: str, start: int) -> int:
    """The index of the ``}`` that closes the ``{`` at ``start`` (escaped braces skipped)."""
    depth, i = 0, start
    while True:
        if tex[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(tex[i], 0)
        if depth == 0:
            return i
        i += 1


def _breakable(tex: str, limit: int = 100) -> str:
    """sympy's LaTeX rewritten so that TeX can break it across lines: a long
    ``\\frac{A}{B}`` becomes ``(A) / (B)`` and ``\\left( \\right)`` become ``\\bigl( \\bigr)``
    (a fraction or a ``\\left...\\right`` pair is one unbreakable box).

    Examples
    --------
    >>> _breakable(r"\\frac{x}{\\left(y + z\\right)}", limit=5)
    '\\\\bigl(x\\\\bigr) \\\\big/ \\\\bigl(\\\\bigl(y + z\\\\bigr)\\\\bigr)'
    """
    out, i = [], 0
    while (j := tex.find(r"\frac{", i)) >= 0:
        num_end = _group_end(tex, j + 5)
        den_end = _group_end(tex, num_end + 1)
        num, den = _breakable(tex[j + 6:num_end], limit), _breakable(tex[num_end + 2:den_end], limit)
        out.append(tex[i:j] + (rf"\bigl({num}\bigr) \big/ \bigl({den}\bigr)" if len(num) + len(den) > limit
                               else rf"\frac{{{num}}}{{{den}}}"))
        i = den_end + 1
    out.append(tex[i:])
    return "".join(out).replace(r"\left(", r"\bigl(").replace(r"\right)", r"\bigr)")


_TEX_PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[a4paper,margin=2cm]{geometry}
\usepackage{amsmath}
\usepackage{array}
\usepackage{longtable}
\usepackage[hidelinks]{hyperref}
\setlength{\parindent}{0pt}
\setlength{\parskip}{0.6em}
\setcounter{tocdepth}{1}
"""


class _Latex(_Writer):
    """A standalone article (amsmath, longtable, hyperref; all in texlive-latex-base).

    Formulas are in-line math in a ragged paragraph, rewritten by :func:`_breakable`, so
    that long closed forms wrap instead of running off the page.
    """

    def text(self, s: str) -> str:
        return "".join(_TEX_TEXT.get(ch, ch if ord(ch) < 128 else f"[U+{ord(ch):04X}]") for ch in s)

    def code(self, s: str) -> str:
        return r"\texttt{" + self.text(s) + "}"

    def math(self, expr) -> str:
        return f"${latex(expr)}$"

    def strong(self, s: str) -> str:
        return r"\textbf{" + self.text(s) + "}"

    def link(self, link: Link) -> str:
        return rf"\hyperref[{link.anchor}]{{{self.code(link.text)}}}"

    def begin(self, title: str) -> None:
        self.out.append(_TEX_PREAMBLE + rf"\title{{{self.text(title)}}}" + "\n\\date{}\n"
                        "\\begin{document}\n\\maketitle\n")

    def toc(self, entries) -> None:
        self.out.append("\\tableofcontents\n")

    def heading(self, level: int, text: str, anchor: str, code: bool = False) -> None:
        shown = rf"\texorpdfstring{{{self.code(text)}}}{{{self.text(text)}}}" if code else self.text(text)
        self.out.append(rf"\{'sub' * (level - 1)}section{{{shown}}}\label{{{anchor}}}" + "\n")

    def paragraph(self, parts) -> None:
        self.out.append(self.inline(parts) + "\n")

    def table(self, header, rows, weights=()) -> None:
        weights = weights or (1,) * len(header)
        widths = [0.94 * w / sum(weights) - 0.01 for w in weights]
        spec = "".join(rf">{{\raggedright\arraybackslash}}p{{{w:.3f}\linewidth}}" for w in widths)
        lines = [rf"\begin{{longtable}}{{@{{}}{spec}@{{}}}}", r"\hline",
                 " & ".join(rf"\textbf{{{self.text(h)}}}" for h in header) + r" \\", r"\hline",
                 r"\endhead"]
        lines += [" & ".join(self.inline(cell) for cell in row) + r" \\" for row in rows]
        lines += [r"\hline", r"\end{longtable}"]
        self.out.append("\n".join(lines) + "\n")

    def code_block(self, text: str) -> None:
        self.out.append(r"{\raggedright\ttfamily\small " + self.text(text) + "\\par}\n")

    def equation(self, name: str, expr) -> None:
        # in-line math (not a display), so that TeX may break a long formula between terms; the
        # source cut into lines at spaces (a space to TeX), as TeX reads at most 200,000 characters a line
        tex = textwrap.fill(_breakable(latex(equation(name, expr))), width=10_000, break_long_words=False,
                            break_on_hyphens=False)
        self.out.append(r"{\raggedright\small $\displaystyle " + tex + "$\\par}\n")

    def end(self) -> str:
        return "\n".join(self.out) + "\\end{document}\n"


_CSS = """body{font-family:system-ui,sans-serif;line-height:1.45;margin:0;color:#1b1b1b}
main{max-width:60rem;margin:0 auto;padding:1rem 2rem}
nav ul{padding-left:1.2rem}nav li li{display:inline;margin-right:.6rem}nav li li::after{content:""}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.92rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;vertical-align:top;text-align:left}
th{background:#f3f3f3}code,pre{font-family:ui-monospace,monospace;font-size:.9em}
pre{background:#f6f6f6;padding:.5rem .75rem;white-space:pre-wrap;overflow-wrap:anywhere}
.eq{overflow-x:auto;padding:.25rem 0 .75rem}math{font-size:1.08em}
h3{border-top:1px solid #ddd;padding-top:.75rem}"""


class _Html(_Writer):
    """One self-contained page: inline CSS, formulas as presentation MathML (rendered by
    the browser itself), a table of contents; no script, font or network access."""

    def text(self, s: str) -> str:
        return html.escape(s, quote=False)

    def code(self, s: str) -> str:
        return f"<code>{html.escape(s, quote=False)}</code>"

    def math(self, expr) -> str:
        return mathml(expr, display="inline")

    def strong(self, s: str) -> str:
        return f"<strong>{self.text(s)}</strong>"

    def link(self, link: Link) -> str:
        return f'<a href="#{link.anchor}">{self.code(link.text)}</a>'

    def begin(self, title: str) -> None:
        self.out.append(f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                        f"<title>{self.text(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n"
                        f"<body>\n<main>\n<h1>{self.text(title)}</h1>")

    def toc(self, entries) -> None:
        lines, depth = ['<nav aria-label="contents">', "<h2>Contents</h2>"], 0
        for level, anchor, text in entries:
            if level > depth:
                lines.append("<ul>" * (level - depth))
            else:
                lines.append("</li>" + "</ul></li>" * (depth - level))
            depth = level
            shown = self.code(text) if level > 1 else self.text(text)
            lines.append(f'<li><a href="#{anchor}">{shown}</a>')
        lines += ["</li>" + "</ul></li>" * (depth - 1) + "</ul>", "</nav>"]
        self.out.append("\n".join(lines))

    def heading(self, level: int, text: str, anchor: str, code: bool = False) -> None:
        shown = self.code(text) if code else self.text(text)
        self.out.append(f'<h{level + 1} id="{anchor}">{shown}</h{level + 1}>')

    def paragraph(self, parts) -> None:
        self.out.append(f"<p>{self.inline(parts)}</p>")

    def table(self, header, rows, weights=()) -> None:
        head = "".join(f"<th>{self.text(h)}</th>" for h in header)
        body = "\n".join("<tr>" + "".join(f"<td>{self.inline(c)}</td>" for c in row) + "</tr>" for row in rows)
        self.out.append(f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>")

    def code_block(self, text: str) -> None:
        self.out.append(f"<pre><code>{html.escape(text, quote=False)}</code></pre>")

    def equation(self, name: str, expr) -> None:
        self.out.append(f'<div class="eq">{mathml(equation(name, expr))}</div>')

    def end(self) -> str:
        return "\n".join(self.out) + "\n</main>\n</body>\n</html>\n"


_WRITERS = {"md": _Markdown, "latex": _Latex, "html": _Html}


# ---------------------------------------------------------------------------- notebook display
def estimate_html(est) -> str:
    """An :class:`~engine.answers.estimate.Estimate` as an HTML table (``Estimate._repr_html_``):
    bytes, GB, GiB, share and the formula of each component, typeset as MathML.

    Examples
    --------
    >>> import engine
    >>> est = engine.estimate(Scenario.create(engine.load(), "llama2-7b", "h100-80g"))
    >>> page = est._repr_html_()
    >>> page.startswith("<table") and "<math" in page and "optimizer_states" in page
    True
    """
    scenario, total = est.scenario, est.total
    e = _Html()
    rows = [(name, value, formula(scenario, name)) for name, value in est.components.items()]
    rows.append(("total", total, formula(scenario, "total", opaque=TOTAL_OPAQUE)))
    body = "\n".join(
        f"<tr><td>{e.code(name)}</td><td>{whole_bytes(value):,}</td><td>{gb(value)}</td><td>{gib(value)}</td>"
        f"<td>{100 * float(value / total) if total else 0:.1f} %</td><td>{mathml(expr, 'inline')}</td></tr>"
        for name, value, expr in rows)
    where = " on ".join(e.text(n) for n in (scenario.model, scenario.gpu) if n)
    fit = ("" if est.fits is None else
           f": fits, {gb(est.capacity - total)} GB to spare" if est.fits else
           f": does not fit, needs {gb(total - est.capacity)} GB more")
    head = "".join(f'<th style="text-align:{a}">{h}</th>' for h, a in (
        ("component", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right"), ("share", "right"),
        ("formula (per GPU)", "left")))
    return (f"<table>\n<caption>{where or 'estimate'}{fit}</caption>\n<thead><tr>{head}</tr></thead>\n"
            f"<tbody>\n{body}\n</tbody>\n</table>")


def solve_latex(result) -> str:
    """A :class:`~engine.answers.solve.SolveResult` as LaTeX (``SolveResult._repr_latex_``): the
    answer with the unknown's symbol, the closed form typeset as math (sympy's LaTeX of the
    bound, with the papers' symbols) and the bytes on each side of it.

    Examples
    --------
    >>> import engine
    >>> s = Scenario.create(engine.load(), "llama2-70b", values={"n_params": 70 * 10**9,
    ...     "zero_stage": 3, "capacity": 80 * 10**9, "optimizer_step_bytes": 0})
    >>> print("\\n".join(engine.solve(s, "min", "dp", target="model_states")._repr_latex_().splitlines()[1:3]))
    \\min N = 14 \\\\
    \\text{closed form: } N \\geq \\frac{16 P}{C} \\\\
    """
    sym = latex(sympy.Symbol(result.unknown))
    bound = getattr(result, "bound", None)  # the closed form as a relation, where sympy found one
    if bound is not None:
        closed = latex(bound)
    else:  # the bytes as a function of the unknown, bounded by the capacity; no closed form
        closed = rf"\text{{none; exact search of }} {tex_name(sympy.Symbol(result.target))}({sym}) \le C"
    return ("$$\\begin{array}{l}\n"
            rf"\{result.direction} {sym} = {result.value} \\" "\n"
            rf"\text{{closed form: }} {closed} \\" "\n"
            rf"\text{{method: {result.method}; at }} {sym} = {result.value}\text{{: }} "
            rf"{gb(result.bytes_at_value)}\ \text{{GB}} \le {gb(result.capacity)}\ \text{{GB}}"
            "\n\\end{array}$$")


# ---------------------------------------------------------------------------- entry points
def render(lib: Library, fmt: str = "md", examples: str | Path | None = EXAMPLES) -> str:
    """The formula reference of ``lib`` as Markdown (``md``), a standalone LaTeX document
    (``latex``) or one self-contained HTML page with MathML (``html``).

    Examples
    --------
    >>> import engine
    >>> text = render(engine.load(), "md", examples=None)
    >>> text.splitlines()[0]
    '# memform formula reference'
    >>> "### `kv_cache`" in text
    True
    """
    if fmt not in _WRITERS:
        raise UsageError(f"unknown docs format '{fmt}'", hint="formats are " + ", ".join(_WRITERS))
    return _emit(reference(lib, examples), _WRITERS[fmt]())


def check(lib: Library, folder: str | Path = DOCS_DIR, fmt: str = "md",
          examples: str | Path | None = EXAMPLES) -> Path:
    """The path of the committed reference in ``folder`` if it is what the rules generate;
    :class:`StaleDocsError` (exit code 1) if it differs.

    Examples
    --------
    >>> import engine, pathlib, tempfile
    >>> lib, folder = engine.load(), pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "reference.md").write_text(render(lib, "md", examples=None), encoding="utf-8")
    >>> check(lib, folder, examples=None).name
    'reference.md'
    """
    committed = Path(folder) == DOCS_DIR
    if committed and not IN_CHECKOUT:
        raise UsageError("no committed reference to check: memform is installed as a package, "
                         "and only a repository checkout has a docs/ folder",
                         hint="check a reference you generated with 'memform docs --out DIR': "
                              "memform docs --check --out DIR")
    path = Path(folder) / DOC_FILES[fmt]
    regenerate = REGENERATE if committed else _regenerate(folder, fmt)
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else None
    except (OSError, UnicodeDecodeError) as exc:  # a name too long, no permission, not text
        raise UsageError(f"cannot read '{shown(str(path), 255)}': {getattr(exc, 'strerror', None) or exc}") from None
    if text is None:
        raise UsageError(f"no reference to check: '{display_path(path)}' does not exist",
                         hint=f"generate it with '{regenerate}'")
    if text != render(lib, fmt, examples):
        raise StaleDocsError(f"{display_path(path)} is stale: regenerate it with '{regenerate}'")
    return path


def _regenerate(folder: str | Path, fmt: str) -> str:
    """The command that writes the reference in ``fmt`` into ``folder``.

    Examples
    --------
    >>> _regenerate("out", "md"), _regenerate("my docs", "html")
    ('memform docs --out out', "memform docs --format html --out 'my docs'")
    """
    return " ".join(["memform docs", *(["--format", fmt] if fmt != "md" else []), "--out", shlex.quote(str(folder))])


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
