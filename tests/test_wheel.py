"""The wheel carries grammar/ and formulas/: install it into a fresh venv and run it."""
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_estimates(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = dist.glob("memform-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)],
                   check=True, capture_output=True)
    # run from an unrelated folder so that nothing can come from the source tree
    proc = subprocess.run([str(bin_dir / "memform"), "estimate", "llama2-70b", "--json",
                           "--set", "mode=infer"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["rules"]["weights"] == 2 * 68_976_648_192  # bf16 weights of Llama-2-70B
    listed = subprocess.run([str(bin_dir / "python"), "-c",
                             "import engine.parser as p; print(p.grammar_path())"],
                            capture_output=True, text=True, cwd=tmp_path).stdout
    assert "_data" in listed and str(ROOT) not in listed
    # the formula reference carries the worked examples (docs/examples.toml ships in the wheel)
    reference = subprocess.run([str(bin_dir / "memform"), "docs"], capture_output=True, text=True, cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr
    assert "docs/examples.toml" in reference.stdout
