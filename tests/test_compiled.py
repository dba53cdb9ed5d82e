"""The compiled (vectorised) path agrees with the exact symbolic path."""
import numpy as np
import pytest

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
