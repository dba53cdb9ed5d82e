"""The grammar, loaded once, and the entry points that turn text into declarations.

Only this module, :mod:`engine.lang.transform`, :mod:`engine.paths` (which builds the parser)
and :mod:`engine.answers.quick` (which reads ``--set`` values with it) import lark.  Lark's exceptions never
escape: syntax errors become :class:`~engine.errors.FormulaSyntaxError` with a location,
the offending line and a caret, and any other error met while building a part of the text
(sympy's, Python's arithmetic) a located :class:`~engine.errors.DomainError`.
"""
from __future__ import annotations

import functools

import sympy
from lark import Lark, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.exceptions import VisitError

from ..errors import DomainError, EngineError, FormulaSyntaxError, ResourceLimitError, Span
from .grammar import lark_parser
from .transform import ToDecls

#: the largest rule file (or value) the parser reads
MAX_FILE_CHARS = 1_000_000

#: readable names for the grammar's named terminals in "expected ..." hints
_TERMINAL_WORDS = {"NAME": "a name", "NUMBER": "a number", "STRING": 'a "doc string"',
                   "CMP": "a comparison", "BYTE_UNIT": "a byte unit", "OVERRIDE": "'override'",
                   "$END": "end of file"}


@functools.cache
def grammar() -> Lark:
    """The LALR parser of the rule language (built once per process)."""
    return lark_parser()


def _expected_words(expected) -> str:
    words = set()
    for term in expected:
        if term in _TERMINAL_WORDS:
            words.add(_TERMINAL_WORDS[term])
            continue
        try:
            pattern = grammar().get_terminal(term).pattern
        except KeyError:
            continue
        words.add(f"'{pattern.value}'" if pattern.type == "str" else term.lower())
    return ", ".join(sorted(words))


def _syntax_error(exc: UnexpectedInput, text: str, path: str) -> FormulaSyntaxError:
    lines = text.splitlines() or [""]
    line = getattr(exc, "line", -1)
    column = getattr(exc, "column", -1)
    at_end = isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
    if isinstance(exc, UnexpectedEOF) or at_end or line in (-1, None) or line > len(lines):
        line = len(lines)
        column = len(lines[-1]) + 1
        message = "unexpected end of input"
        length = 1
    elif isinstance(exc, UnexpectedCharacters):
        message = f"unexpected character '{text[exc.pos_in_stream]}'"
        length = 1
    else:
        tok = exc.token
        shown = str(tok) if tok.type != "$END" else "end of input"
        message = f"unexpected '{shown}'" if tok.type != "$END" else "unexpected end of input"
        length = max(1, len(str(tok)))
    hint = None
    expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None)
    if expected:
        hint = "expected " + _expected_words(expected)
    span = Span(path, line, column, length, lines[line - 1] if 0 < line <= len(lines) else "")
    return FormulaSyntaxError(message, span, hint=hint)


def parse_text(text: str, path: str = "<string>") -> list:
    """Parse one rule file into declarations.

    Examples
    --------
    >>> [d.name for d in parse_text('input dp : count >= 1 = 1 "data-parallel ranks"')]
    ['dp']
    """
    if len(text) > MAX_FILE_CHARS:
        raise ResourceLimitError(f"rule file has {len(text):,} characters; the limit is {MAX_FILE_CHARS:,}",
                                 Span(path, 1, 1, 1, text[:80].splitlines()[0] if text else ""))
    return _parse(text, path, "start")


def _parse(text: str, path: str, start: str, names: dict | None = None):
    """Parse from ``start`` and transform; only memform's own errors escape.  ``names``
    receives the names the text uses, each with its place."""
    try:
        tree = grammar().parse(text, start=start)
        transformer = ToDecls(path, text)
        result = transformer.transform(tree)
        if names is not None:
            names.update(transformer._names)
        return result
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, path) from None
    except VisitError as exc:  # .transform() wraps the errors our callbacks raise
        if isinstance(exc.orig_exc, EngineError):
            raise exc.orig_exc from None
        if isinstance(exc.orig_exc, RecursionError):
            raise _too_deep(text, path) from None
        raise _not_computable(exc, text, path) from None
    except RecursionError:
        raise _too_deep(text, path) from None


def _not_computable(exc: VisitError, text: str, path: str) -> DomainError:
    """An error of sympy (or of Python's arithmetic) on a part of the text, located there."""
    where = getattr(exc.obj, "meta", exc.obj)  # the tree node or token being transformed
    lines = text.splitlines() or [""]
    line = getattr(where, "line", None) or 1
    column = getattr(where, "column", None) or 1
    source = text[getattr(where, "start_pos", 0):getattr(where, "end_pos", len(text))]
    shown = " ".join(source.split())
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    length = len(source.splitlines()[0]) if source.strip() else 1
    return DomainError(f"cannot compute '{shown}'", Span(path, line, column, max(1, length),
                                                          lines[line - 1] if line <= len(lines) else ""),
                       hint=f"{type(exc.orig_exc).__name__}: {exc.orig_exc}"[:200])


def _too_deep(text: str, path: str) -> ResourceLimitError:
    lines = text.splitlines() or [""]
    longest = max(range(len(lines)), key=lambda i: len(lines[i]))
    return ResourceLimitError("expression nested too deeply (or with too many terms) to process",
                              Span(path, longest + 1, 1, 1, lines[longest][:120]),
                              hint="split it into several rules")


def parse_value(text: str, where: str = "--set", constant: bool = False) -> sympy.Basic:
    """Parse a value: a number (with optional byte unit), arithmetic, or a choice name
    (returned as a Symbol).  With ``constant`` (a value given on the command line) a name may
    stand alone but not inside arithmetic or a condition, even where it would cancel out."""
    if len(text) > 10_000:
        raise ResourceLimitError(f"a value of {len(text):,} characters is too long", Span(where, 1, 1, 1, text[:80]))
    names: dict[str, Span] = {}
    value = _parse(text, where, "expr", names)
    # a name stands alone when the text is that name (in parentheses at most): the value being a
    # Symbol is not enough, as the byte unit is one too (`(min(if x in {1} then 1 else 2, 1)) * 1 B`)
    if constant and names and not (len(names) == 1 and text.strip(" \t()") == next(iter(names))):
        name, span = next(iter(names.items()))
        raise DomainError(f"a value is a constant: it cannot use '{name}'", span)
    return value
