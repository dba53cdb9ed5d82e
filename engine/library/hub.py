"""Hugging Face Hub ids and safetensors checkpoints as memform inputs.

``org/name`` is resolved to its ``config.json`` in the local Hugging Face cache first, with no
network, laid out as ``huggingface_hub`` lays it out::

    $HF_HUB_CACHE                  (or $HF_HOME/hub, or ~/.cache/huggingface/hub)
      models--org--name/
        refs/main                  the commit hash that 'main' points to
        snapshots/<hash>/config.json   a symlink into blobs/
        blobs/<sha256 or git sha>
        .no_exist/<hash>/<file>    files known to be absent at that commit

When the file is not cached and the optional ``huggingface_hub`` package is installed
(``memform[hub]``), it is downloaded with ``hf_hub_download`` into that same cache; every
failure (offline, gated, not found ...) is a :class:`UsageError` that says how to fetch it.

A checkpoint folder is summarised from the safetensors headers alone (8-byte little-endian
header length, then a JSON header naming each tensor's dtype, shape and data offsets); no
tensor data is ever read.  The header is checked as the reference implementation checks it
(huggingface/safetensors, safetensors/src/tensor.rs): at most 100,000,000 bytes, a JSON
object with no duplicate keys, offsets that tile the data buffer from 0 with no hole or
overlap, each tensor's byte size equal to its element count times its dtype's width, and
the buffer ending exactly at the end of the file.  Anything else is a :class:`SourceError`
naming the file.
"""
from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SourceError, UsageError, shown

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_HEADER = 100_000_000  #: safetensors' MAX_HEADER_SIZE (safetensors/src/tensor.rs)
MAX_INDEX = 100_000_000  #: an index is a few megabytes even for the largest models
MAX_SHOWN_FILES = 3

#: bits per element of every dtype safetensors defines (safetensors/src/tensor.rs, Dtype::bitsize)
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}

_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"({_PART})/({_PART})", re.ASCII)
_COMMIT = re.compile(r"[0-9a-f]{40}")
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub.constants.ENV_VARS_TRUE_VALUES


# ---------------------------------------------------------------------------------------------
# Hub ids and the cache
# ---------------------------------------------------------------------------------------------

def looks_like_hub_id(text: str) -> bool:
    """Whether ``text`` reads as a Hub model id ``org/name`` rather than a path or a preset.

    Both parts use the Hub's characters (letters, digits, ``-``, ``_``, ``.``), start and end
    with a letter, digit or ``_``, are at most 96 characters, hold no ``--`` or ``..``; the name
    does not end in ``.git`` or ``.json`` (a ``.json`` ending is a config file's path); and no
    file or folder of that name exists here.

    >>> looks_like_hub_id("Qwen/Qwen3-8B"), looks_like_hub_id("llama2-70b")
    (True, False)
    >>> looks_like_hub_id("configs/llama.json"), looks_like_hub_id("a--b/c"), looks_like_hub_id("/abs/path")
    (False, False, False)
    """
    if not isinstance(text, str) or not _HUB_ID.fullmatch(text):
        return False
    if "--" in text or ".." in text or text.endswith((".git", ".json")):
        return False
    try:
        return not os.path.lexists(text)
    except (OSError, ValueError):
        return False


def cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment as ``huggingface_hub`` reads it:
    ``HF_HUB_CACHE``, else the legacy ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    def expand(p: str) -> str:
        return os.path.expandvars(os.path.expanduser(p))

    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(expand(home), "hub")
    return Path(expand(hub))


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) asks for no network."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.strip().upper() in _TRUE


def _check_id(repo_id: str) -> None:
    if not isinstance(repo_id, str) or not _HUB_ID.fullmatch(repo_id) or "--" in repo_id or ".." in repo_id:
        raise UsageError(f"'{shown(str(repo_id))}' is not a Hugging Face model id",
                         hint="a model id reads org/name: letters, digits, '-', '_' and '.'")


