"""check: a check that tests nothing fails, compiled checks cannot be broken by a user's
names, and values that leave the real numbers are reported with the rule that makes them
(issue 18); estimate refuses such a rule file with the same located error."""
import io
import json

import pytest

import engine
from engine.answers.checks import run_check, run_checks
from engine.cli import main
from engine.errors import UsageError
from conftest import squaring_chain


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


MINE = '''\
input numpy : count >= 1 = 1 "an input named like the module the checks are compiled to"
check "an input named numpy": max(numpy, dp) >= 1
check "dp is never negative": dp >= 0 where dp < 0
rule layers_past_100 : count = sqrt(num_hidden_layers - 100) "not real below 100 layers"
check "a square root of a negative number": layers_past_100 >= 0
'''


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """``memform check`` of MINE beside the library (one run for the three tests below)."""
    path = tmp_path_factory.mktemp("checks") / "mine.mem"
    path.write_text(MINE)
    return (path, *run("check", str(path), "--samples", "20"))


def test_an_input_named_numpy_does_not_break_the_compiled_checks(checked):
    # 'numpy.ndarray' object has no attribute 'maximum': lambdify put the symbol in the namespace
    _, code, out, err = checked
    assert err == ""
    presets = sum(1 for kind, _ in engine.load().presets if kind == "model")
    assert f"ok    an input named numpy ({presets * 20} scenarios)" in out  # every model preset x 20 samples


def test_a_check_whose_where_never_holds_fails(checked):
    # dp >= 1 by its declaration: the check reported "ok" without testing anything
    path, code, out, _ = checked
    assert code == 1
    presets = sum(1 for kind, _ in engine.load().presets if kind == "model")
    assert (f"FAIL  dp is never negative\n      {path}:3: tested nothing: its 'where' holds in none of "
            f"the {presets * 20:,} scenarios sampled\n") in out


def test_a_rule_that_leaves_the_reals_is_named(checked):
    # every model preset has fewer than 100 layers but one (llama3.1-405b has 126)
    path, _, out, _ = checked
    fail = out[out.index("FAIL  a square root of a negative number"):].splitlines()
    assert fail[1].endswith(": the left side is not a finite real number")
    assert fail[2].startswith(f"{path}:4:32: rule 'layers_past_100' is not a real number here: its value is ")
    assert fail[3] == "    4 | " + MINE.splitlines()[3]
    assert fail[5].startswith("hint: with num_hidden_layers=")


@pytest.mark.parametrize("samples", ["0", "-1", "20001"])
def test_samples_out_of_range_is_a_usage_error(samples):
    # --samples 0 reported every check "ok" (0 scenarios)
    code, out, err = run("check", "--samples", samples)
    assert code == 2 and out == ""
    assert err.startswith(f"memform: error: --samples takes a whole number from 1 to 20,000, not {samples}\n")


def test_run_checks_refuses_no_samples(lib):
    with pytest.raises(UsageError):
        run_checks(lib, samples=0)


def test_an_override_that_leaves_the_reals_fails_the_library_checks_with_its_name(tmp_path):
    # sqrt(dp - 2) is sqrt(-1) at dp = 1: the library's check on total failed with "nan >= nan"
    path = tmp_path / "mine.mem"
    path.write_text('override rule overhead : bytes = cuda_context + sqrt(dp - 2) * 1 B "mine"\n')
    lib = engine.load(extra=[path])
    item = next(i for i in lib.lowered_checks if i[0].doc == "memory never decreases when the micro-batch grows")
    result = run_check(lib, *item, samples=50)
    assert not result.ok
    head, origin = result.failure.split("\n", 1)
    assert head.endswith("not a finite real number")
    assert origin.startswith(f"{path}:1:34: rule 'overhead' is not a real number here: its value is ")
    assert origin.endswith(", dp=1")  # the hint: the values the rule used


@pytest.mark.parametrize("rule, why", [
    ("cuda_context + sqrt(dp - 2) * 1 B", "its value is 536870912 + I"),  # TypeError: complex to float
    ("cuda_context + (if 1 / (dp - 1) > 2 then 1 B else 2 B)", "Invalid comparison of non-real zoo"),
])
def test_estimate_with_a_rule_that_leaves_the_reals_is_a_located_error(tmp_path, rule, why):
    path = tmp_path / "mine.mem"
    path.write_text(f'override rule overhead : bytes = {rule} "mine"\n')
    code, out, err = run("estimate", "gpt2", "--rules", str(path))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"{path}:1:34: rule 'overhead' is not a real number here: {why}"
    assert lines[-1] == "hint: with cuda_context=536870912, dp=1"  # GPT-2's defaults: 512 MiB, dp = 1


