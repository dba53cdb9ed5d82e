"""Files kept in the user's cache directory: plain data, checked before it is believed.

What is kept: a snapshot of the resolved shipped library (:mod:`engine.library.snapshot`: its sympy
expressions as tables of nodes, rebuilt without simplification, so a new process need not
parse and resolve the rule files again), the compiled form of it and the formula columns
that :mod:`engine.answers.quick` uses to answer ``memform estimate`` without sympy, and lark's parse
tables of the grammar (:func:`engine.paths.lark_parser`).  Each file is named for its kind
and a hash of everything it is derived from (the rule files, the grammar and the engine's
own source, :func:`fingerprint`), so files of other sources are never read; the newest few
are kept and older ones pruned.  A user's own rule files are not kept: a library with them
is built each time.

A file is never code and is never trusted blindly:

- it holds JSON, in a tagged encoding that keeps tuples, dictionaries with any keys and
  exact :class:`fractions.Fraction` numbers (:func:`encode`), decoded strictly: anything
  unexpected (a float, an unknown tag, a duplicate key) and the file is ignored;
- its first line holds an HMAC-SHA256 of its name and the bytes after that line, keyed by a
  random secret kept in the same private directory; it is checked before anything is
  parsed, so a truncated, corrupt, hand-edited or renamed file (its plain SHA-256 fixed up
  or not) is ignored and rebuilt;
- it is written atomically (a new private temporary file in the same directory, created
  with ``O_EXCL | O_NOFOLLOW``, then :func:`os.replace`) and read with ``O_NOFOLLOW``: a
  symlink at a cache path is neither followed nor written through;
- the directory is created private (mode 0o700); one not owned by the user, or writable by
  group or others, is not used (a note on stderr says so, once), nor is a file in it that is
  not a regular file of the user's, private to them.

``MEMFORM_NO_CACHE=1`` turns all of it off; a directory that cannot be written is no
reason to fail (everything is rebuilt in memory).
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import sys
from fractions import Fraction
from pathlib import Path

from .paths import data_path, grammar_path
from .lazy import lazy

tempfile = lazy("tempfile")  # mkstemp: O_CREAT | O_EXCL | O_NOFOLLOW, mode 0o600 (a write only)

_ENGINE = Path(__file__).resolve().parent

#: files of other keys (other versions of the sources) kept per kind; older ones are removed
KEEP_OTHERS = 3
#: the largest cache file read (the formula columns are the largest, well under this)
MAX_BYTES = 64 << 20
#: the first line of every cache file, before the hex HMAC of the rest
MAGIC = b"memform-cache-1 "

_noted: set[str] = set()  # the notes on directories not used, written once per process


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memform`` (default ``~/.cache/memform``), never the package folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memform"


def fingerprint(folder: Path, grammar: Path) -> str:
    """A hash of the rule files, the grammar, the engine's source and the Python version."""
    h = hashlib.sha256(sys.version.encode())
    for path in [*sorted(folder.glob("*.mem")), grammar]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for path in sorted(_ENGINE.rglob("*.py")):  # every stage of the engine (engine/*/...)
        if path.relative_to(_ENGINE).parts[0] == "_built":  # what is built from them (a parser)
            continue
        h.update(path.relative_to(_ENGINE).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


_KEYS: dict = {}  # the fingerprint of each source folder, taken once per process


def source_key() -> str | None:
    """The :func:`fingerprint` of the shipped library, or None with the cache off.  It is
    taken once per process (a command asks for it several times, and the sources do not
    change under a running command)."""
    if os.environ.get("MEMFORM_NO_CACHE"):
        return None
    folders = (data_path("formulas"), grammar_path())
    if folders not in _KEYS:
        _KEYS[folders] = fingerprint(*folders)
    return _KEYS[folders]


# ---------------------------------------------------------------- the directory
def private_dir() -> Path | None:
    """The cache directory, created with mode 0o700, or None: with the cache off, when it
    cannot be created, or when others could plant files in it (then a note says so).
    Without POSIX file ownership and ``O_NOFOLLOW`` (Windows) there is no cache."""
    if os.environ.get("MEMFORM_NO_CACHE") or not hasattr(os, "O_NOFOLLOW"):
        return None
    folder = cache_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(folder)  # a symlinked directory: the one it names is checked
    except OSError:  # a read-only home, or a file in the way: run without the cache
        return None
    if st.st_uid != os.geteuid():
        problem = "not owned by you"
    elif st.st_mode & 0o022:
        problem = f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    else:
        return folder
    note = f"memform: note: cache directory {folder} is {problem}; running without the cache\n"
    if note not in _noted:
        _noted.add(note)
        sys.stderr.write(note)
    return None


def _read_private(path: Path) -> bytes | None:
    """The bytes of a regular file of this user's that only they can read or write; None
    for anything else (missing, a symlink, a fifo, too large, shared)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None
        data = f.read(MAX_BYTES + 1)
    return data if len(data) <= MAX_BYTES else None


def _write_private(folder: Path, name: str, data: bytes) -> bool:
    """Put ``data`` at ``folder/name`` atomically, replacing whatever is there (a symlink
    included: it is replaced, not followed)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}-")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, folder / name)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False


