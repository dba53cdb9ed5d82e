"""Parameter counts of the presets against published figures (not memform's own output)."""
import pytest

from engine.model import Scenario

# Hugging Face model cards / safetensors metadata and the papers' architecture tables.
PUBLISHED = {
    "llama1-7b": 6_738_415_616,
    "llama1-13b": 13_015_864_320,
    "llama1-65b": 65_285_660_672,
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "gpt3-175b": 174_604_259_328,  # tied embedding + 2048 learned positions + biases (seed LIT-06)
}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_exact_parameter_count(lib, model):
    assert Scenario.create(lib, model).evaluate("n_params") == PUBLISHED[model]


@pytest.mark.parametrize("model, L, d, V", [("llama1-7b", 32, 4096, 32000), ("gpt3-175b", 96, 12288, 50257)])
def test_rough_count_is_12_L_d2_plus_2_V_d(lib, model, L, d, V):
    assert Scenario.create(lib, model).evaluate("n_params_approx") == 12 * L * d * d + 2 * V * d


def test_gqa_shrinks_only_k_and_v(lib):
    s = Scenario.create(lib, "llama2-70b")
    d, kv = 8192, 8 * 128
    assert s.evaluate("attention_params") == 2 * d * d + 2 * d * kv  # Wq, Wo full; Wk, Wv d x (8 * 128)
    assert s.with_values(num_key_value_heads=64).evaluate("attention_params") == 4 * d * d


def test_pipeline_stage_holds_its_layers_and_the_larger_end(lib):
    # Llama-2-7B, pp=4: 8 layers per stage; the first stage has the embedding, the last the
    # head and final norm (untied: V*d + d > V*d), so the busiest stage is the last
    L, d, V, ff = 32, 4096, 32000, 11008
    layer = 4 * d * d + 3 * d * ff + 2 * d
    s = Scenario.create(lib, "llama2-7b", values={"pp": 4})
    assert s.evaluate("params_per_gpu") == 8 * layer + V * d + d