def test_estimate_with_an_irrational_rule_is_a_located_error(tmp_path):
    # fuzzer (rules surface, seed 1203): sqrt(1e9) as a count reached the formatter,
    # "AttributeError: 'Add' object has no attribute 'p'" in report.py
    path = tmp_path / "mine.mem"
    path.write_text('override rule trainable_tensors : count = sqrt ( 1e9 ) "fz"\n')
    code, out, err = run("estimate", "llama3.1-405b", "--rules", str(path))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"{path}:1:43: rule 'trainable_tensors' is not an exact number here: its value 10000*sqrt(10) is irrational"
    assert lines[-1] == "hint: memform's figures are exact: round it with floor() or ceil()"


def _only(path, doc):
    """The library with ``path`` and the check of that doc string, resolved."""
    lib = engine.load(extra=[path])
    return (lib, *next(i for i in lib.lowered_checks if i[0].doc == doc))


def test_a_check_dividing_by_a_rule_that_is_zero_fails_with_the_rule(tmp_path):
    # fuzzer: 0.5 / lm_head_params (0 for a tied head) put zoo in the compiled check,
    # "KeyError: 'ComplexInfinity'" in the numpy printer
    path = tmp_path / "mine.mem"
    path.write_text('check "zoo" : 5e20 / intermediate_size + 0.5 / lm_head_params >= 0\n')
    result = run_check(*_only(path, "zoo"), samples=2)
    assert not result.ok and "not a finite real number" in result.failure


def test_a_check_beyond_float64_fails_saying_so(tmp_path):
    # fuzzer: a 300-digit constant, "OverflowError: int too large to convert to float" in run_check
    path = tmp_path / "mine.mem"
    path.write_text(f'check "big" : hidden_size * {"9" * 330} >= 0\n')
    result = run_check(*_only(path, "big"), samples=2)
    assert result.failure == ("its values exceed float64's range (about 1.8e308), in which checks are "
                              "sampled: it tested nothing")


def test_a_value_of_more_than_4300_digits_is_printed(tmp_path):
    # fuzzer: (64 + 4096 / 100000^1024) B has a 5,121-digit denominator, within the 100,000-bit
    # limit; Python refuses to print integers over 4,300 digits ("ValueError" in show_text)
    path = tmp_path / "mine.mem"
    path.write_text('override rule optimizer_states : bytes = (64 + 4096 * floor ( 100000 ) ^ - 1024) * 1 B "fz"\n')
    code, out, err = run("estimate", "phi3-mini-4k", "--rules", str(path), "--json")
    assert code == 0 and err == ""
    assert '"optimizer_states": 65' in out  # whole bytes, rounded up


def test_a_rule_squared_60_times_over_a_missing_input_is_reported_not_expanded(tmp_path):
    # fuzzer (rules, seed 1204): a chain x1 = x0 * x0 + 1 ... over trtllm_max_concurrency, which
    # waits for the GPU's capacity; sympy's assumptions on (x^2 + 1)^2 + 1 ... (degree 2^60) ran
    # for minutes.  The missing input is what the answer is.
    path = tmp_path / "fuzz.mem"
    path.write_text(squaring_chain("trtllm_max_concurrency", 60))
    code, out, err = run("estimate", "qwen3-30b-a3b", "--rules", str(path), "--set", "zero_stage=3")
    assert code == 2 and out == ""
    assert "needs values for: capacity" in err


def test_a_comparison_with_an_undefined_value_is_a_located_error(tmp_path):
    # fuzzer (rules, seed 1205): blocks_of = 100 / offloads_params is 100 / 0 here, and sympy's
    # min(cached_tokens, nan) raised "ValueError: The argument 'nan' is not comparable".  The KV
    # cache is that of inference: training (the default) keeps none and never reads blocks_of
    # (fuzzer, seed 1242: an arm not taken is not built), serving meets the undefined value
    path = tmp_path / "fuzz.mem"
    path.write_text('override\n  rule\n  blocks_of :\n  tokens = 100\t/ # c\noffloads_params "u"\n')
    code, out, err = run("estimate", "gemma2-2b", "--rules", str(path), "--json")
    assert code == 0 and json.loads(out)["components"]["kv_cache"] == 0
    code, out, err = run("estimate", "gemma2-2b", "--rules", str(path), "--set", "mode=infer")
    assert code == 2 and out == "" and "Traceback" not in err
    assert "rule 'kv_cache' is not a real number here: it compares an undefined value" in err
    assert "cached_tokens=nan" in err.splitlines()[-1]


def test_a_rebound_rule_inside_min_or_max_is_shown_and_evaluated(tmp_path):
    # fuzzer (rules, seed 1208): the formula column bound the scenario's quant_group_size before
    # expanding attention_tensors[quant_group_size = 5e20], leaving At(4, 128, 5e20) inside a max:
    # "ValueError: The argument '2*At(4, 128, 500000000000000000000)' is not comparable"
    path = tmp_path / "fuzz.mem"
    path.write_text('override rule working_bytes : bytes = (attention_tensors [ quant_group_size = 5e20 ]) * bf16 "fz"\n')
    code, out, err = run("estimate", "mistral-7b", "--rules", str(path))
    assert code == 0 and "Traceback" not in err
    code, out, err = run("show", "working_bytes", "mistral-7b", "--rules", str(path))
    assert code == 0 and out.split()[-1] == "8"  # q, k, v and o weights (no biases) x 2 bytes