def _secret(folder: Path) -> bytes | None:
    """The key of the files' HMACs: 32 random bytes in ``folder/secret``, made on first use."""
    secret = _read_private(folder / "secret")
    if secret is not None and len(secret) == 32:
        return secret
    secret = os.urandom(32)
    return secret if _write_private(folder, "secret", secret) else None


def _mac(secret: bytes, name: str, body: bytes) -> bytes:
    return hmac.new(secret, name.encode() + b"\0" + body, hashlib.sha256).hexdigest().encode()


# ---------------------------------------------------------------- reading and writing
def _name(kind: str, key: str) -> str:
    return f"{kind}-{key}.json"


def read(kind: str, key: str):
    """The data stored as ``kind`` for sources ``key``, or None: missing, unreadable,
    altered, or not exactly what :func:`write` writes.  The user's cache first, then what
    the package was built with (:func:`read_built`)."""
    if _BUILDING is not None:  # built from the sources alone
        return None
    folder = private_dir()
    if folder is None:
        return None if os.environ.get("MEMFORM_NO_CACHE") else read_built(kind, key)
    found = _read_cached(folder, kind, key)
    return found if found is not None else read_built(kind, key)


def _read_cached(folder: Path, kind: str, key: str):
    name = _name(kind, key)
    raw = _read_private(folder / name)
    if raw is None or not raw.startswith(MAGIC):
        return None
    mac, _, body = raw[len(MAGIC):].partition(b"\n")
    secret = _secret(folder)
    if secret is None or not hmac.compare_digest(mac, _mac(secret, name, body)):
        return None
    try:
        return decode(body)
    except (ValueError, TypeError, RecursionError):
        return None


def write(kind: str, key: str, data, keep: int = KEEP_OTHERS) -> None:
    """Store ``data`` (what :func:`encode` takes) as ``kind`` for sources ``key``, and prune
    the files of ``kind`` with other keys (older sources) to the newest ``keep``; quietly
    nothing when that is not possible.  While the package is built (:func:`building`),
    into its folder of built files instead."""
    if _BUILDING is not None:
        _write_built(_BUILDING, kind, key, data)
        return
    folder = private_dir()
    if folder is None:
        return
    secret = _secret(folder)
    if secret is None:
        return
    name = _name(kind, key)
    body = _body(data)
    if body is None:  # not plain data: not kept
        return
    if _write_private(folder, name, MAGIC + _mac(secret, name, body) + b"\n" + body):
        prune(kind, key, keep)


def prune(kind: str, key: str, keep: int = KEEP_OTHERS) -> None:
    """Remove all but the newest ``keep`` files of ``kind`` with other keys."""
    folder = private_dir()
    if folder is None:
        return
    try:
        others = [p for p in folder.glob(_name(kind, "*")) if p.name != _name(kind, key)]
        others.sort(key=lambda p: p.lstat().st_mtime, reverse=True)
        for path in others[keep:]:
            path.unlink(missing_ok=True)  # a symlink is removed, not followed
    except OSError:  # another process pruned first, or the folder is read-only
        pass