def _check_revision(revision: str) -> None:
    parts = revision.split("/") if isinstance(revision, str) else [""]
    if not all(parts) or any(p in (".", "..") or "\\" in p or "\0" in p for p in parts) or revision.startswith("/"):
        raise UsageError(f"'{shown(str(revision))}' is not a revision",
                         hint="a revision is a branch, a tag or a 40-hex commit hash (main by default)")


def _snapshot(repo_id: str, revision: str) -> tuple[Path, str | None]:
    """The repository's cache folder and the commit ``revision`` resolves to there (or None)."""
    repo = cache_dir() / ("models--" + repo_id.replace("/", "--"))
    if _COMMIT.fullmatch(revision):
        return repo, revision
    try:
        commit = (repo / "refs" / revision).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError, ValueError):
        return repo, None
    return repo, commit if _COMMIT.fullmatch(commit) else None


def cached_file(repo_id: str, filename: str, revision: str = "main") -> Path | None:
    """``filename`` of ``repo_id`` at ``revision`` in the local cache (the snapshot's path, a
    symlink into ``blobs/``), or None when it is not there.  Never touches the network."""
    _check_id(repo_id)
    _check_revision(revision)
    repo, commit = _snapshot(repo_id, revision)
    if commit is None:
        return None
    path = repo / "snapshots" / commit / filename
    try:
        return path if path.is_file() else None  # a dangling symlink is not a cached file
    except OSError:
        return None


def _fetch_hint(repo_id: str, filename: str, revision: str) -> str:
    rev = "" if revision == "main" else f" --revision {revision}"
    return (f"fetch it with `hf download {repo_id} {filename}{rev}` (`huggingface-cli download` with an "
            f"older huggingface_hub), or install memform[hub] (pip install 'memform[hub]') to "
            f"download it when online; or give the path of a local config.json")


def resolve_file(repo_id: str, filename: str, revision: str = "main", *, allow_download: bool = True) -> Path:
    """The local path of ``filename`` in the model repository ``repo_id`` at ``revision``.

    The cache is looked up first, without network.  Otherwise the file is downloaded with
    ``huggingface_hub.hf_hub_download`` into the same cache when that package is installed,
    ``allow_download`` is true and ``HF_HUB_OFFLINE`` is not set.  Every failure is a
    :class:`UsageError` saying why and how to fetch the file.
    """
    _check_id(repo_id)
    _check_revision(revision)
    found = cached_file(repo_id, filename, revision)
    if found is not None:
        return found
    repo, commit = _snapshot(repo_id, revision)
    at = "" if revision == "main" else f" at revision '{shown(revision)}'"
    if commit is not None and (repo / ".no_exist" / commit / filename).is_file():
        raise UsageError(f"'{repo_id}'{at} has no {filename} (the Hugging Face cache records it as absent)",
                         hint="memform reads a transformers config.json; this repository may hold another format")
    where = f"not in the Hugging Face cache ({shown(str(cache_dir()), 255)})"
    hint = _fetch_hint(repo_id, filename, revision)
    if not allow_download:
        raise UsageError(f"{filename} of '{repo_id}'{at} is {where}", hint=hint)
    if offline():
        raise UsageError(f"{filename} of '{repo_id}'{at} is {where} and HF_HUB_OFFLINE is set", hint=hint)
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub import errors as hub_errors
    except ImportError:
        raise UsageError(f"{filename} of '{repo_id}'{at} is {where}, and huggingface_hub, which downloads it, "
                         f"is not installed", hint=hint) from None
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, cache_dir=str(cache_dir())))
    except Exception as exc:  # noqa: BLE001 -- every failure becomes a UsageError below
        raise _download_error(exc, hub_errors, repo_id, filename, revision, at, hint) from None


