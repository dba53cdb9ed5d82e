"""Hugging Face ids from the local hub cache, and safetensors checkpoints read from their headers.

The fake caches are laid out as huggingface_hub lays them out (file_download.py:
``repo_folder_name`` -> ``models--org--name``; ``refs/<revision>`` holds the commit hash;
``snapshots/<commit>/<file>`` is a relative symlink into ``blobs/``; ``.no_exist/<commit>/<file>``
marks a file known to be absent).  Where huggingface_hub is installed, its own
``try_to_load_from_cache`` is asked to find the same files, so the layout is checked against it.

The checkpoints are written with the ``safetensors`` package where it is installed, and by hand
(8-byte little-endian header length, the JSON header padded with spaces, then the data; the
format of github.com/huggingface/safetensors README.md) otherwise and for the malformed files.
Every expected count and byte figure is computed here from the tensors written, never read back
from memform.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from engine.library import hub
from engine.errors import EngineError, SourceError, UsageError

CONFIGS = Path(__file__).parent / "configs"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"
HUB_VARS = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE")

try:
    import safetensors.numpy as st_numpy
    from safetensors import safe_open
except ImportError:  # the format is written by hand below
    st_numpy = safe_open = None

NP_DTYPE = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int8): "I8",
            np.dtype(np.uint8): "U8", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64",
            np.dtype(np.bool_): "BOOL"}


# ------------------------------------------------------------------------------ helpers
@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No hub variable leaks in from the machine; HOME points into tmp_path."""
    for var in HUB_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def no_hub_package(monkeypatch):
    """Make ``import huggingface_hub`` fail, as without memform[hub]."""
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    monkeypatch.setitem(sys.modules, "huggingface_hub.errors", None)


def put(cache: Path, repo_id: str, files: dict[str, bytes], commit: str = COMMIT, refs=("main",)) -> Path:
    """Store ``files`` in a hub cache as huggingface_hub does; the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # the hub writes the bare hash, no newline
    return snap


QWEN3 = json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}).encode()


def st_file(tensors, metadata=None) -> bytes:
    """A safetensors file by hand: ``tensors`` is a list of (name, dtype, shape, data)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def save(path: Path, arrays: dict[str, np.ndarray], metadata=None) -> None:
    """Write numpy arrays as safetensors: with the safetensors package if present, else by hand."""
    if st_numpy is not None:
        st_numpy.save_file(arrays, str(path), metadata=metadata)
    else:
        path.write_bytes(st_file([(k, NP_DTYPE[a.dtype], a.shape, np.ascontiguousarray(a).tobytes())
                                  for k, a in arrays.items()], metadata))


def expected(*groups: dict[str, np.ndarray]):
    """(tensors, params, bytes per safetensors dtype) of numpy arrays, computed with numpy."""
    by, n, count = {}, 0, 0
    for arrays in groups:
        for a in arrays.values():
            by[NP_DTYPE[a.dtype]] = by.get(NP_DTYPE[a.dtype], 0) + a.nbytes
            n += a.size
            count += 1
    return count, n, by


rng = np.random.default_rng(0)


def layer(i: int, h=64, ffn=160) -> dict[str, np.ndarray]:
    p = f"model.layers.{i}."
    return {p + "self_attn.q_proj.weight": rng.standard_normal((h, h)).astype(np.float16),
            p + "mlp.down_proj.weight": rng.standard_normal((h, ffn)).astype(np.float16),
            p + "input_layernorm.weight": np.ones(h, np.float32)}


# ------------------------------------------------------------------------------ hub ids
@pytest.mark.parametrize("text", ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "org_1/name.v2",
                                  "a/b", "deepseek-ai/DeepSeek-V3"])
