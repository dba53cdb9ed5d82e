"""The solver: seed questions, hand-computed answers from the papers' formulas, and
hypothesis properties (the answer fits, the next value does not, the closed form agrees)."""
import io
import math
import time

import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.cli import main
from engine.errors import InfeasibleError, UsageError
from engine.compile.model import Scenario
from engine.answers.solve import solve
from conftest import squaring_chain

H100 = (81559 - 469) * 2**20  # what one process can use on an H100 SXM5 80GB: CUDA's total, nvidia-smi's 81559 MiB less the 469 MiB the driver reserves (vLLM logs "79.19 GiB"; docs/research/cuda-total-memory.md)
BARE = {"alloc_margin": 0, "cuda_context": 0, "comm_buffers": 0,  # the papers' formulas have no overhead
        "optimizer_step_bytes": 0}  # and count optimizer state per parameter only (ZeRO's K)


def test_zero_1_and_2_never_fit_70b_on_80gb(lib):
    # seed LIT-03: the unsharded floors are 4P = 280 GB (stage 1) and 2P = 140 GB (stage 2)
    for stage in (1, 2):
        s = Scenario.create(lib, "llama2-70b", values={"n_params": 70 * 10**9, "zero_stage": stage,
                                                       "capacity": 80 * 10**9})
        with pytest.raises(InfeasibleError) as info:
            solve(s, "min", "dp", target="model_states")
        assert info.value.message.startswith("does not fit for any dp up to")


def test_infeasible_max_names_the_largest_part(lib):
    s = Scenario.create(lib, "llama2-70b", "h100-80g", values={"seq_len": 4096})
    with pytest.raises(InfeasibleError) as info:
        solve(s, "max", "micro_batch")
    assert "does not fit even at micro_batch=1" in info.value.message
    assert "the largest part is optimizer_states" in info.value.message


def test_cli_infeasible_exit_code_is_1():
    out, err = io.StringIO(), io.StringIO()
    code = main(["solve", "min", "dp", "llama2-70b", "--capacity", "80GB", "--target", "model_states",
                 "--set", "zero_stage=1"], out, err)
    assert code == 1 and err.getvalue().startswith("memform: error: does not fit")