def _download_error(exc, hub_errors, repo_id, filename, revision, at, hint) -> UsageError:
    """The user-facing error for an exception ``hf_hub_download`` raised."""
    page = f"https://huggingface.co/{repo_id}"

    def isa(name):
        cls = getattr(hub_errors, name, None)
        return isinstance(cls, type) and isinstance(exc, cls)

    if isa("GatedRepoError"):
        return UsageError(f"'{repo_id}' is a gated model: its files need approved access",
                          hint=f"ask for access at {page}, then log in with `hf auth login` (or set HF_TOKEN)")
    if isa("RepositoryNotFoundError"):
        return UsageError(f"no model '{repo_id}' on the Hugging Face Hub",
                          hint="check the spelling; a private model needs `hf auth login` (or HF_TOKEN)")
    if isa("RevisionNotFoundError"):
        return UsageError(f"'{repo_id}' has no revision '{shown(revision)}'",
                          hint=f"see the branches and tags at {page}")
    if isa("DisabledRepoError"):
        return UsageError(f"'{repo_id}' is disabled on the Hugging Face Hub")
    if (isa("LocalEntryNotFoundError") or isa("OfflineModeIsEnabled")
            or isinstance(exc, (ConnectionError, TimeoutError))):
        return UsageError(f"{filename} of '{repo_id}'{at} is not cached and the Hugging Face Hub cannot be reached "
                          f"(offline?)", hint=hint)
    if isa("EntryNotFoundError"):
        return UsageError(f"'{repo_id}'{at} has no {filename}",
                          hint="memform reads a transformers config.json; this repository may hold another format")
    if isa("HfHubHTTPError"):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return UsageError(f"the Hugging Face Hub refused access to '{repo_id}' (401)",
                              hint="log in with `hf auth login` (or set HF_TOKEN)")
        return UsageError(f"downloading {filename} of '{repo_id}' failed: HTTP {status or 'error'}", hint=hint)
    if isinstance(exc, OSError):
        return UsageError(f"downloading {filename} of '{repo_id}' failed: {exc.strerror or type(exc).__name__}",
                          hint=hint)
    return UsageError(f"downloading {filename} of '{repo_id}' failed: {type(exc).__name__}", hint=hint)


def resolve_config(repo_id: str, revision: str = "main", *, allow_download: bool = True) -> Path:
    """The path of ``config.json`` of the Hub model ``repo_id`` (see :func:`resolve_file`).

    The checkpoint, where cached, lies beside it: ``checkpoint_summary(path.parent)``.
    """
    return resolve_file(repo_id, CONFIG, revision, allow_download=allow_download)


