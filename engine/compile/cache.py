"""The shipped library between processes: its snapshot and its compiled form in the cache."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..library import snapshot
from ..library.registry import Library, build
from ..paths import data_path, grammar_path
from ..store import fingerprint, read, write
from .compiler import ensure


def load(extra: Iterable[str | Path] = (), folder: str | Path | None = None) -> Library:
    """Load and resolve the formula library, plus a user's rule files.

    The shipped library alone is kept in the cache as a snapshot
    (:mod:`engine.library.snapshot`); with a user's files, its rules they leave unchanged are
    taken over from it (without the cache everything is resolved afresh), and the compiled form that :mod:`engine.answers.quick`
    answers from is checked against it (and written when missing or different).

    Examples
    --------
    >>> lib = load()
    >>> "total" in lib.rules
    True
    """
    extra = list(extra)
    if folder is not None or os.environ.get("MEMFORM_NO_CACHE"):
        return build(extra, folder)
    if extra:  # the shipped rules a user's files leave as they are resolve as in the shipped library
        return build(extra, base=load())
    key = fingerprint(data_path("formulas"), grammar_path())
    library, built = None, False
    stored = read("library", key)
    if stored is not None:
        try:
            library = snapshot.load(stored)
        except snapshot.Refused:  # not what dump writes: built afresh and replaced
            library = None
    if library is None:
        library, built = build(), True
        try:
            write("library", key, snapshot.dump(library))
        except TypeError:  # holds what a snapshot does not keep: built every time
            pass
    ensure(library, key, built)
    return library
