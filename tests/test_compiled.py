"""The compiled (vectorised) path agrees with the exact symbolic path."""
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from engine.compile.codegen import JS_RUNTIME, JavaScript, PythonExact, Specialiser, load_python
from engine.compile.exact import _compiled, bindings, number
from engine.compile.lambdas import Numpy
from engine.compile.model import Scenario
from engine.compile.outline import EXTRA_RULES, TOP_LEVEL

SWEPT = ("micro_batch", "seq_len", "dp", "tp", "pp", "zero_stage", "recompute", "attention",
         "precision", "optimizer", "mode", "sequence_parallel", "offload", "convention")


@pytest.mark.parametrize("model", ["llama2-7b", "llama2-70b", "gpt3-175b"])
@pytest.mark.parametrize("rule", TOP_LEVEL + EXTRA_RULES)
def test_sweep_equals_exact_evaluation(lib, model, rule):
    rng = np.random.default_rng(7)
    base = Scenario.create(lib, model)
    n = 40
    arrays = {}
    for name in SWEPT:
        if name in lib.options:
            decl = lib.options[name]
            arrays[name] = rng.integers(0, len(decl.choices), n) if not decl.numeric else rng.integers(0, 4, n)
        else:
            arrays[name] = 2 ** rng.integers(0, 7, n) if name != "seq_len" else rng.integers(1, 8192, n)
    swept = base.sweep(rule, **arrays)
    for i in range(0, n, 5):
        values = {}
        for name in SWEPT:
            decl = lib.decls[name]
            v = int(arrays[name][i])
            values[name] = decl.choice_of(v) if name in lib.options else v
        exact = base.with_values(**values).evaluate(rule)
        assert swept[i] == pytest.approx(float(exact), rel=1e-12)


# ------------------------------------------------------------------ every backend, every rule
# engine/compile/codegen.py prints one residual program for three targets; each must give,
# for every rule of every model preset, what folding the rules with every value known gives
# (the exact evaluation tests/test_fast.py holds to sympy's for every rule of every preset).
VARYING = ("micro_batch", "seq_len", "dp", "tp", "zero_stage", "recompute", "precision", "mode")
CHROMIUM = "/usr/bin/chromium"


def _configurations(compiled: dict, rng) -> list[dict]:
    options = compiled["options"]
    out = []
    for _ in range(3):
        out.append({"micro_batch": int(rng.integers(1, 17)), "seq_len": int(rng.integers(1, 8193)),
                    "dp": int(2 ** rng.integers(0, 5)), "tp": int(2 ** rng.integers(0, 2)),
                    **{n: options[n][0][int(rng.integers(0, len(options[n][0])))]
                       for n in ("zero_stage", "recompute", "precision", "mode")}})
    return out


def _folded(compiled: dict, values: dict) -> dict:
    """Every rule with every value known: its exact value, or None where it has none."""
    fixed, pins = bindings(compiled, values)
    program = Specialiser(compiled["rules"], fixed, (), pins)
    out = {}
    for name in compiled["rules"]:
        t = program.rule(name, program.top, frozenset())
        out[name] = Fraction(t[1]) if t[0] == "c" else None
    return out


def _run_js(script: str) -> list:
    """What ``script`` prints (one JSON value), run by Node.js or, without it, headless Chromium."""
    node = shutil.which("node") or shutil.which("nodejs")
    with tempfile.TemporaryDirectory() as tmp:
        if node:
            path = Path(tmp) / "run.js"
            path.write_text(script)
            proc = subprocess.run([node, str(path)], capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr[-3000:]
            return json.loads(proc.stdout)
        if not Path(CHROMIUM).exists():
            pytest.skip("neither Node.js nor Chromium is installed")
        page = Path(tmp) / "run.html"
        page.write_text("<!DOCTYPE html><html><body><script>\nconst console = {log: (t) => {"
                        "const o = document.createElement('output'); o.id = 'out'; o.textContent = t;"
                        "document.body.appendChild(o);}};\n" + script + "\n</script></body></html>")
        proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                               page.as_uri()], capture_output=True, text=True, timeout=300)
    found = re.search(r'<output id="out">(.*?)</output>', proc.stdout, re.S)
    assert found, proc.stderr[-3000:]
    return json.loads(html.unescape(found.group(1)))



