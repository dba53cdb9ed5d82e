"""plan: its arguments are bounded with clear errors, capacities stay exact, and a rule that
leaves the real numbers in some layout is a located error (issue 18)."""
import io

import pytest

from engine.cli import main
from engine.errors import UsageError
from engine.compile.model import Scenario
from engine.answers.plan import exact, plan, validate_plan_args


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("gpus", [str(10**30), str(2**64), str(2**24 + 1), "0", "-8"])
def test_gpus_out_of_range_is_a_usage_error(gpus):
    code, out, err = run("plan", "gpt2", "--gpu", "h100-80g", "--gpus", gpus)
    assert code == 2 and out == ""
    assert err == f"memform: error: --gpus takes a whole number from 1 to 16,777,216, not {gpus}\n"


@pytest.mark.parametrize("flag, value", [("--top", "-3"), ("--top", "0"),
                                         ("--max-micro-batch", "0"), ("--max-micro-batch", "-1"),
                                         ("--max-micro-batch", str(2**16 + 1))])
def test_top_and_micro_batch_limit_out_of_range_are_usage_errors(flag, value):
    # --top -3 listed all rows but the last three; --top 0 printed an empty table
    code, out, err = run("plan", "gpt2", "--gpu", "h100-80g", "--gpus", "8", flag, value)
    assert code == 2 and out == ""
    assert err.startswith(f"memform: error: {flag} takes a whole number from 1")
    assert err.endswith(f", not {value}\n")


@pytest.mark.parametrize("args", [(0, 1, 1), (8, -3, 1), (8, 0, 1), (8, 1, 0), (8, 1, -1), (2**64, 1, 1),
                                  (8, True, 1), (8.0, 1, 1)])
def test_validate_plan_args(args):
    with pytest.raises(UsageError):
        validate_plan_args(*args)


def test_validate_plan_args_accepts_the_bounds():
    validate_plan_args(1, 1, 1)
    validate_plan_args(2**24, 10**30, 2**16)


def test_the_largest_gpu_count_is_laid_out(lib):
    # 2^24 GPUs: every layout uses them all (tp x pp x dp = 2^24)
    rows = plan(Scenario.create(lib, "gpt2", "h100-80g"), 2**24)
    assert rows and all(r.tp * r.pp * r.dp == 2**24 for r in rows)


def test_capacity_stays_exact(lib):
    # 10^29 + 1 bytes is not a float (the nearest is 99999999999999991433150857216)
    capacity = 10**29 + 1
    s = Scenario.create(lib, "gpt2", values={"capacity": capacity})
    rows = plan(s, 8)
    assert rows[0].capacity == capacity
    shown = exact(s, rows[0])
    assert shown.capacity == capacity and shown.headroom == capacity - shown.total


def test_a_rule_that_leaves_the_reals_in_some_layout_is_a_located_error(tmp_path):
    # sqrt(dp - 2) is sqrt(-1) in the layouts of 8 GPUs with dp = 1; the sweep dropped them silently
    rules = tmp_path / "mine.mem"
    rules.write_text('override rule overhead : bytes = cuda_context + sqrt(dp - 2) * 1 B "mine"\n')
    code, out, err = run("plan", "gpt2", "--gpu", "h100-80g", "--gpus", "8", "--rules", str(rules))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"{rules}:1:34: rule 'overhead' is not a real number here: its value is 536870912 + I"
    assert "in the layout tp=" in lines[-1] and " dp=1 " in lines[-1]


def test_a_stack_that_fixes_the_sharding_is_planned_once(lib):
    # fully_shard is ZeRO-3's sharding whatever zero_stage says: one row per layout, shown as 3
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={"stack": "fsdp2"})
    layouts = plan(s, 8)
    assert layouts and {row.zero_stage for row in layouts} == {3}
    assert len({(r.tp, r.pp, r.recompute) for r in layouts}) == len(layouts)
    generic = plan(Scenario.create(lib, "llama3.1-8b", "h100-80g"), 8)
    assert {row.zero_stage for row in generic} == {0, 1, 2, 3}
