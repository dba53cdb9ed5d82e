"""The solver: seed questions, hand-computed answers from the papers' formulas, and
hypothesis properties (the answer fits, the next value does not, the closed form agrees)."""
import io
import math

import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.cli import main
from engine.errors import InfeasibleError, UsageError
from engine.model import Scenario
from engine.solve import solve

H100 = 81559 * 2**20  # nvidia-smi memory.total of an H100 SXM5 80GB
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
