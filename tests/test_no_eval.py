"""No code execution from text: the engine never evaluates strings, and payloads in rule
files or --set values are syntax errors that run nothing."""
import io
import re
from pathlib import Path

import pytest

import engine
from engine.cli import main
from engine.errors import EngineError

ENGINE = Path(engine.__file__).resolve().parent
FORBIDDEN = re.compile(r"(?<![.\w])(eval|exec)\(|sympify\(|parse_expr\(|\bS\([\"']|__import__|(?<![.\w])compile\(")


def test_engine_source_never_evaluates_text():
    hits = []
    for path in sorted(ENGINE.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if FORBIDDEN.search(line) and "noqa: eval-ok" not in line:
                hits.append(f"{path.name}:{n}: {line.strip()}")
    assert hits == []


PAYLOADS = ["__import__('os').system('touch {marker}')", "lambda: open('{marker}', 'w')",
            "().__class__.__bases__[0].__subclasses__()", "S(\"open('{marker}','w')\")",
            "exec(\"open('{marker}','w')\")", "eval('1')", "{marker}.__dict__", "1; open('{marker}')"]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_in_set_values_run_nothing(tmp_path, payload):
    marker = tmp_path / "pwned"
    text = payload.format(marker=marker)
    code = main(["estimate", "llama2-7b", "--set", f"micro_batch={text}"], io.StringIO(), io.StringIO())
    assert code == 2 and not marker.exists()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_in_rule_files_run_nothing(tmp_path, payload):
    marker = tmp_path / "pwned"
    lib = engine.Library()
    with pytest.raises(EngineError):
        lib.add_text(f'rule x : count = {payload.format(marker=marker)} "doc"', "evil.mem")
        lib.resolve()
    assert not marker.exists()