# ---------------------------------------------------------------------------------------------
# Safetensors checkpoints
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tensor:
    """One tensor as a safetensors header describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Checkpoint:
    """What a folder's safetensors files hold, read from their headers alone.

    ``params`` is the exact number of stored elements.  For a quantised checkpoint it counts
    what is stored: a packed I32 or U8 tensor counts one element per word, however many weights
    it packs, and scales, zero points and the like count too; ``elements_by_dtype`` tells them
    apart.  A tied embedding is stored once.  ``total_bytes`` (the sum of ``bytes_by_dtype``)
    is the tensor data exactly as stored, headers not included; ``file_bytes`` is the files'
    sizes.  ``missing`` lists the shards the index names that are not in the folder (only
    with ``allow_partial``): then the counts cover the present files alone.
    """

    folder: Path
    files: tuple[str, ...]
    tensors: int
    params: int
    bytes_by_dtype: dict[str, int]
    total_bytes: int
    elements_by_dtype: dict[str, int] = field(default_factory=dict)
    file_bytes: int = 0
    index_total_size: int | None = None  #: the index's metadata.total_size, as written
    missing: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.missing


def _fail(path: Path, message: str) -> SourceError:
    return SourceError(f"{shown(path.name, 255)}: {message}",
                       hint="the file may be truncated or not a safetensors file; download it again")


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


class _Duplicate(ValueError):
    pass


def _bad_constant(name):
    raise ValueError(f"{name} is not JSON")


def _parse_json(path: Path, raw: bytes, what: str):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(path, f"{what} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_bad_constant)
    except _Duplicate as exc:
        raise _fail(path, f"{what} has the key '{shown(str(exc.args[0]))}' twice") from None
    except json.JSONDecodeError as exc:
        raise _fail(path, f"{what} is not valid JSON: {exc.msg.lower()} at character {exc.pos}") from None
    except (ValueError, RecursionError) as exc:
        raise _fail(path, f"{what} is not valid JSON: {shown(str(exc)) or type(exc).__name__}") from None


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_header(path: str | Path) -> tuple[list[Tensor], dict[str, str]]:
    """The tensors and the ``__metadata__`` of one safetensors file, from its header alone.

    Reads the 8-byte length and the JSON header, never the tensor data; checks them as
    safetensors does (see the module's docstring); a malformed file is a :class:`SourceError`.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise _fail(path, f"{size} bytes, too short for a safetensors header (8-byte length first)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise _fail(path, f"header length {n} is over safetensors' limit of {MAX_HEADER} bytes")
            if 8 + n > size:
                raise _fail(path, f"header length {n} runs past the end of the file ({size} bytes)")
            raw = f.read(n)
    except SourceError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot read '{shown(str(path), 255)}': {exc.strerror or type(exc).__name__}") from None
    except ValueError:  # a NUL character in the path
        raise UsageError("cannot read a file: the path contains a NUL character") from None
    if len(raw) != n:
        raise _fail(path, f"header length {n} runs past the end of the file ({size} bytes)")
    if not raw.startswith(b"{"):
        raise _fail(path, "the header does not start with '{'")
    header = _parse_json(path, raw, "the header")
    if not isinstance(header, dict):
        raise _fail(path, "the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _fail(path, "__metadata__ is not a map of strings to strings")
    entries = []
    for name, info in header.items():
        what = f"tensor '{shown(name)}'"
        if not isinstance(info, dict):
            raise _fail(path, f"{what} is not described by an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise _fail(path, f"{what} has an unknown dtype {shown(json.dumps(dtype))}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise _fail(path, f"{what} has a shape that is not a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets)):
            raise _fail(path, f"{what} has data_offsets that are not two non-negative integers")
        entries.append((tuple(offsets), name, dtype, tuple(shape)))
    entries.sort(key=lambda e: e[0])  # safetensors sorts by offsets before it checks them
    tensors, start = [], 0
    for (begin, end), name, dtype, shape in entries:
        what = f"tensor '{shown(name)}'"
        if begin != start or end < begin:
            raise _fail(path, f"{what} has data_offsets [{begin}, {end}]; the data should continue at {start} "
                              f"(the tensors tile the data buffer, no hole, no overlap)")
        t = Tensor(name, dtype, shape, end - begin)
        bits = t.elements * DTYPE_BITS[dtype]
        if bits % 8:
            raise _fail(path, f"{what}: {t.elements} elements of {dtype} do not fill whole bytes")
        if bits // 8 != t.nbytes:
            raise _fail(path, f"{what}: shape {list(shape)} of {dtype} is {bits // 8} bytes but its "
                              f"data_offsets span {t.nbytes}")
        tensors.append(t)
        start = end
    if 8 + n + start != size:
        raise _fail(path, f"the tensors end at byte {8 + n + start} but the file has {size} bytes")
    return tensors, metadata


def _read_index(path: Path) -> tuple[list[str], int | None]:
    """The shard files an index names (in first-mention order) and its metadata.total_size."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_INDEX + 1)
    except OSError as exc:
        raise UsageError(f"cannot read '{shown(str(path), 255)}': {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_INDEX:
        raise SourceError(f"{path.name}: larger than {MAX_INDEX} bytes; an index is a few megabytes")
    data = _parse_json(path, raw.removeprefix(b"\xef\xbb\xbf"), "the index")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise SourceError(f"{path.name}: no 'weight_map' object of tensor names to file names",
                          hint="a safetensors index reads {\"metadata\": {...}, \"weight_map\": {tensor: file}}")
    files = list(dict.fromkeys(weight_map.values()))
    for name in files:
        parts = name.replace("\\", "/").split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
            raise SourceError(f"{path.name}: the weight_map names the file '{shown(name)}', which is not a "
                              f"file in the checkpoint's folder")
    meta = data.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    return files, total if _is_count(total) else None


def has_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` holds a safetensors index or a ``model.safetensors``."""
    folder = Path(folder)
    return (folder / INDEX).is_file() or (folder / SINGLE).is_file()


def checkpoint_summary(folder: str | Path, *, allow_partial: bool = False) -> Checkpoint:
    """The exact element count and stored bytes of the safetensors checkpoint in ``folder``.

    With ``model.safetensors.index.json`` the files are those its ``weight_map`` names (other
    ``*.safetensors`` in the folder, such as a ``consolidated.safetensors``, are not part of
    the checkpoint); without it, ``model.safetensors`` alone.  The headers are authoritative:
    every tensor of every named file counts, and a tensor name found in two files is an error.
    A shard the index names but the folder lacks is a :class:`UsageError` unless
    ``allow_partial``, when it is listed in ``missing``.
    """
    folder = Path(folder)
    index = folder / INDEX
    total_size = None
    if index.is_file():
        files, total_size = _read_index(index)
        origin = INDEX
    elif (folder / SINGLE).is_file():
        files, origin = [SINGLE], SINGLE
    else:
        raise UsageError(f"no safetensors checkpoint in '{shown(str(folder), 255)}' (no {INDEX}, no {SINGLE})",
                         hint="download the checkpoint's index and shards, e.g. "
                              "`hf download org/name --include '*.safetensors*'`")
    present = [f for f in files if (folder / f).is_file()]
    missing = tuple(f for f in files if f not in present)
    if missing and not allow_partial:
        listed = ", ".join(missing[:MAX_SHOWN_FILES]) + (" ..." if len(missing) > MAX_SHOWN_FILES else "")
        raise UsageError(f"{len(missing)} of the {len(files)} files {origin} names are not in "
                         f"'{shown(str(folder), 255)}': {shown(listed, 255)}",
                         hint="download the missing shards (`hf download org/name --include '*.safetensors'`)")
    seen: dict[str, str] = {}
    bytes_by_dtype: dict[str, int] = {}
    elements_by_dtype: dict[str, int] = {}
    count = params = file_bytes = 0
    for name in present:
        path = folder / name
        tensors, _ = read_header(path)
        file_bytes += path.stat().st_size
        for t in tensors:
            if t.name in seen:
                raise SourceError(f"{shown(name, 255)}: tensor '{shown(t.name)}' is also in {shown(seen[t.name], 255)}",
                                  hint="a checkpoint stores each tensor once")
            seen[t.name] = name
            count += 1
            params += t.elements
            bytes_by_dtype[t.dtype] = bytes_by_dtype.get(t.dtype, 0) + t.nbytes
            elements_by_dtype[t.dtype] = elements_by_dtype.get(t.dtype, 0) + t.elements
    return Checkpoint(folder=folder, files=tuple(present), tensors=count, params=params,
                      bytes_by_dtype=dict(sorted(bytes_by_dtype.items())), total_bytes=sum(bytes_by_dtype.values()),
                      elements_by_dtype=dict(sorted(elements_by_dtype.items())), file_bytes=file_bytes,
                      index_total_size=total_size, missing=missing)


__all__ = ["Checkpoint", "Tensor", "cache_dir", "cached_file", "checkpoint_summary", "has_checkpoint",
           "looks_like_hub_id", "offline", "read_header", "resolve_config", "resolve_file"]
