"""The source distribution and the wheel built from it carry grammar/, formulas/ and the
worked examples: build both with ``python -m build``, install each into its own fresh venv
(dependencies from the package index) and run memform from an unrelated folder."""
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist, and the wheel that ``python -m build`` builds from it (not from the tree)."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("memform-*.tar.gz")
    (wheel,) = out.glob("memform-*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sdist", "wheel"])
def test_installs_and_estimates(dist, kind, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    proc = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(dist[kind])],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # run from an unrelated folder with a fresh cache, so that nothing can come from the source tree
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEMFORM_BUILT")} \
        | {"XDG_CACHE_HOME": str(tmp_path / "cache")}

    def memform(*argv):
        return subprocess.run([str(bin_dir / "memform"), *argv], capture_output=True, text=True, cwd=work, env=env)

    proc = memform("estimate", "llama2-70b", "--json", "--set", "mode=infer")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["rules"]["weights"] == 2 * 68_976_648_192  # bf16 weights of Llama-2-70B
    # the first run answered from what the build kept in engine/_built (engine/_build_hook.py):
    # nothing was parsed, resolved or written to the cache
    assert not list((tmp_path / "cache").rglob("library-*.json")) and not list((tmp_path / "cache").rglob("compiled-*"))
    listed = subprocess.run([str(bin_dir / "python"), "-c", "import engine.paths as p; print(p.grammar_path())"],
                            capture_output=True, text=True, cwd=work, env=env).stdout
    assert "_data" in listed and str(ROOT) not in listed
    # the formula reference carries the worked examples (docs/examples.toml ships in the package)
    reference = memform("docs")
    assert reference.returncode == 0, reference.stderr
    assert "docs/examples.toml" in reference.stdout and "D1-42" in reference.stdout
    # no committed reference beside an installed package: say so, and check a generated one
    proc = memform("docs", "--check")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "installed as a package" in proc.stderr and "memform docs --check --out DIR" in proc.stderr
    assert "_data" not in proc.stderr and "python -m engine" not in proc.stderr
    assert memform("docs", "--out", "ref").returncode == 0
    proc = memform("docs", "--check", "--out", "ref")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ref/reference.md is up to date\n", "")
    # the calculator page: its markup, style and script ship in the package (engine/present/web)
    proc = memform("web", "--out", "site")
    assert proc.returncode == 0, proc.stderr
    page = (work / "site" / "index.html").read_text()
    assert "function makeProgram(Q)" in page and "<style>" in page