# ---------------------------------------------------------------- built with the package
# What the first run would otherwise build (the snapshot of the resolved library, its
# compiled form, lark's parse tables) is built once when the package is built or installed
# (engine/_build_hook.py, a hatchling hook: `pip install` and `python -m build` both run it)
# and kept in engine/_built/, named like the cache's files for the same fingerprint: a
# library changed after that (an edit of an editable install) has another fingerprint and
# builds as before.  Those files are part of the installed package, as trusted as its code
# (no user secret can sign them): each opens with a SHA-256 of its name and body, checked
# before anything is parsed, so a truncated or damaged file is ignored; the decoding is the
# same strict one.
BUILT = Path(os.environ.get("MEMFORM_BUILT") or _ENGINE / "_built")  # tests point it elsewhere
BUILT_MAGIC = b"memform-built-1 "
_BUILDING: Path | None = None


def read_built(kind: str, key: str):
    """The data the package was built with for ``kind`` and sources ``key``, or None."""
    name = _name(kind, key)
    try:
        with open(BUILT / name, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_BYTES or not raw.startswith(BUILT_MAGIC):
        return None
    digest, _, body = raw[len(BUILT_MAGIC):].partition(b"\n")
    if not hmac.compare_digest(digest, _digest(name, body)):
        return None
    try:
        return decode(body)
    except (ValueError, TypeError, RecursionError):
        return None


def _digest(name: str, body: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\0" + body).hexdigest().encode()


def _body(data) -> bytes | None:
    """``data`` as the JSON a file keeps (:func:`encode`), or None where it is not plain data."""
    try:
        return json.dumps(encode(data), separators=(",", ":"), allow_nan=False).encode()
    except (ValueError, TypeError, RecursionError):
        return None


def _write_built(folder: Path, kind: str, key: str, data) -> None:
    name = _name(kind, key)
    body = _body(data)
    if body is None:
        return
    (folder / name).write_bytes(BUILT_MAGIC + _digest(name, body) + b"\n" + body)


@contextlib.contextmanager
def building(folder: Path):
    """Within it, :func:`write` puts files into ``folder`` (emptied of older built files
    first) in the package's format, and nothing is read from the user's cache."""
    global _BUILDING
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("*.json"), *folder.glob("lalr_*.py")]:
        old.unlink()
    _BUILDING = folder
    try:
        yield folder
    finally:
        _BUILDING = None


# ---------------------------------------------------------------- the encoding
def encode(value):
    """Plain data as JSON values: None, bools, ints and strings as they are, lists as
    arrays, and every object tagged: ``{"t": [...]}`` a tuple, ``{"F": [p, q]}`` a
    Fraction, ``{"d": [[key, value], ...]}`` a dict (its keys encoded like its values).

    >>> encode({("model", "x"): (Fraction(1, 3), [True, None])})
    {'d': [[{'t': ['model', 'x']}, {'t': [{'F': [1, 3]}, [True, None]]}]]}
    """
    if value is None or isinstance(value, (bool, str)) or type(value) is int:
        return value
    if type(value) is Fraction:
        return {"F": [value.numerator, value.denominator]}
    if type(value) is tuple:
        return {"t": [encode(v) for v in value]}
    if type(value) is list:
        return [encode(v) for v in value]
    if type(value) is dict:
        return {"d": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(f"{type(value).__name__} is not kept in the cache")


def decode(body: bytes):
    """The value :func:`encode` gave, from JSON text; ValueError or TypeError on anything
    it does not write (floats, NaN, other objects, bad tags, duplicate keys).

    >>> decode(b'{"d":[[{"t":["model","x"]},{"F":[2,6]}]]}')
    {('model', 'x'): Fraction(1, 3)}
    """
    return json.loads(body, object_pairs_hook=_tagged, parse_float=_refuse, parse_constant=_refuse)


def _tagged(pairs: list):
    if len(pairs) != 1 or not isinstance(pairs[0][1], list):
        raise ValueError("not a tagged value")
    tag, items = pairs[0]
    if tag == "t":
        return tuple(items)
    if tag == "F":
        p, q = items
        if type(p) is not int or type(q) is not int or q <= 0:
            raise ValueError("not a fraction")
        return Fraction(p, q)
    if tag == "d":
        out = {}
        for pair in items:
            k, v = pair
            if not isinstance(pair, list) or k in out:
                raise ValueError("not a dictionary")
            out[k] = v
        return out
    raise ValueError(f"unknown tag {tag!r}")


def _refuse(text: str):
    raise ValueError(f"{text} is not kept in the cache")