def test_hub_ids(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub.looks_like_hub_id(text)


@pytest.mark.parametrize("text", ["llama2-70b", "Qwen3-8B", "org/name/extra", "/abs/path", "./org/name",
                                  "org/", "/name", "org/-name", "org/name-", "org/.name", "a--b/c", "a/b..c",
                                  "org/name.git", "configs/llama.json", "org/na me", "org/näme", "org\\name",
                                  "o" * 97 + "/x", "", "org/name\0"])
def test_not_hub_ids(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not hub.looks_like_hub_id(text)


def test_an_existing_path_is_not_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub.looks_like_hub_id("org/name")
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").write_text("{}")
    assert not hub.looks_like_hub_id("org/name")


# ------------------------------------------------------------------------------ the cache
def test_resolve_config_from_hf_hub_cache_offline(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    snap = put(cache, "Qwen/Qwen3-8B", {"config.json": QWEN3})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    no_hub_package(monkeypatch)  # found without huggingface_hub and without network
    path = hub.resolve_config("Qwen/Qwen3-8B")
    assert path == snap / "config.json"
    assert path.is_symlink() and path.resolve().parent == (cache / "models--Qwen--Qwen3-8B" / "blobs").resolve()
    assert path.read_bytes() == QWEN3
    assert hub.resolve_config("Qwen/Qwen3-8B", allow_download=False) == path


def test_resolve_config_under_hf_home(tmp_path, monkeypatch):
    snap = put(tmp_path / "hf" / "hub", "Qwen/Qwen3-8B", {"config.json": QWEN3})
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    no_hub_package(monkeypatch)
    assert hub.cache_dir() == tmp_path / "hf" / "hub"
    assert hub.resolve_config("Qwen/Qwen3-8B", allow_download=False) == snap / "config.json"


def test_hf_hub_cache_wins_over_hf_home(tmp_path, monkeypatch):
    put(tmp_path / "hf" / "hub", "Qwen/Qwen3-8B", {"config.json": b"{}"}, commit=OTHER)
    snap = put(tmp_path / "cache", "Qwen/Qwen3-8B", {"config.json": QWEN3})
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub.resolve_config("Qwen/Qwen3-8B", allow_download=False) == snap / "config.json"


def test_default_cache_under_home_and_xdg(tmp_path, monkeypatch):
    snap = put(tmp_path / "home" / ".cache" / "huggingface" / "hub", "Qwen/Qwen3-8B", {"config.json": QWEN3})
    assert hub.cache_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    assert hub.resolve_config("Qwen/Qwen3-8B", allow_download=False) == snap / "config.json"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", "~/elsewhere")  # expanded as huggingface_hub expands it
    assert hub.cache_dir() == tmp_path / "home" / "elsewhere"


def test_revisions_branches_tags_commits(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    main = put(cache, "org/model", {"config.json": b'{"v": "main"}'})
    tagged = put(cache, "org/model", {"config.json": b'{"v": "tag"}'}, commit=OTHER, refs=("v1.0", "refs/pr/3"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    get = lambda rev: hub.resolve_config("org/model", rev, allow_download=False)  # noqa: E731
    assert get("main") == main / "config.json"
    assert get("v1.0") == get("refs/pr/3") == get(OTHER) == tagged / "config.json"
    assert get(COMMIT) == main / "config.json"
    with pytest.raises(UsageError, match="at revision 'v2.0'"):
        get("v2.0")


def test_layout_agrees_with_huggingface_hub(tmp_path, monkeypatch):
    hf = pytest.importorskip("huggingface_hub")
    cache = tmp_path / "cache"
    snap = put(cache, "Qwen/Qwen3-8B", {"config.json": QWEN3, "model.safetensors.index.json": b"{}"})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for name in ("config.json", "model.safetensors.index.json"):
        theirs = hf.try_to_load_from_cache("Qwen/Qwen3-8B", name, cache_dir=str(cache))
        assert Path(theirs) == hub.cached_file("Qwen/Qwen3-8B", name) == snap / name
    assert hf.try_to_load_from_cache("Qwen/Qwen3-8B", "tokenizer.json", cache_dir=str(cache)) is None
    assert hub.cached_file("Qwen/Qwen3-8B", "tokenizer.json") is None


def test_cached_config_reads_as_a_model(tmp_path, monkeypatch, lib):
    from engine.library.hfconfig import read_config
    data = (CONFIGS / "qwen2.5-7b.json").read_bytes()
    put(tmp_path / "cache", "Qwen/Qwen2.5-7B", {"config.json": data})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    path = hub.resolve_config("Qwen/Qwen2.5-7B", allow_download=False)
    assert read_config(path, lib).values == read_config(CONFIGS / "qwen2.5-7b.json", lib).values


# ------------------------------------------------------------------------------ not cached
def test_not_cached_without_download_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as info:
        hub.resolve_config("Qwen/Qwen3-8B", allow_download=False)
    err = info.value
    assert "Qwen/Qwen3-8B" in err.message and "not in the Hugging Face cache" in err.message
    assert str(tmp_path / "empty") in err.message
    assert "hf download Qwen/Qwen3-8B config.json" in err.hint and "pip install 'memform[hub]'" in err.hint
    assert "huggingface-cli download" in err.hint


def test_not_cached_revision_in_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as info:
        hub.resolve_config("Qwen/Qwen3-8B", "v1.0", allow_download=False)
    assert "hf download Qwen/Qwen3-8B config.json --revision v1.0" in info.value.hint


def test_not_cached_and_no_huggingface_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    no_hub_package(monkeypatch)
    with pytest.raises(UsageError) as info:
        hub.resolve_config("Qwen/Qwen3-8B")
    assert "huggingface_hub" in info.value.message and "not installed" in info.value.message
    assert "memform[hub]" in info.value.hint and "hf download Qwen/Qwen3-8B config.json" in info.value.hint


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_not_cached_and_offline_calls_nothing(tmp_path, monkeypatch, var):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv(var, "1")
    fake_hub(monkeypatch, RuntimeError("must not be called"))
    with pytest.raises(UsageError) as info:
        hub.resolve_config("Qwen/Qwen3-8B")
    assert "HF_HUB_OFFLINE" in info.value.message and "hf download" in info.value.hint


def test_no_exist_marker(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    put(cache, "org/gguf-only", {"README.md": b"hi"})
    marker = cache / "models--org--gguf-only" / ".no_exist" / COMMIT / "config.json"
    marker.parent.mkdir(parents=True)
    marker.write_bytes(b"")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    with pytest.raises(UsageError, match="has no config.json"):
        hub.resolve_config("org/gguf-only")


def test_dangling_symlink_is_not_cached(tmp_path, monkeypatch):
    snap = put(tmp_path / "cache", "Qwen/Qwen3-8B", {"config.json": QWEN3})
    (snap / "config.json").resolve().unlink()  # blob gone (cache cleaned half-way)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UsageError, match="not in the Hugging Face cache"):
        hub.resolve_config("Qwen/Qwen3-8B", allow_download=False)


@pytest.mark.parametrize("repo_id", ["Qwen3-8B/../x", "a--b/c", "org/na me", "../../etc"])
def test_bad_ids_are_usage_errors(repo_id, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UsageError, match="not a Hugging Face model id"):
        hub.resolve_config(repo_id, allow_download=False)


@pytest.mark.parametrize("revision", ["../../x", "/etc", "a//b", "", "refs/../main"])
def test_bad_revisions_are_usage_errors(revision, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UsageError, match="not a revision"):
        hub.resolve_config("org/name", revision, allow_download=False)


# ------------------------------------------------------------------------------ downloads
class _HTTP(OSError):
    def __init__(self, msg="", status=500):
        super().__init__(msg)
        self.response = types.SimpleNamespace(status_code=status)


def fake_errors():
    """Stand-ins with huggingface_hub.errors' class names and hierarchy."""
    m = types.ModuleType("huggingface_hub.errors")
    m.HfHubHTTPError = _HTTP
    m.RepositoryNotFoundError = type("RepositoryNotFoundError", (_HTTP,), {})
    m.GatedRepoError = type("GatedRepoError", (m.RepositoryNotFoundError,), {})
    m.RevisionNotFoundError = type("RevisionNotFoundError", (_HTTP,), {})
    m.DisabledRepoError = type("DisabledRepoError", (_HTTP,), {})
    m.EntryNotFoundError = type("EntryNotFoundError", (Exception,), {})
    m.LocalEntryNotFoundError = type("LocalEntryNotFoundError", (FileNotFoundError, m.EntryNotFoundError), {})
    m.OfflineModeIsEnabled = type("OfflineModeIsEnabled", (ConnectionError,), {})
    return m


def fake_hub(monkeypatch, outcome, calls=None):
    """A huggingface_hub whose hf_hub_download raises ``outcome`` or returns it."""
    m = types.ModuleType("huggingface_hub")
    m.errors = fake_errors()

    def hf_hub_download(repo_id, filename, **kw):
        if calls is not None:
            calls.append((repo_id, filename, kw))
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome(repo_id, filename, **kw)

    m.hf_hub_download = hf_hub_download
    monkeypatch.setitem(sys.modules, "huggingface_hub", m)
    monkeypatch.setitem(sys.modules, "huggingface_hub.errors", m.errors)
    return m.errors


def test_download_into_the_same_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    calls = []

    def download(repo_id, filename, revision, cache_dir):
        return str(put(Path(cache_dir), repo_id, {filename: QWEN3}) / filename)

    fake_hub(monkeypatch, download, calls)
    path = hub.resolve_config("Qwen/Qwen3-8B")
    assert path.read_bytes() == QWEN3
    assert calls == [("Qwen/Qwen3-8B", "config.json", {"revision": "main", "cache_dir": str(cache)})]
    no_hub_package(monkeypatch)  # the second time it is in the cache
    assert hub.resolve_config("Qwen/Qwen3-8B") == path


CASES = {  # error class -> words the message and the hint must hold
    "GatedRepoError": ("gated", "https://huggingface.co/meta-llama/Llama-3.1-8B"),
    "RepositoryNotFoundError": ("no model 'meta-llama/Llama-3.1-8B'", "hf auth login"),
    "RevisionNotFoundError": ("no revision 'main'", "https://huggingface.co/meta-llama/Llama-3.1-8B"),
    "LocalEntryNotFoundError": ("cannot be reached", "hf download meta-llama/Llama-3.1-8B config.json"),
    "OfflineModeIsEnabled": ("cannot be reached", "hf download meta-llama/Llama-3.1-8B config.json"),
    "EntryNotFoundError": ("has no config.json", "another format"),
    "HfHubHTTPError": ("HTTP 500", "hf download"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_download_errors(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    errors = fake_hub(monkeypatch, None)
    exc = getattr(errors, name)("boom")
    sys.modules["huggingface_hub"].hf_hub_download = lambda *a, **k: (_ for _ in ()).throw(exc)
    with pytest.raises(UsageError) as info:
        hub.resolve_config("meta-llama/Llama-3.1-8B")
    in_message, in_hint = CASES[name]
    assert in_message in info.value.message and in_hint in (info.value.hint or "")


@pytest.mark.parametrize("exc", [ConnectionError("no route"), TimeoutError("slow")])
def test_connection_errors_are_offline(exc, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    fake_hub(monkeypatch, exc)
    with pytest.raises(UsageError, match="cannot be reached"):
        hub.resolve_config("Qwen/Qwen3-8B")


def test_401_asks_to_log_in(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    errors = fake_hub(monkeypatch, None)
    sys.modules["huggingface_hub"].hf_hub_download = lambda *a, **k: (_ for _ in ()).throw(
        errors.HfHubHTTPError("401", status=401))
    with pytest.raises(UsageError, match=r"refused access .*\(401\)") as info:
        hub.resolve_config("Qwen/Qwen3-8B")
    assert "hf auth login" in info.value.hint


@pytest.mark.parametrize("name", ["GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError",
                                  "LocalEntryNotFoundError", "OfflineModeIsEnabled"])
def test_real_huggingface_hub_error_classes(name, tmp_path, monkeypatch):
    """The real classes (made without their HTTP response) are told apart by the same names."""
    hf = pytest.importorskip("huggingface_hub")
    from huggingface_hub import errors
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    cls = getattr(errors, name)
    exc = cls.__new__(cls)
    Exception.__init__(exc, "boom")

    def raise_it(*a, **k):
        raise exc

    monkeypatch.setattr(hf, "hf_hub_download", raise_it)
    with pytest.raises(UsageError) as info:
        hub.resolve_config("meta-llama/Llama-3.1-8B")
    assert CASES[name][0] in info.value.message


def test_real_huggingface_hub_offline_mode(tmp_path, monkeypatch):
    """huggingface_hub's own offline mode (read when it was imported) raises; no network is used."""
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(UsageError, match="cannot be reached") as info:
        hub.resolve_config("Qwen/Qwen3-8B")
    assert "hf download Qwen/Qwen3-8B config.json" in info.value.hint


# ------------------------------------------------------------------------------ checkpoints
def test_single_file_checkpoint(tmp_path):
    arrays = {**layer(0), "model.embed_tokens.weight": rng.standard_normal((1000, 64)).astype(np.float16),
              "lm_head.bias": np.zeros(1000, np.float32), "model.mask": np.ones(7, np.bool_)}
    save(tmp_path / "model.safetensors", arrays, metadata={"format": "pt"})
    ck = hub.checkpoint_summary(tmp_path)
    count, params, by = expected(arrays)
    assert (ck.tensors, ck.params, ck.bytes_by_dtype) == (count, params, by)
    assert params == 64 * 64 + 64 * 160 + 64 + 1000 * 64 + 1000 + 7
    assert by == {"F16": 2 * (64 * 64 + 64 * 160 + 1000 * 64), "F32": 4 * (64 + 1000), "BOOL": 7}
    assert ck.total_bytes == sum(by.values())
    assert ck.files == ("model.safetensors",) and ck.complete and ck.index_total_size is None
    assert ck.file_bytes == (tmp_path / "model.safetensors").stat().st_size


def test_sharded_checkpoint_with_index(tmp_path):
    shards = {"model-00001-of-00002.safetensors": {**layer(0), "model.embed_tokens.weight":
                                                   rng.standard_normal((500, 64)).astype(np.float16)},
              "model-00002-of-00002.safetensors": {**layer(1), "model.norm.weight": np.ones(64, np.float32)}}
    for name, arrays in shards.items():
        save(tmp_path / name, arrays)
    count, params, by = expected(*shards.values())
    weight_map = {t: name for name, arrays in shards.items() for t in arrays}
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(by.values())}, "weight_map": weight_map}))
    # not part of the checkpoint: Mistral repositories ship a consolidated copy beside the shards
    save(tmp_path / "consolidated.safetensors", {"x": np.zeros(10**5, np.float32)})
    ck = hub.checkpoint_summary(tmp_path)
    assert (ck.tensors, ck.params, ck.bytes_by_dtype, ck.total_bytes) == (count, params, by, sum(by.values()))
    assert ck.files == tuple(shards) and ck.index_total_size == ck.total_bytes
    assert hub.has_checkpoint(tmp_path)


def quantised_tensors():
    """A GPTQ-style 4-bit layer (int32-packed), an int8 layer with fp16 scales, an FP8 E4M3 layer
    with fp32 block scales, and an MXFP4 layer (F4 with E8M0 scales): (name, dtype, shape, bytes)."""
    h, ffn, group = 256, 512, 128
    return [
        ("q.qweight", "I32", (h // 8, h), h // 8 * h * 4),     # eight 4-bit weights per int32
        ("q.qzeros", "I32", (h // group, h // 8), h // group * h // 8 * 4),
        ("q.scales", "F16", (h // group, h), h // group * h * 2),
        ("q.g_idx", "I32", (h,), h * 4),
        ("down.weight", "I8", (h, ffn), h * ffn),
        ("down.weight_scale", "F16", (h, 1), h * 2),
        ("up.weight", "F8_E4M3", (ffn, h), ffn * h),
        ("up.weight_scale_inv", "F32", (ffn // 128, h // 128), ffn // 128 * h // 128 * 4),
        ("gate.blocks", "F4", (ffn, h), ffn * h // 2),          # two 4-bit values per byte
        ("gate.scales", "F8_E8M0", (ffn, h // 32), ffn * h // 32),
    ]


def test_quantised_checkpoint_bytes_as_stored(tmp_path):
    tensors = quantised_tensors()
    blobs = [(n, d, s, rng.integers(0, 256, size, dtype=np.uint8).tobytes()) for n, d, s, size in tensors]
    (tmp_path / "model.safetensors").write_bytes(st_file(blobs, {"format": "pt"}))
    if safe_open is not None:  # the reference implementation accepts the file
        with safe_open(str(tmp_path / "model.safetensors"), "np") as f:
            assert sorted(f.keys()) == sorted(n for n, *_ in tensors)
    ck = hub.checkpoint_summary(tmp_path)
    by, elements = {}, {}
    for name, dtype, shape, size in tensors:
        by[dtype] = by.get(dtype, 0) + size
        elements[dtype] = elements.get(dtype, 0) + int(np.prod(shape))
    assert ck.bytes_by_dtype == by and ck.elements_by_dtype == elements
    assert ck.params == sum(int(np.prod(s)) for _, _, s, _ in tensors) == sum(elements.values())
    assert ck.total_bytes == sum(size for *_, size in tensors)
    # written out: 8192 + 64 + 512 + 256 int32 words; 131072 int8; 512 + 256 fp16 ...
    assert by == {"I32": 4 * (8192 + 64 + 256), "F16": 2 * (512 + 256), "I8": 131072, "F8_E4M3": 131072,
                  "F32": 4 * 8, "F4": 65536, "F8_E8M0": 4096}


def test_int8_and_fp8_written_by_the_libraries(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    tensors = {"w8.weight": torch.randint(-128, 127, (96, 64), dtype=torch.int8),
               "w8.scale": torch.rand(96, 1).to(torch.float16),
               "fp8.weight": torch.randn(128, 64).to(torch.float8_e4m3fn),
               "fp8.weight_scale_inv": torch.rand(1, 1, dtype=torch.float32),
               "norm.weight": torch.ones(64, dtype=torch.bfloat16)}
    st_torch.save_file(tensors, str(tmp_path / "model.safetensors"))
    ck = hub.checkpoint_summary(tmp_path)
    name = {torch.int8: "I8", torch.float16: "F16", torch.float8_e4m3fn: "F8_E4M3", torch.float32: "F32",
            torch.bfloat16: "BF16"}
    by = {}
    for t in tensors.values():
        by[name[t.dtype]] = by.get(name[t.dtype], 0) + t.numel() * t.element_size()
    assert ck.bytes_by_dtype == by and ck.params == sum(t.numel() for t in tensors.values())
    assert by == {"I8": 6144, "F16": 192, "F8_E4M3": 8192, "F32": 4, "BF16": 128}


def test_parser_agrees_with_safetensors(tmp_path):
    if safe_open is None:
        pytest.skip("safetensors is not installed")
    arrays = {**layer(3), "e": np.zeros((0, 4), np.float32), "s": np.array(3, np.int64)}  # empty, 0-rank
    save(tmp_path / "model.safetensors", arrays)
    tensors, meta = hub.read_header(tmp_path / "model.safetensors")
    with safe_open(str(tmp_path / "model.safetensors"), "np") as f:
        theirs = {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()}
    assert {t.name: (t.dtype, list(t.shape)) for t in tensors} == theirs


def test_only_the_header_is_read(tmp_path, monkeypatch):
    arrays = {"big": np.zeros((512, 1024), np.float32)}
    save(tmp_path / "model.safetensors", arrays)
    read = []
    real_open = open

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            assert n >= 0, "read everything"
            data = self.f.read(n)
            read.append(len(data))
            return data

        def fileno(self):
            return self.f.fileno()

    monkeypatch.setattr(hub, "open", lambda p, mode="r", *a, **k: Spy(real_open(p, mode, *a, **k)), raising=False)
    ck = hub.checkpoint_summary(tmp_path)
    assert ck.total_bytes == 512 * 1024 * 4
    assert sum(read) < 1024 and sum(read) == 8 + struct.unpack("<Q", (tmp_path / "model.safetensors")
                                                               .read_bytes()[:8])[0]


# ------------------------------------------------------------------------------ the hub cache, end to end
def test_checkpoint_beside_the_cached_config(tmp_path, monkeypatch):
    shard = {**layer(0)}
    one = tmp_path / "one.safetensors"
    save(one, shard)
    index = json.dumps({"metadata": {"total_size": 1}, "weight_map": {t: "model-00001-of-00001.safetensors"
                                                                      for t in shard}}).encode()
    put(tmp_path / "cache", "Qwen/Qwen3-8B", {"config.json": QWEN3, "model.safetensors.index.json": index,
                                              "model-00001-of-00001.safetensors": one.read_bytes()})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    config = hub.resolve_config("Qwen/Qwen3-8B", allow_download=False)
    ck = hub.checkpoint_summary(config.parent)  # through the snapshot's symlinks
    count, params, by = expected(shard)
    assert (ck.tensors, ck.params, ck.bytes_by_dtype) == (count, params, by)
    assert ck.index_total_size == 1  # as written: the caller compares it with total_bytes


def test_missing_shards(tmp_path):
    save(tmp_path / "model-00001-of-00002.safetensors", layer(0))
    weight_map = {**{t: "model-00001-of-00002.safetensors" for t in layer(0)},
                  **{t: "model-00002-of-00002.safetensors" for t in layer(1)}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(UsageError, match="1 of the 2 files .* model-00002-of-00002.safetensors"):
        hub.checkpoint_summary(tmp_path)
    ck = hub.checkpoint_summary(tmp_path, allow_partial=True)
    assert not ck.complete and ck.missing == ("model-00002-of-00002.safetensors",)
    assert ck.params == expected(layer(0))[1]


def test_no_checkpoint(tmp_path):
    save(tmp_path / "consolidated.safetensors", {"x": np.zeros(3, np.float32)})
    assert not hub.has_checkpoint(tmp_path)
    with pytest.raises(UsageError, match="no safetensors checkpoint"):
        hub.checkpoint_summary(tmp_path)


def test_tensor_in_two_shards(tmp_path):
    save(tmp_path / "a.safetensors", {"x": np.zeros(3, np.float32)})
    save(tmp_path / "b.safetensors", {"x": np.zeros(3, np.float32)})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}))
    with pytest.raises(SourceError, match="b.safetensors: tensor 'x' is also in a.safetensors"):
        hub.checkpoint_summary(tmp_path)


# ------------------------------------------------------------------------------ malformed files
def raw(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def js(obj) -> bytes:
    return json.dumps(obj).encode()


T = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
MALFORMED = {
    "empty file": (b"", "too short"),
    "short length": (b"\x10\x00\x00", "too short"),
    "length past the end": (raw(js({"a": T}), bytes(8), length=10**6), "runs past the end"),
    "header over 100 MB": (raw(b"{}", length=100_000_001), "over safetensors' limit"),
    "length near 2**64": (b"\xff" * 8 + b"{}", "over safetensors' limit"),
    "bad json": (raw(b'{"a": {"dtype": "F32",'), "not valid JSON"),
    "not utf-8": (raw(b'{"\xff": 1}'), "not UTF-8"),
    "not an object": (raw(b"[1, 2]"), "does not start with '{'"),
    "leading space": (raw(b' {"a": 1}'), "does not start with '{'"),
    "nan": (raw(b'{"a": NaN}'), "not valid JSON"),
    "deep nesting": (raw(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), "not valid JSON"),
    "duplicate key": (raw(b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {}}', bytes(8)),
                      "has the key 'a' twice"),
    "unknown dtype": (raw(js({"a": {**T, "dtype": "F12"}}), bytes(8)), "unknown dtype"),
    "float shape": (raw(js({"a": {**T, "shape": [2.0]}}), bytes(8)), "shape"),
    "negative shape": (raw(js({"a": {**T, "shape": [-2]}}), bytes(8)), "shape"),
    "three offsets": (raw(js({"a": {**T, "data_offsets": [0, 4, 8]}}), bytes(8)), "data_offsets"),
    "offsets too short for the shape": (raw(js({"a": {**T, "data_offsets": [0, 4]}}), bytes(4)),
                                        "is 8 bytes but its data_offsets span 4"),
    "hole": (raw(js({"a": {**T, "data_offsets": [4, 12]}}), bytes(12)), "should continue at 0"),
    "overlap": (raw(js({"a": T, "b": {**T, "data_offsets": [4, 12]}}), bytes(12)), "should continue at 8"),
    "data past the end": (raw(js({"a": T}), bytes(4)), "the tensors end at byte"),
    "trailing bytes": (raw(js({"a": T}), bytes(9)), "the tensors end at byte"),
    "half a byte": (raw(js({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}), bytes(2)),
                    "do not fill whole bytes"),
    "metadata not strings": (raw(js({"__metadata__": {"n": 1}, "a": T}), bytes(8)), "__metadata__"),
    "tensor info not an object": (raw(js({"a": [1]})), "not described by an object"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_headers_are_source_errors(case, tmp_path):
    data, words = MALFORMED[case]
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    with pytest.raises(SourceError) as info:
        hub.checkpoint_summary(tmp_path)
    text = str(info.value)
    assert text.startswith("model.safetensors: ") and words in text, text
    assert "Traceback" not in text and "hint: " in text


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_the_reference_refuses_them_too(case, tmp_path):
    if safe_open is None:
        pytest.skip("safetensors is not installed")
    path = tmp_path / "model.safetensors"
    path.write_bytes(MALFORMED[case][0])
    with pytest.raises(Exception):  # noqa: B017 -- safetensors raises SafetensorError or OSError
        with safe_open(str(path), "np") as f:
            list(f.keys())


def test_well_formed_hand_written_file_passes(tmp_path):
    """The hand-written ``raw`` files above differ from a valid one only where the case says."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(raw(js({"__metadata__": {"format": "pt"}, "a": T, "b": {**T, "data_offsets": [8, 16]}}),
                         bytes(16)))
    ck = hub.checkpoint_summary(tmp_path)
    assert (ck.tensors, ck.params, ck.bytes_by_dtype) == (2, 4, {"F32": 16})
    if safe_open is not None:
        with safe_open(str(path), "np") as f:
            assert sorted(f.keys()) == ["a", "b"]


@pytest.mark.parametrize("index, words", [
    (b"{not json", "not valid JSON"),
    (js({"metadata": {}}), "no 'weight_map'"),
    (js({"weight_map": {"a": 3}}), "no 'weight_map'"),
    (js({"weight_map": {"a": "../elsewhere/model.safetensors"}}), "not a file in the checkpoint's folder"),
    (js({"weight_map": {"a": "/etc/passwd"}}), "not a file in the checkpoint's folder"),
])
def test_malformed_index(index, words, tmp_path):
    (tmp_path / "model.safetensors.index.json").write_bytes(index)
    with pytest.raises(SourceError, match=words) as info:
        hub.checkpoint_summary(tmp_path)
    assert "model.safetensors.index.json" in str(info.value)


def test_malformed_shard_named_in_the_error(tmp_path):
    save(tmp_path / "model-00001-of-00002.safetensors", layer(0))
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(raw(js({"a": T}), length=999))
    weight_map = {**{t: "model-00001-of-00002.safetensors" for t in layer(0)},
                  "a": "model-00002-of-00002.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(SourceError, match="^model-00002-of-00002.safetensors: header length 999 runs past"):
        hub.checkpoint_summary(tmp_path)


def test_errors_are_engine_errors():
    assert issubclass(SourceError, EngineError) and issubclass(UsageError, EngineError)