def test_max_micro_batch_llama2_7b_zero3_h100(lib):
    # ZeRO paper + Korthikanti et al.: 16P/N + b (34 L s h + 4 s h + 4 s V) <= C
    P, L, h, V, s, N = 6_738_415_616, 32, 4096, 32000, 4096, 8
    expected = (H100 - 16 * P // N) // (34 * L * s * h + 4 * s * h + 4 * s * V)
    sc = Scenario.create(lib, "llama2-7b", "h100-80g", values={**BARE, "zero_stage": 3, "dp": N, "seq_len": s})
    r = solve(sc, "max", "micro_batch")
    assert r.value == expected and r.method == "closed-form"
    assert r.bytes_at_value <= H100 < r.bytes_at_next


def test_max_seq_len_eager_is_quadratic(lib):
    # eager attention adds 5 a s^2 b per layer: 2P (ZeRO-3, N=8) + L (34 s h + 5 a s^2) + 4 s h + 4 s V <= C
    P, L, h, a, V = 6_738_415_616, 32, 4096, 32, 32000
    f = lambda s: 16 * P // 8 + L * (34 * s * h + 5 * a * s * s) + 4 * s * h + 4 * s * V
    A, B, C = 5 * a * L, 34 * L * h + 4 * h + 4 * V, H100 - 16 * P // 8
    expected = (math.isqrt(B * B + 4 * A * C) - B) // (2 * A)
    while f(expected + 1) <= H100:  # isqrt floors; settle the last step by the definition
        expected += 1
    sc = Scenario.create(lib, "llama2-7b", "h100-80g",
                         values={**BARE, "zero_stage": 3, "dp": 8, "attention": "eager"})
    r = solve(sc, "max", "seq_len")
    assert r.value == expected and f(expected) <= H100 < f(expected + 1)
    assert "sqrt" in r.closed_form and r.method == "closed-form"


def test_min_gpus_llama2_70b_zero3_full_recompute(lib):
    # 16P/N + (2 s h L + 34 s h) + 4 s h + 4 s V <= C  (full recomputation, one layer recomputed)
    P, L, h, V, s = 68_976_648_192, 80, 8192, 32000, 4096
    act = 2 * s * h * L + 34 * s * h + 4 * s * h + 4 * s * V
    expected = -(-16 * P // (H100 - act))
    sc = Scenario.create(lib, "llama2-70b", "h100-80g",
                         values={**BARE, "zero_stage": 3, "recompute": "full", "seq_len": s})
    r = solve(sc, "min", "dp")
    assert r.value == expected and r.next_value == expected - 1


def test_tp_respects_head_divisibility(lib):
    sc = Scenario.create(lib, "llama2-70b", "h100-80g", values={"mode": "infer", "seq_len": 4096, "micro_batch": 8})
    r = solve(sc, "min", "tp")
    assert 64 % r.value == 0 and 8 % r.value == 0
    assert r.method == "search"  # ceil(kv_heads / tp) has no closed form
    unconstrained = solve(sc, "min", "tp", divisibility=False)
    assert unconstrained.value <= r.value


def test_pow2_and_multiple_of(lib):
    sc = Scenario.create(lib, "llama2-70b", values={"n_params": 70 * 10**9, "zero_stage": 3, "capacity": 80 * 10**9})
    assert solve(sc, "min", "dp", target="model_states", step="pow2").value == 16
    assert solve(sc, "min", "dp", target="model_states", multiple_of=8).value == 16


def test_not_an_input_is_a_usage_error(lib):
    sc = Scenario.create(lib, "llama2-7b", "h100-80g")
    with pytest.raises(UsageError) as info:
        solve(sc, "max", "micro_bach")
    assert info.value.hint == "did you mean 'micro_batch'?"


models = st.fixed_dictionaries({
    "hidden_size": st.sampled_from([512, 1024, 2048, 4096, 5120, 8192]),
    "num_hidden_layers": st.integers(1, 96),
    "num_attention_heads": st.sampled_from([8, 16, 32, 64]),
    "intermediate_size": st.integers(256, 30000),
    "vocab_size": st.integers(1000, 260000),
})
options = st.fixed_dictionaries({
    "zero_stage": st.integers(0, 3), "recompute": st.sampled_from(["none", "selective", "full"]),
    "attention": st.sampled_from(["eager", "flash"]), "precision": st.sampled_from(["fp32", "bf16", "bf16_mixed"]),
    "optimizer": st.sampled_from(["adamw", "adamw_8bit", "sgd", "sgd_momentum", "adafactor"]),
    "mode": st.sampled_from(["train", "infer"]),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=models, opts=options, unknown=st.sampled_from(["micro_batch", "seq_len", "dp"]),
       cap_gib=st.integers(8, 200), other=st.integers(1, 8))
def test_answer_fits_and_next_does_not(lib, model, opts, unknown, cap_gib, other):
    values = {**model, **opts, "capacity": cap_gib * 2**30, "dp": other, "micro_batch": other, "seq_len": 1024}
    sc = Scenario.create(lib, "llama2-7b", values=values)
    direction = "min" if unknown == "dp" else "max"
    try:
        r = solve(sc, direction, unknown)
    except InfeasibleError:
        worst = 1 if direction == "max" else 2**24
        assert sc.with_values(**{unknown: worst}).evaluate("total") > cap_gib * 2**30
        return
    at = lambda x: sc.with_values(**{unknown: x}).evaluate("total")
    assert at(r.value) == r.bytes_at_value <= cap_gib * 2**30
    if r.next_value is not None:
        assert r.next_value == (r.value + 1 if direction == "max" else r.value - 1)
        assert at(r.next_value) > cap_gib * 2**30
    if r.closed_value is not None:  # the closed form agrees with the exact search
        assert r.closed_value == r.value


# ---------------------------------------------------------------- robustness (issues 12 and 18)
def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


LLAMA31_70B_PARAMS = 70_553_706_496  # Hugging Face model card


def test_closed_form_is_the_method_only_when_there_is_one(lib):
    # issue 12.4: this printed "no closed form" beside "method: closed-form" (the KV cache's
    # ceil(seq_len / 16) block count made the symbolic bound give up, though it is not in micro_batch)
    argv = ["llama3.1-70b", "--gpu", "h100-80g", "--set", "mode=infer", "--set", "tp=4", "--set", "seq_len=8192"]
    code, out, err = run("solve", "max", "micro_batch", *argv)
    assert (code, err) == (0, "")
    lines = dict(line.split(": ", 1) for line in out.splitlines()[1:3])
    assert lines["method"].startswith("closed-form")
    assert lines["closed form"].startswith("micro_batch <= ") and "no closed form" not in out
    # the bound that is printed reproduces the search, with the model card's parameter count
    sc = Scenario.create(lib, "llama3.1-70b", "h100-80g", values={"mode": "infer", "tp": 4, "seq_len": 8192})
    r = solve(sc, "max", "micro_batch")
    numbers = {"usable_memory": H100, "n_params": LLAMA31_70B_PARAMS, "seq_len": 8192}
    bound = r.bound.rhs.xreplace({s: numbers[s.name] for s in r.bound.rhs.free_symbols})
    assert r.method == "closed-form" and math.floor(bound) == r.value == r.closed_value
    at = lambda x: sc.with_values(micro_batch=x).evaluate("total")
    assert at(r.value) <= H100 < at(r.value + 1)


def test_no_closed_form_is_never_the_method(lib):
    # the search answers, and the text says there is no closed form: the two agree
    sc = Scenario.create(lib, "llama2-70b", "h100-80g", values={"mode": "infer", "seq_len": 4096, "micro_batch": 8})
    r = solve(sc, "min", "tp", divisibility=False)
    assert r.method == "search" and r.bound is None
    assert not r.closed_form.startswith("tp ")


def test_a_capacity_of_one_byte_is_infeasible():
    # issue 18: AttributeError 'int' object has no attribute 'is_Rational'; GPT-2's weights alone
    # are 124,439,808 parameters x 4 bytes (fp32 by default) > 1 byte
    code, out, err = run("solve", "max", "micro_batch", "gpt2", "--capacity", "1 B")
    assert code == 1 and out == ""
    assert err.startswith("memform: error: does not fit even at micro_batch=1: total needs ")
    assert "> usable memory 1 B;" in err


def test_multiple_of_that_no_divisor_meets_is_a_usage_error():
    # issue 18: IndexError; GPT-2's 12 heads have the divisors 1, 2, 3, 4, 6, 12: none is a multiple of 5
    code, out, err = run("solve", "max", "tp", "gpt2", "--gpu", "h100-80g", "--multiple-of", "5")
    assert code == 2 and out == ""
    assert err.startswith("memform: error: no value of 'tp' meets the constraints: tp is a multiple of 5; "
                          "tp divides num_attention_heads (12)")
    assert "hint: --no-divisibility" in err


@pytest.mark.parametrize("k", [0, -1, 2**24 + 1])
def test_multiple_of_out_of_range_is_a_usage_error(lib, k):
    sc = Scenario.create(lib, "gpt2", "h100-80g")
    with pytest.raises(UsageError, match="--multiple-of takes a whole number from 1 to 16,777,216"):
        solve(sc, "max", "micro_batch", multiple_of=k)


def test_a_target_past_the_float_range_is_still_searched(tmp_path):
    # b^50 bytes <= 10^24: 3^50 = 7.2e23 fits, 4^50 = 1.3e30 does not; at b = 2^24 the target
    # (2^1200) overflows a float, which the monotonicity check took for a turn
    rules = tmp_path / "steep.mem"
    rules.write_text('rule steep : bytes = micro_batch^50 * 1 B "a steep target"\n')
    code, out, err = run("solve", "max", "micro_batch", "gpt2", "--capacity", "1e24 B", "--target", "steep",
                         "--rules", str(rules))
    assert (code, err) == (0, "")
    assert out.startswith("max micro_batch = 3 ")


def test_a_target_too_large_to_compute_is_refused_quickly(tmp_path):
    # r2 = (micro_batch * 10^9000)^4: at micro_batch = 1 a number of about 120,000 bits
    rules = tmp_path / "big.mem"
    rules.write_text('rule r1 : count = micro_batch * 10^9000 ""\nrule r2 : count = r1^4 ""\n')
    start = time.monotonic()
    code, out, err = run("solve", "max", "micro_batch", "gpt2", "--gpu", "h100-80g", "--target", "r2",
                         "--rules", str(rules))
    assert code == 2 and out == ""
    assert "'r2' would have a value of more than 100,000 bits" in err
    assert time.monotonic() - start < 30


def test_a_chain_of_squares_is_refused_before_it_is_built(tmp_path):
    # r40 = (micro_batch + 768)^(2^39): stopped at the first rule past degree 512 (r11, 2^10)
    rules = tmp_path / "chain.mem"
    rules.write_text('rule r1 : count = micro_batch + hidden_size ""\n'
                     + "".join(f'rule r{i} : count = r{i - 1}^2 ""\n' for i in range(2, 41)))
    start = time.monotonic()
    code, out, err = run("solve", "max", "micro_batch", "gpt2", "--gpu", "h100-80g", "--target", "r40",
                         "--rules", str(rules))
    assert code == 2 and out == ""
    assert err.startswith(f"{rules}:11:6: rule 'r11' has a polynomial degree of 1,024")
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("rule, culprit", [
    ("cuda_context + sqrt(dp - 2) * 1 B", "sqrt(dp - 2)"),  # sqrt(-1) at dp = 1
    ("cuda_context + (if 1 / (dp - 1) > 2 then 1 B else 2 B)", "if 1 / (dp - 1)"),  # zoo > 2 at dp = 1
    ("cuda_context + sqrt(5 - micro_batch) * 1 B", "sqrt(5 - micro_batch)"),  # complex from micro_batch = 6
])
def test_a_rule_that_leaves_the_reals_is_a_located_error(tmp_path, rule, culprit):
    # issue 18: TypeError "Invalid comparison of non-real" from the search
    rules = tmp_path / "mine.mem"
    rules.write_text(f'override rule overhead : bytes = {rule} "mine"\n')
    code, out, err = run("solve", "max", "micro_batch", "gpt2", "--gpu", "h100-80g", "--rules", str(rules))
    assert code == 2 and out == ""
    head = err.splitlines()[0]
    assert head.startswith(f"{rules}:1:34: rule 'overhead' is not a real number")
    assert culprit in err.splitlines()[1]


def test_an_unknown_named_numpy_does_not_break_the_monotonicity_check(tmp_path):
    # lambdify put the user's symbol 'numpy' where the module was: AttributeError on 'maximum'
    rules = tmp_path / "mine.mem"
    rules.write_text('input numpy : count >= 1 = 1 "a name that is also a module"\n'
                     'rule mine : bytes = max(numpy, 2) * 1 GB "mine"\n')
    code, out, err = run("solve", "max", "numpy", "gpt2", "--gpu", "h100-80g", "--target", "mine",
                         "--rules", str(rules))
    assert (code, err) == (0, "")
    assert out.startswith("max numpy = 85 ")  # 85 GB <= 81559 MiB = 85.52 GB < 86 GB


def test_a_logarithm_in_the_target_is_not_solved_symbolically(tmp_path):
    # fuzzer (rules, seed 1204): sympy's solve combined log2(1.5) into 1.5 raised to a huge
    # power for minutes.  Bytes of 1.5 + log2(1.5) are no exact figure: the located error
    path = tmp_path / "a b.mem"
    path.write_text('override rule weights : bytes = (1.5 + log2 ( 1.5 )) * 1 B "fz"\n')
    code, out, err = run("solve", "max", "micro_batch", "gemma-7b", "--gpu", "h100-80g", "--rules", str(path),
                          "--set", "mode=infer")
    assert code == 2 and out == ""
    assert "rule 'weights' is not an exact number here" in err
    # a logarithm whose value is exact is solved by search
    path.write_text('override rule weights : bytes = (1.5 + log2 ( 4 )) * 1 B "fz"\n')
    code, out, err = run("solve", "max", "micro_batch", "gemma-7b", "--gpu", "h100-80g", "--rules", str(path),
                          "--set", "mode=infer")
    assert code == 0 and "Traceback" not in err


def test_a_target_beyond_float64_is_infeasible_not_an_overflow(tmp_path):
    # fuzzer: overhead = ((128^2 + 1)^2 + 1)^2 ... nine times: the monotonicity check's float
    # evaluation raised OverflowError, and the message printed 'inf GB'
    path = tmp_path / "fuzz.mem"
    path.write_text(squaring_chain("nf4_block_size", 10))
    code, out, err = run("solve", "max", "micro_batch", "mistral-7b", "--gpu", "h100-80g", "--rules", str(path))
    assert code == 1 and out == ""
    assert "does not fit even at micro_batch=1" in err and "the largest part is overhead (" in err
    assert "inf" not in err