def test_show_expands_a_rebound_target_under_the_new_binding():
    # frozen_base_bytes uses quantised_params[quant_scope = linear]: with quant_scope = all the
    # rebound target must still count only the projections.  Llama-2-7B by hand: 32 layers x
    # (4 x 4096^2 + 3 x 4096 x 11008) = 6,476,005,376 NF4 weights at 0.5 + 1/64 + 4/(64 x 256)
    # bytes (double quantisation), the other 262,410,240 parameters in bf16
    code, out, err = run("show", "frozen_base_bytes", "llama2-7b", "--set", "finetune=qlora",
                         "--set", "quant_scope=all")
    assert code == 0 and out.split()[-1] == "3865591808"


def test_a_compiled_side_equals_its_exact_value(lib):
    # compile_expr renames symbols; rebuilding sums and products unevaluated left their
    # arguments out of canonical order and sympy's cse substituted a wrong common factor:
    # memform check found Granite 4.0-H Tiny's total negative under QLoRA with FSDP2
    import numpy as np
    import sympy
    from engine.answers.checks import _models
    from engine.compile.lambdas import compile_expr, real_values
    from engine.lang.rules import OptionDecl
    models = _models(lib)
    fixed = dict(models)["granite-4.0-h-tiny"]
    pinned = sorted({n for _, f in models for n in f} & set(lib.rules))
    sample = dict(finetune="qlora", stack="fsdp2", torch_compile="model", lora_dropout="0.47", lora_rank="16242",
                  activation_offload="true", attention="eager", recompute="selective", sequence_parallel="true",
                  pp="6", pp_schedule="gpipe", pp_stage="first", cp="2", tp="30898", ep="863", dp="4381",
                  micro_batch="17163", seq_len="8", zero_stage="2", precision="bf16", offload_stash="7")
    expr = lib.compose_expr(sympy.Symbol("tensors"), [(n, sympy.Symbol(n)) for n in pinned])
    expr = expr.xreplace({s: lib.compose(s.name) for s in expr.free_symbols if s.name in pinned and s.name not in fixed})
    values = {}
    for s in expr.free_symbols:
        decl = lib.decls[s.name]
        text = fixed.get(s.name, sample.get(s.name))
        if isinstance(decl, OptionDecl):
            values[s] = sympy.Integer(decl.code(text if text is not None else decl.default))
        else:
            values[s] = lib.check_value(s.name, sympy.Rational(text)) if text is not None else lib.check_value(s.name, decl.default)
    symbols = sorted(values, key=lambda s: s.name)
    exact = float(expr.xreplace(values))
    compiled = real_values(compile_expr(expr, symbols)(*(np.array([float(values[s])]) for s in symbols)), (1,))[0]
    assert exact > 0 and compiled == pytest.approx(exact, rel=1e-9)


# ---------------------------------------------------------------- the library's checks, sampled together
def _broken_library(tmp_path):
    """The shipped rule files with the device holding less than the allocator reserved."""
    import shutil
    from engine.paths import data_path
    folder = tmp_path / "formulas"
    shutil.copytree(data_path("formulas"), folder)
    peak = folder / "peak.mem"
    text = peak.read_text()
    assert "rule device_used : bytes = peak_reserved + cuda_context" in text
    peak.write_text(text.replace("rule device_used : bytes = peak_reserved + cuda_context",
                                 "rule device_used : bytes = peak_reserved - cuda_context"))
    return engine.load(folder=folder)


def test_the_sampled_checks_find_a_broken_rule(tmp_path, monkeypatch):
    # the library's own checks are sampled together over the compiled trees (one numpy program,
    # engine/answers/checks.py _program);
    # the copy's files count as the library's own here, so that path is the one that runs
    import engine.answers.checks as checks
    lib = _broken_library(tmp_path)
    monkeypatch.setattr(checks, "shipped", lambda decl: True)
    device = next(item for item in lib.lowered_checks if item[0].doc == "the device holds the reserved memory")
    reserved = next(item for item in lib.lowered_checks if item[0].doc == "reserved memory holds the allocated memory")
    results = checks._Sampled(lib, 5).run([device, reserved])
    assert results[id(reserved[0])].ok
    bad = results[id(device[0])]
    assert not bad.ok and bad.failure.startswith("fails for ") and bad.failure.endswith(" is false")
    # the composed path (a user's checks) agrees
    assert not run_check(lib, *device, samples=5).ok


def test_the_sampled_checks_agree_with_the_composed_ones(lib):
    import engine.answers.checks as checks
    items = [item for item in lib.lowered_checks
             if item[0].doc in ("memory never decreases when the micro-batch grows",
                                "per-GPU memory never grows when tp doubles")]
    sampled = checks._Sampled(lib, 20).run(items)
    assert len(sampled) == 2
    for item in items:
        composed = run_check(lib, *item, samples=20)
        assert composed.ok and sampled[id(item[0])].ok
        assert sampled[id(item[0])].samples > 0
