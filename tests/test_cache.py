"""The library cache: in the user's cache directory, keyed by the sources, never trusted blindly."""
import pickle
import shutil

import engine
from engine import cache
from engine.parser import data_path, grammar_path
from engine.model import Scenario


def test_cache_is_written_to_the_user_cache_dir_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    first = engine.load()
    (path,) = (tmp_path / "memform").glob("library-*.pickle")
    assert path == first._cache_path
    second = engine.load()
    assert second is not first and second.rules.keys() == first.rules.keys()
    assert Scenario.create(second, "llama2-7b").evaluate("n_params") == 6_738_415_616


def test_corrupt_or_foreign_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    path = engine.load()._cache_path
    path.write_bytes(b"not a pickle")
    assert Scenario.create(engine.load(), "llama2-70b").evaluate("n_params") == 68_976_648_192
    path.write_bytes(pickle.dumps(("another key", "not a library")))
    assert Scenario.create(engine.load(), "llama2-70b").evaluate("n_params") == 68_976_648_192
    assert pickle.loads(path.read_bytes())[0] != "another key"  # rewritten


def test_key_changes_with_the_rule_files(tmp_path):
    folder = tmp_path / "formulas"
    shutil.copytree(data_path("formulas"), folder)
    before = cache.fingerprint(folder, grammar_path())
    mem = folder / "overhead.mem"
    mem.write_text(mem.read_text().replace("= 0.1", "= 0.2"))
    assert cache.fingerprint(folder, grammar_path()) != before


def test_files_of_old_sources_are_pruned(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    folder = tmp_path / "memform"
    folder.mkdir()
    for i in range(6):
        (folder / f"library-old{i}.pickle").write_bytes(b"from an older checkout")
    lib = engine.load()
    left = sorted(p.name for p in folder.glob("library-*.pickle"))
    assert lib._cache_path.name in left
    assert len(left) == 1 + cache.KEEP_OTHERS


def test_corrupt_grammar_tables_are_rebuilt(tmp_path, monkeypatch):
    from engine.paths import lark_parser
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MEMFORM_NO_CACHE", raising=False)
    lark_parser()
    tables = tmp_path / "memform" / "grammar.lark-tables"
    assert tables.stat().st_size > 0  # lark wrote its tables to the user cache directory
    tables.write_bytes(b"not lark's tables")
    assert lark_parser().parse("80 GB", start="expr").data == "quantity"
    assert tables.read_bytes() != b"not lark's tables"  # rewritten


def test_cache_off_writes_nothing(tmp_path, monkeypatch):
    from engine.paths import lark_parser
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("MEMFORM_NO_CACHE", "1")
    lark_parser()
    assert not (tmp_path / "memform").exists()
