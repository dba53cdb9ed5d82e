"""A cache of the resolved library in the user's cache directory.

Parsing and resolving the rule files takes about half a second; a pickle of the result
loads in a fraction of that.  The file name carries a hash of everything the library is
built from (the rule files, the grammar and the engine's own source), and the pickle
carries the same hash inside, so a stale, truncated or corrupt file is never trusted: it
is rebuilt.  ``MEMFORM_NO_CACHE=1`` turns the cache off.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from pathlib import Path

_ENGINE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memform`` (default ``~/.cache/memform``), never the package folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memform"


def grammar_cache_file() -> str | bool:
    """Where lark keeps the grammar's parse tables, or False with the cache off."""
    if os.environ.get("MEMFORM_NO_CACHE"):
        return False
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # lark then builds the tables in memory and fails to save them quietly
        pass
    return str(folder / "grammar.lark-tables")


def fingerprint(folder: Path, grammar: Path) -> str:
    """A hash of the rule files, the grammar, the engine's source and the Python version."""
    h = hashlib.sha256(sys.version.encode())
    for path in [*sorted(folder.glob("*.mem")), grammar, *sorted(_ENGINE.glob("*.py"))]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


def load_cached(build, folder: Path, grammar: Path):
    """The library from the cache, or ``build()`` stored there; a bad file is rebuilt."""
    if os.environ.get("MEMFORM_NO_CACHE"):
        return build()
    key = fingerprint(folder, grammar)
    path = cache_dir() / f"library-{key}.pickle"
    try:
        with path.open("rb") as f:
            stored_key, library = pickle.load(f)
        if stored_key == key:
            library._cache_path, library._cache_key = path, key
            _compiled(library, key)
            return library
    except Exception:  # missing, truncated, corrupt or from another version: rebuild
        pass
    library = build()
    library._cache_path, library._cache_key = path, key
    save(library)
    _compiled(library, key)
    return library


def _compiled(library, key: str) -> None:
    """Keep the sympy-free compiled form beside the library (:mod:`engine.fast`)."""
    from .fast import ensure
    ensure(library, key)


#: files of other keys (other versions of the sources) kept per kind; older ones are removed
KEEP_OTHERS = 3


def prune(kind: str, key: str) -> None:
    """Remove all but the newest :data:`KEEP_OTHERS` files of ``kind`` built from other sources."""
    try:
        others = [p for p in cache_dir().glob(f"{kind}-*.pickle") if p.stem != f"{kind}-{key}"]
        others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        for path in others[KEEP_OTHERS:]:
            path.unlink(missing_ok=True)
    except OSError:  # another process pruned first, or the folder is read-only
        pass


def save(library) -> None:
    """Write the library (with the compositions it has cached so far) atomically."""
    path = getattr(library, "_cache_path", None)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".library-")
        compiled = {k: v for k, v in library._compose_cache.items()
                    if callable(v) or (isinstance(k, tuple) and k[0] == "memo")}
        for k in compiled:  # compiled numpy functions and composition memos are not stored
            del library._compose_cache[k]
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump((library._cache_key, library), f, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            library._compose_cache.update(compiled)
        os.replace(tmp, path)
    except OSError:  # a read-only home is no reason to fail
        return
    prune("library", library._cache_key)
