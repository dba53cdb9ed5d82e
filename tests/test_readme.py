"""The README's examples run as written and print what the README shows."""
import io
import re
import shlex
from pathlib import Path

import pytest

from engine.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"

#: the rule file of the README's error example (its second line is shown there)
MINE = 'override rule overhead : bytes =\n    cuda_context + alloc_margn * tensors "mine"\n'


def _examples():
    """(command, expected lines) for every '$ memform ...' in the README's code blocks, and
    the demo of the two commands with the block the README says it prints."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    demo = re.search(r"\.venv/bin/memform (estimate [^\n]*)", text).group(1)
    printed = next(b for b in blocks if b.startswith(demo.split()[1] + ":"))
    yield "memform " + demo, printed.splitlines()
    for block in blocks:
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ memform "):
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            expected = []
            i += 1
            while i < len(lines) and lines[i].strip() and not lines[i].startswith("$ ") and lines[i] != "...":
                expected.append(lines[i])
                i += 1
            yield command, expected


EXAMPLES = list(_examples())


def test_the_readme_has_examples():
    assert len(EXAMPLES) >= 8


@pytest.mark.parametrize("command, expected", EXAMPLES, ids=[c[:60] for c, _ in EXAMPLES])
def test_readme_example_prints_what_the_readme_shows(command, expected, tmp_path, monkeypatch):
    argv = shlex.split(command)[1:]
    if argv[0] in ("measure", "calibrate"):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    if "mine.mem" in argv:
        (tmp_path / "mine.mem").write_text(MINE)
        monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    main(argv, out, err)
    actual = [line.rstrip() for line in (out.getvalue() + err.getvalue()).splitlines()]
    position = 0
    for line in expected:  # every line the README shows, in order
        want = line.rstrip()
        assert want in actual[position:], f"{command!r} no longer prints {want!r}"
        position = actual.index(want, position) + 1


def _python_blocks():
    text = README.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_has_a_python_example():
    assert _python_blocks()


@pytest.mark.parametrize("number", range(len(_python_blocks())))
def test_readme_python_block_runs_as_written(number, tmp_path):
    """Each Python block runs as a user would run it: a script of its own, in a new process."""
    import subprocess
    import sys
    script = tmp_path / "example.py"
    script.write_text(_python_blocks()[number], encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the values its comments state are the ones it prints
    for value in re.findall(r"# exact sympy Integer: (\d+)", _python_blocks()[number]):
        assert re.search(rf"^{value}$", proc.stdout, re.M), f"{value} not printed"
