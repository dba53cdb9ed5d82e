"""The cache: plain data in a private directory, keyed by the sources, never trusted blindly."""
import hashlib
import io
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import engine
from engine import store as cache
from engine.compile import compiler
from engine.lang import constants
from engine.answers import quick as fast
from engine.compile import trees
from engine.cli import build_parser, main
from engine.compile.model import Scenario
from engine.lang import grammar
from engine.paths import DOC_FILES, data_path, grammar_path

ROOT = Path(__file__).resolve().parent.parent
ESTIMATE = ["estimate", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8"]
SHOW = ["show", "total", "llama2-7b"]
#: Llama-2-7B's weights under ZeRO-3 over 8 GPUs: 6,738,415,616 parameters x 2 bytes / 8
WEIGHTS = f"{6_738_415_616 * 2 // 8:,}"
KINDS = ("compiled", "formulas", "grammar", "library")


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    from engine.lang import parser
    parser.grammar.cache_clear()  # a parser built earlier in this process would not be written here
    monkeypatch.setattr(constants, "_PARSER", None)
    yield tmp_path / "cache"
    parser.grammar.cache_clear()


def _files(folder: Path, kind: str) -> list[Path]:
    return sorted(folder.glob(f"{kind}-*.json"))


def test_cache_is_private_plain_data_and_reused(cache_home):
    first = engine.load()
    folder = cache_home / "memform"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (path,) = _files(folder, "compiled")
    (tables,) = _files(folder, "grammar")
    (library,) = _files(folder, "library")
    for p in (path, tables, library, folder / "secret"):
        assert stat.S_IMODE(p.lstat().st_mode) == 0o600
    assert not list(folder.glob("*.pickle"))
    for p in (path, library):
        header, body = p.read_bytes().split(b"\n", 1)
        assert header.startswith(cache.MAGIC)
        json.loads(body)  # plain JSON
    kept = trees._read("compiled", cache.source_key())["rules"]
    assert kept.keys() == first.rules.keys()
    # each rule's tree is kept as text and decoded when asked for: the same trees as compiled
    assert isinstance(kept, trees.Kept) and not kept._trees
    assert dict(kept.items()) == compiler.compile_library(first)["rules"]
    before = path.stat().st_mtime_ns
    second = engine.load()
    assert path.stat().st_mtime_ns == before  # found as it should be: not rewritten
    assert Scenario.create(second, "llama2-7b").evaluate("n_params") == 6_738_415_616


def test_corrupt_or_foreign_cache_is_rebuilt(cache_home):
    engine.load()
    (path,) = _files(cache_home / "memform", "compiled")
    key = cache.source_key()
    good = trees._read("compiled", key)
    for bad in (b"not a cache file", pickle.dumps(("another key", "not a library")),
                path.read_bytes()[:-100]):
        path.write_bytes(bad)
        assert trees._read("compiled", key) is None
        assert Scenario.create(engine.load(), "llama2-70b").evaluate("n_params") == 68_976_648_192
        assert trees._read("compiled", key) == good  # rewritten


def test_key_changes_with_the_rule_files(tmp_path):
    folder = tmp_path / "formulas"
    shutil.copytree(data_path("formulas"), folder)
    before = cache.fingerprint(folder, grammar_path())
    mem = folder / "overhead.mem"
    mem.write_text(mem.read_text().replace("= 0.1", "= 0.2"))
    assert cache.fingerprint(folder, grammar_path()) != before


def test_files_of_old_sources_are_pruned(cache_home):
    folder = cache_home / "memform"
    folder.mkdir(parents=True, mode=0o700)
    for i in range(6):
        (folder / f"compiled-old{i}.json").write_bytes(b"from an older checkout")
    engine.load()
    left = [p.name for p in _files(folder, "compiled")]
    assert f"compiled-{cache.source_key()}.json" in left
    assert len(left) == 1 + cache.KEEP_OTHERS


def test_corrupt_grammar_tables_are_rebuilt(cache_home):
    from engine.lang.grammar import lark_parser
    lark_parser()
    (tables,) = _files(cache_home / "memform", "grammar")
    assert tables.stat().st_size > 0  # the parse tables are kept in the user cache directory
    tables.write_bytes(b"not lark's tables")
    assert lark_parser().parse("80 GB", start="expr").data == "quantity"
    assert tables.read_bytes().startswith(cache.MAGIC)  # rewritten


def test_cache_off_writes_nothing(tmp_path, monkeypatch):
    from engine.lang.grammar import lark_parser
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("MEMFORM_NO_CACHE", "1")
    lark_parser()
    engine.load()
    assert main(ESTIMATE, out=io.StringIO()) == 0
    assert not (tmp_path / "memform").exists()


# ---------------------------------------------------------------- the encoding
def test_encoding_round_trips_the_compiled_form_and_the_grammar_tables(lib):
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    from engine.paths import LARK_OPTIONS
    import lark
    compiled = compiler.compile_library(lib)
    tables = lark.Lark(grammar_path().read_text(encoding="utf-8"), **LARK_OPTIONS).memo_serialize(
        [TerminalDef, Rule])
    for data in (compiled, tables):
        back = cache.decode(json.dumps(cache.encode(data)).encode())
        assert back == data and repr(back) == repr(data)  # tuples stay tuples, Fractions Fractions


@pytest.mark.parametrize("text", [
    b'1.5', b'{"F":[1.0,2]}', b'NaN', b'{"F":[1,0]}', b'{"F":[1,-2]}', b'{"F":[true,2]}',
    b'{"F":[1,2,3]}', b'{"x":[1]}', b'{"t":[1],"d":[]}', b'{"t":1}', b'{"d":[[1,2],[1,3]]}',
    b'{"d":[[[1],2]]}', b'{"d":[{"t":[1,2]}]}', b'{"__type__":"Rule"}', b'{}', b'[1,',
])
def test_decoding_refuses_what_encoding_never_writes(text):
    with pytest.raises((ValueError, TypeError)):
        cache.decode(text)


@pytest.mark.parametrize("value", [1.5, {1, 2}, b"bytes", Path("x"), pickle])
def test_only_plain_data_is_stored(value):
    with pytest.raises(TypeError):
        cache.encode({"x": [value]})


# ---------------------------------------------------------------- altered files
def _edit(path: Path, change, fixup: bool) -> None:
    """Change the data in a cache file; its MAC line is kept as it was, or replaced by the
    plain SHA-256 of the new bytes (what someone editing it by hand would put there)."""
    header, body = path.read_bytes().split(b"\n", 1)
    data = cache.decode(body)
    change(data)
    body = json.dumps(cache.encode(data)).encode()
    if fixup:
        header = cache.MAGIC + hashlib.sha256(body).hexdigest().encode()
    path.write_bytes(header + b"\n" + body)


def _one_byte_weights(data):
    tree = cache.decode(data["rules"]["weights"])  # each rule's tree is kept as its own text
    data["rules"]["weights"] = json.dumps(cache.encode(tree[:2] + (("n", Fraction(1)),)))


def _one_byte_formulas(data):
    for column in data["formulas"].values():
        column["weights"] = "1"


@pytest.mark.parametrize("fixup", [False, True], ids=["as edited", "sha256 fixed up"])
@pytest.mark.parametrize("kind, change", [("compiled", _one_byte_weights),
                                          ("formulas", _one_byte_formulas)], ids=["compiled", "formulas"])
def test_edited_files_change_no_answer(kind, change, fixup, cache_home, monkeypatch):
    monkeypatch.setenv("MEMFORM_NO_CACHE", "1")
    reference = io.StringIO()
    assert main(ESTIMATE, out=reference) == 0
    assert WEIGHTS in reference.getvalue()
    monkeypatch.delenv("MEMFORM_NO_CACHE")
    assert main(ESTIMATE, out=io.StringIO()) == 0  # fills the cache
    args = build_parser().parse_args(ESTIMATE)
    assert fast.report(args) is not None  # the fast path answers from it
    (path,) = _files(cache_home / "memform", kind)
    _edit(path, change, fixup)
    quick = fast.report(args)  # the altered file is not believed: no answer, or the column
    assert quick is None if kind == "compiled" else quick.formulas["weights"] != "1"  # written out anew
    out = io.StringIO()
    assert main(ESTIMATE, out=out) == 0
    assert out.getvalue() == reference.getvalue()
    assert fast.report(args) is not None  # rebuilt by the full path: the fast path answers again
    out = io.StringIO()
    assert main(ESTIMATE, out=out) == 0
    assert out.getvalue() == reference.getvalue()


def _one_byte_answer(data):
    data["out"] = "total = 1\n"


def _one_byte_docs(data):
    data["text"] = "# 1 byte\n"


SOLVE = ["solve", "max", "micro_batch", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8"]


@pytest.mark.parametrize("fixup", [False, True], ids=["as edited", "sha256 fixed up"])
@pytest.mark.parametrize("argv, kind, change", [(SOLVE, "answer", _one_byte_answer), (["docs"], "docs", _one_byte_docs)],
                         ids=["solve", "docs"])
def test_edited_answers_change_no_answer(argv, kind, change, fixup, cache_home, monkeypatch):
    monkeypatch.setenv("MEMFORM_NO_CACHE", "1")
    reference = io.StringIO()
    assert main(argv, out=reference) == 0
    monkeypatch.delenv("MEMFORM_NO_CACHE")
    assert main(argv, out=io.StringIO()) == 0  # kept
    (path,) = _files(cache_home / "memform", kind)
    _edit(path, change, fixup)
    for _ in range(2):  # derived again and kept again, then that is read
        out = io.StringIO()
        assert main(argv, out=out) == 0
        assert out.getvalue() == reference.getvalue()
    # a symlink planted where it is kept is replaced, not followed
    victim = cache_home / "victim"
    victim.write_bytes(b"victim")
    path.unlink()
    path.symlink_to(victim)
    out = io.StringIO()
    assert main(argv, out=out) == 0 and out.getvalue() == reference.getvalue()
    assert victim.read_bytes() == b"victim" and not path.is_symlink()


def _one_byte_library_weights(data):
    """The snapshot's weights rule made a constant 1 byte."""
    data["nodes"].append(["I", 1])
    data["library"]["lowered"]["weights"] = ("x", len(data["nodes"]) - 1)


@pytest.mark.parametrize("fixup", [False, True], ids=["as edited", "sha256 fixed up"])
def test_an_edited_library_snapshot_changes_no_answer(fixup, cache_home, monkeypatch):
    monkeypatch.setenv("MEMFORM_NO_CACHE", "1")
    reference = io.StringIO()
    assert main(SHOW, out=reference) == 0
    monkeypatch.delenv("MEMFORM_NO_CACHE")
    engine.load()  # fills the cache
    (path,) = _files(cache_home / "memform", "library")
    _edit(path, _one_byte_library_weights, fixup)
    assert cache.read("library", cache.source_key()) is None  # not believed
    out = io.StringIO()
    assert main(SHOW, out=out) == 0
    assert out.getvalue() == reference.getvalue()
    assert Scenario.create(engine.load(), "llama2-7b").evaluate("weights") == 2 * 6_738_415_616  # rewritten
    assert cache.read("library", cache.source_key()) is not None


def test_a_renamed_file_is_not_believed(cache_home):
    engine.load()
    folder = cache_home / "memform"
    (compiled,) = _files(folder, "compiled")
    key = cache.source_key()
    os.replace(compiled, folder / f"formulas-{key}.json")  # a valid file under another name
    assert cache.read("formulas", key) is None


# ---------------------------------------------------------------- the directory
def test_a_shared_or_foreign_cache_directory_is_not_used(cache_home, monkeypatch, capsys):
    folder = cache_home / "memform"
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(folder, 0o770)
    assert cache.private_dir() is None and cache.private_dir() is None
    err = capsys.readouterr().err
    assert err == (f"memform: note: cache directory {folder} is writable by group or others (mode 770); "
                   "running without the cache\n")  # once
    os.chmod(folder, 0o700)
    assert cache.private_dir() == folder
    uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    assert cache.private_dir() is None
    assert capsys.readouterr().err == (f"memform: note: cache directory {folder} is not owned by you; "
                                       "running without the cache\n")
    cache.write("compiled", "k", {"x": 1})
    assert not list(folder.iterdir())


# ---------------------------------------------------------------- planted files, in new processes
def _memform(argv, cache_home: Path, tmp_path: Path, **env):
    """``python -m engine ARGV`` with the cache in ``cache_home`` and a home, a temporary
    directory and a working directory of its own under ``tmp_path``."""
    for d in ("home", "tmp", "work"):
        (tmp_path / d).mkdir(exist_ok=True)
    env = dict(PATH=os.environ.get("PATH", ""), PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1",
               XDG_CACHE_HOME=str(cache_home), HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"),
               MEMFORM_BUILT=os.environ["MEMFORM_BUILT"], **env)  # the user's cache alone (conftest.py)
    done = subprocess.run([sys.executable, "-m", "engine", *argv], env=env, cwd=tmp_path / "work",
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """What the commands print with the cache off."""
    tmp = tmp_path_factory.mktemp("reference")
    out = {" ".join(argv): _memform(argv, tmp / "cache", tmp, MEMFORM_NO_CACHE="1")[0]
           for argv in (ESTIMATE, SHOW)}
    assert WEIGHTS in out[" ".join(ESTIMATE)]
    return out


def _snapshot(top: Path, leave_out: Path) -> dict:
    """Every file under ``top`` but those in ``leave_out``: its size, time and bytes."""
    seen = {}
    for folder, dirs, names in os.walk(top):
        if Path(folder) == leave_out:
            dirs.clear()
            continue
        for name in names:
            p = Path(folder) / name
            st = p.lstat()
            seen[p] = (st.st_size, st.st_mtime_ns, p.read_bytes() if p.is_file() else os.readlink(p))
    return seen


class _Marker:
    """Unpickling this creates the marker file: code that runs."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("planted", ["pickle", "symlink"])
def test_planted_files_run_no_code_and_write_nothing_outside(planted, reference, tmp_path, monkeypatch):
    """Every cache path (today's, the secret, and those of the pickle cache this replaced)
    holds a pickle that would create a marker file, or a symlink to a file outside: the
    answers stay those of the cache off, no code runs, nothing outside the cache changes."""
    cache_home = tmp_path / "cache"
    folder = cache_home / "memform"
    folder.mkdir(parents=True, mode=0o700)
    for d in ("home", "tmp", "work", "outside"):
        (tmp_path / d).mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    key = cache.source_key()
    names = [f"{kind}-{key}.json" for kind in KINDS] + ["secret", "grammar.lark-tables"]
    names += [f"{kind}-{key}.pickle" for kind in ("library", "compiled", "formulas")]
    marker = tmp_path / "outside" / "code-ran"
    for i, name in enumerate(names):
        if planted == "pickle":
            (folder / name).write_bytes(pickle.dumps(_Marker(marker)))
            (folder / name).chmod(0o600)
        else:
            target = tmp_path / "outside" / f"victim-{i}"
            target.write_bytes(b"victim")
            (folder / name).symlink_to(target)
    before = _snapshot(tmp_path, folder)
    for argv in (ESTIMATE, ESTIMATE, SHOW):  # the full path, then the fast path from its files
        assert _memform(argv, cache_home, tmp_path)[0] == reference[" ".join(argv)]
    assert _snapshot(tmp_path, folder) == before  # home, temporary and working directories included
    assert not marker.exists()
    for kind in KINDS:
        (path,) = _files(folder, kind)
        assert not path.is_symlink() and path.read_bytes().startswith(cache.MAGIC)
    assert fast.report(build_parser().parse_args(ESTIMATE)) is not None  # the rewritten files are used


def test_a_world_writable_cache_directory_is_refused(reference, tmp_path, monkeypatch):
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    cache_home = tmp_path / "cache"
    folder = cache_home / "memform"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    marker = tmp_path / "code-ran"
    (folder / "secret").write_bytes(b"s" * 32)
    for kind in KINDS:
        (folder / f"{kind}-{cache.source_key()}.json").write_bytes(pickle.dumps(_Marker(marker)))
    planted = sorted(os.listdir(folder))
    out, err = _memform(ESTIMATE, cache_home, tmp_path)
    assert out == reference[" ".join(ESTIMATE)]
    assert err == (f"memform: note: cache directory {folder} is writable by group or others (mode 777); "
                   "running without the cache\n")
    assert sorted(os.listdir(folder)) == planted and not marker.exists()


# ---------------------------------------------------------------- built with the package
def _driver(*argv: str) -> str:
    """A new process running memform: what it prints, then whether it imported sympy."""
    return ("import sys, io\nfrom engine.cli import main\nout = io.StringIO()\n"
            f"code = main({list(argv)!r}, out)\nprint(out.getvalue(), end='')\nprint(code, 'sympy.core' in sys.modules)")


def test_files_built_with_the_package_answer_the_first_run(tmp_path):
    """engine/_build_hook.py builds, while the package is built, what a first run would
    build; a first run with an empty cache then answers from it without sympy and builds
    nothing, and a damaged file is ignored (rebuilt in the user's cache)."""
    from engine import _build_hook
    built = tmp_path / "built"
    env = {k: v for k, v in os.environ.items() if k not in ("MEMFORM_NO_CACHE", "PYTHONPATH")}
    env.update(PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "unused"))
    subprocess.run([sys.executable, "-c", _build_hook.BUILD, str(built)], cwd=ROOT, env=env, check=True)
    key = cache.source_key()
    names = sorted(p.name for p in built.iterdir())
    assert [n for n in names if not n.startswith("docs-")] == [
        f"compiled-{key}.json", f"grammar-{key}.json", grammar.standalone_name(), f"library-{key}.json"]
    assert len([n for n in names if n.startswith(f"docs-{key}")]) == len(DOC_FILES)  # md, LaTeX, HTML
    assert not (tmp_path / "unused").exists()  # the build wrote into the package's folder alone
    expected = io.StringIO()
    assert main([*ESTIMATE, "--json"], expected) == 0
    first = dict(env, XDG_CACHE_HOME=str(tmp_path / "first"), MEMFORM_BUILT=str(built))
    proc = subprocess.run([sys.executable, "-c", _driver(*ESTIMATE, "--json") + "\nprint('lark.lark' in sys.modules)"],
                          cwd=ROOT, env=first, capture_output=True, text=True, check=True)
    # the --set values were read by the stand-alone parser built with the package: lark not imported
    assert proc.stdout == expected.getvalue() + "0 False\nFalse\n"
    assert not list((tmp_path / "first").rglob("library-*.json"))  # nothing was built
    # the formula reference, rendered while building (sympy takes half a minute), as committed
    proc = subprocess.run([sys.executable, "-c", _driver("docs")], cwd=ROOT, env=first,
                          capture_output=True, text=True, check=True)
    assert proc.stdout == (ROOT / "docs" / "reference.md").read_text(encoding="utf-8") + "0 False\n"
    # a damaged file is not believed: the answer is built (and kept in the user's cache)
    path = built / f"compiled-{key}.json"
    raw = path.read_bytes()
    path.write_bytes(raw[:-10] + b"0" * 10)
    damaged = dict(env, XDG_CACHE_HOME=str(tmp_path / "damaged"), MEMFORM_BUILT=str(built))
    proc = subprocess.run([sys.executable, "-c", _driver(*ESTIMATE, "--json")], cwd=ROOT, env=damaged,
                          capture_output=True, text=True, check=True)
    assert proc.stdout == expected.getvalue() + "0 True\n"
    assert list((tmp_path / "damaged").rglob(f"compiled-{key}.json"))
