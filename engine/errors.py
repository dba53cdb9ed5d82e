"""Errors that memform reports to its users.

Every error a user can cause is an :class:`EngineError`.  Errors tied to a place in a
rule file (or in a ``--set`` argument) carry a :class:`Span` and render in compiler
style: ``file:line:col: message``, the offending line, a caret under the culprit and an
optional hint.  This module imports nothing from the rest of the engine.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Span:
    """A place in a source text: 1-based line and column, ``length`` characters wide."""

    file: str
    line: int
    column: int
    length: int = 1
    text: str = ""  # the whole source line, for rendering

    def render(self) -> str:
        gutter = f"{self.line:>5} | "
        caret = " " * (len(gutter) - 2) + "| " + " " * (self.column - 1) + "^" * max(1, self.length)
        return f"{gutter}{self.text}\n{caret}"


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """A ``did you mean 'x'?`` hint for ``name`` among ``known`` names, or None.  A name that
    only lacks a suffix ('h200' for the preset 'h200-141g', 'a100' for 'a100-40g' and
    'a100-80g') is offered those names before the closest spelling ('h20')."""
    names = sorted(set(known))
    longer = [k for k in names if name and k.startswith(name + "-")]
    if longer:
        return "did you mean " + " or ".join(f"'{k}'" for k in longer[:4]) + "?"
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: each control character (an escape sequence's
    start, a carriage return ...) but the newline becomes '?', so carets stay aligned."""
    return "".join(c if c.isprintable() or c == "\n" else "?" for c in text)


def shown(text: str, limit: int = 60) -> str:
    """User text as it may be echoed: cut to ``limit`` characters, non-printable ones escaped."""
    cut = text if len(text) <= limit else text[:limit - 3] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)


class EngineError(Exception):
    """Base class of every error memform reports to a user.

    ``message`` is lowercase with no final period; ``span`` locates it; ``hint`` suggests
    a fix.  ``str(err)`` renders all three.
    """

    exit_code = 2

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint

    def __str__(self) -> str:
        head = f"{self.span.file}:{self.span.line}:{self.span.column}: " if self.span else ""
        out = [f"{head}{self.message}"]
        if self.span and self.span.text:
            out.append(self.span.render())
        if self.hint:
            out.append(f"hint: {self.hint}")
        return "\n".join(printable(part) for part in out)

    def __reduce__(self):
        return (self.__class__, (self.message, self.span, self.hint))


class SourceError(EngineError, ValueError):
    """An error located in a rule file."""


class FormulaSyntaxError(SourceError):
    """The text does not follow the grammar."""


class UnknownNameError(SourceError):
    """A name (rule, input, option, choice, function, preset) that is not declared."""


class RedefinitionError(SourceError):
    """A name declared twice without ``override``."""


class UnitError(SourceError):
    """Quantities of different units combined (bytes added to a count, ...)."""


class DependencyCycleError(SourceError):
    """Rules that refer to each other in a cycle."""


class ResourceLimitError(SourceError):
    """Input too large or too deep to process in bounded time (a pathological rule file)."""


class DomainError(EngineError, ValueError):
    """A value outside an input's declared domain, or not a choice of an option."""


class MissingInputError(EngineError, KeyError):
    """An expression still depends on inputs that have no value."""

    def __str__(self) -> str:  # KeyError would quote the message
        return EngineError.__str__(self)


class UsageError(EngineError):
    """A command-line request that cannot be carried out as written."""


class InfeasibleError(EngineError):
    """No value of the unknown fits the capacity."""

    exit_code = 1


class ErrorGroup(EngineError):
    """Several errors found at once (every problem is reported, not only the first)."""

    def __init__(self, errors: list[EngineError]):
        super().__init__(f"{len(errors)} errors")
        self.errors = errors

    def __str__(self) -> str:
        return "\n\n".join(str(e) for e in self.errors)

    def __reduce__(self):
        return (self.__class__, (self.errors,))