def test_every_backend_gives_every_rule_of_every_preset(lib):
    compiled = _compiled()
    models = sorted(n for kind, n in compiled["presets"] if kind == "model")
    assert len(models) > 50
    rng = np.random.default_rng(16)
    scripts, expected_js = [], []
    checked = 0
    for k, model in enumerate(models):
        base = dict(compiled["defaults"])
        base.update(compiled["presets"][("model", model)])
        base.update(compiled["presets"][("gpu", "h100-80g")])
        configs = _configurations(compiled, rng)
        references = [_folded(compiled, {**base, **c}) for c in configs]
        names = [n for n in compiled["rules"] if all(r[n] is not None for r in references)]
        assert len(names) > 0.8 * len(compiled["rules"]), model
        fixed, pins = bindings(compiled, base, VARYING)
        program = Specialiser(compiled["rules"], fixed, VARYING, pins)
        outputs = [program.rule(n, program.top, frozenset()) for n in names]
        codes = [[number(compiled["options"], v, c[v]) for v in VARYING] for c in configs]
        exact = load_python(PythonExact(), program.steps, outputs, len(VARYING))
        vector = load_python(Numpy(), program.steps, outputs, len(VARYING))
        with np.errstate(all="ignore"):
            arrays = vector(*(np.array([float(row[i]) for row in codes]) for i in range(len(VARYING))))
        for j, (row, reference) in enumerate(zip(codes, references)):
            got = exact(*row)
            for name, value, array in zip(names, got, arrays):
                assert Fraction(value) == reference[name], (model, configs[j], name)
                floats = np.broadcast_to(np.asarray(array, float), (len(configs),))
                assert floats[j] == pytest.approx(float(reference[name]), rel=1e-9, abs=1e-9), (model, configs[j], name)
                checked += 1
        js = JavaScript(f"program{k}")
        scripts.append(js.source(program.steps, outputs, len(VARYING)))
        calls = ", ".join("[" + ", ".join(f"Q.int({v}n)" for v in row) + "]" for row in codes)
        scripts.append(f"results.push([{calls}].map(args => {js.name}(...args).map(Q.text)));")
        expected_js.append([[str(reference[n]) for n in names] for reference in references])
    out = _run_js(JS_RUNTIME + "\nconst results = [];\n" + "\n".join(scripts)
                  + "\nconsole.log(JSON.stringify(results));")
    assert out == expected_js
    assert checked > 50 * 3 * 500


# ------------------------------------------------------------------ memform compile
def _cli(*argv):
    import io
    from engine.cli import main
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def _import(path: Path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _estimated(*sets) -> dict:
    code, out, err = _cli("estimate", "llama2-7b", "--gpu", "h100-80g", "--json", "--set", "zero_stage=3",
                          "--set", "dp=8", *(x for s in sets for x in ("--set", s)))
    assert code == 0, err
    return json.loads(out)


def test_compile_writes_programs_that_give_the_estimate(tmp_path):
    """The three targets of `memform compile`, imported or run as a user would, give the
    figures `memform estimate --json` prints for the same values (exact ones to the byte)."""
    configurations = [dict(micro_batch=1, seq_len=4096, recompute="full"), dict(micro_batch=3, seq_len=777, recompute="none"),
                      dict(micro_batch=16, seq_len=8192, recompute="selective")]
    expected = [_estimated(*(f"{k}={v}" for k, v in c.items())) for c in configurations]
    paths = {}
    for target in ("python", "numpy", "js"):
        paths[target] = tmp_path / f"llama_{target}.{'js' if target == 'js' else 'py'}"
        code, out, err = _cli("compile", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8",
                              "--vary", "micro_batch,seq_len,recompute", "--rule", "total", "--rule", "activations",
                              "--target", target, "--out", str(paths[target]))
        assert (code, err) == (0, "") and out.startswith(f"wrote {paths[target]}: total, activations over")
    exact = _import(paths["python"])
    vector = _import(paths["numpy"])
    arrays = vector.evaluate({k: np.array([float(vector.CODES.get(k, {}).get(c[k], c[k])) for c in configurations])
                              for k in vector.VARYING})
    script = paths["js"].read_text() + "\nconsole.log(JSON.stringify([" + ", ".join(
        "evaluate(" + json.dumps({k: str(v) for k, v in c.items()}) + ")" for c in configurations) + "]));"
    js = _run_js(script)
    for i, (c, est) in enumerate(zip(configurations, expected)):
        got = exact.evaluate(c)
        for rule in ("total", "activations"):
            assert math.ceil(got[rule]) == est["rules"][rule]  # the JSON's whole bytes, rounded up
            assert float(arrays[rule][i]) == pytest.approx(float(got[rule]), rel=1e-12)
            assert Fraction(js[i][rule]) == got[rule]
    assert "def program(x0, x1, x2):" in paths["python"].read_text()
    assert "# stage_saved_activations" in paths["python"].read_text()  # each step says which rule it is


def test_compile_takes_a_users_override_and_refuses_unknown_names(tmp_path):
    mine = tmp_path / "mine.mem"
    mine.write_text('override rule overhead : bytes = 1 GiB "a flat overhead"\n')
    out_file = tmp_path / "m.py"
    code, _, err = _cli("compile", "llama2-7b", "--rules", str(mine), "--vary", "micro_batch", "--rule", "overhead",
                        "--out", str(out_file))
    assert (code, err) == (0, "")
    assert _import(out_file).evaluate({"micro_batch": 5}) == {"overhead": 2**30}
    code, _, err = _cli("compile", "llama2-7b", "--vary", "micro_batch,seqlen")
    assert code == 2 and "unknown name 'seqlen' in --vary" in err and "seq_len" in err
    code, _, err = _cli("compile", "llama2-7b", "--vary", "micro_batch", "--rule", "totl")
    assert code == 2 and "'totl' is not a rule" in err


def test_deeply_nested_branches_compile_and_estimate_without_a_traceback(tmp_path):
    """A rule of 120 nested ifs: sympy cannot print its formula (the column says so instead
    of a RecursionError), and each backend's program prints branches that need statements
    as functions defined at one level, not inside each other: the nested conditional
    expressions went past Python's 200 nested parentheses (a SyntaxError) near 100."""
    expr = "0 B"
    for i in range(120):
        expr = f"(if micro_batch > {i} then {expr} + 1 B else {i} B)"
    mine = tmp_path / "deep.mem"
    mine.write_text(f'override rule overhead : bytes = {expr} "deep"\n')
    code, out, err = _cli("estimate", "llama2-7b", "--rules", str(mine), "--set", "micro_batch=150")
    assert (code, err) == (0, ""), err
    assert "(nested too deeply to print)" in out
    # (if mb > i then ... else i): every condition holds at 150 (120); at 3 the outermost fails (119)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    for target in ("python", "js"):  # each in a process of its own, as a user runs it
        path = tmp_path / f"deep_{target}.{'js' if target == 'js' else 'py'}"
        proc = subprocess.run([sys.executable, "-m", "engine", "compile", "llama2-7b", "--rules", str(mine),
                               "--vary", "micro_batch", "--rule", "overhead", "--target", target, "--out", str(path)],
                              capture_output=True, text=True, env=env, timeout=600)
        assert (proc.returncode, proc.stderr) == (0, "")
    module = _import(tmp_path / "deep_python.py")
    assert [module.evaluate({"micro_batch": m})["overhead"] for m in (150, 3)] == [120, 119]
    js = _run_js((tmp_path / "deep_js.js").read_text() + "\nconsole.log(JSON.stringify([150, 3].map("
                 "(m) => evaluate({micro_batch: m}).overhead)));")
    assert js == ["120", "119"]
