"""Parameter counts of the presets against published figures (not memform's own output)."""
from fractions import Fraction

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
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "gemma-7b": 8_537_680_896,
    "gpt2": 124_439_808,
    "deepseek-v3": 671_026_419_200,  # technical report: 671B total (MTP module excluded)
    "qwen3-8b": 8_190_735_360,  # Hub safetensors total (model card: 8.2B)
    "qwen3-30b-a3b": 30_532_122_624,  # llama.cpp n_params of the GGUF (model card: 30.5B)
    "gemma2-9b": 9_241_705_984,  # keras-hub gemma2_9b_en "params"; Hub safetensors total
    "phi3-mini-4k": 3_821_079_552,  # keras-hub phi3_mini_4k_instruct_en "params"
}

ACTIVE = {  # parameters a token passes through
    "deepseek-v3": 37_552_297_472,  # technical report: 37B activated
    # counted by hand: 32 x (41,943,040 attention + 2 x 176,160,768 experts + 32,768 router
    # + 8,192 norms) + 2 x 131,072,000 embeddings + 4,096 final norm (model card: 12.9B active)
    "mixtral-8x7b": 12_879_925_248,
    # model card: 3.3B activated; 48 x (18,874,368 attention + 8 x 4,718,592 experts + 262,144
    # router + 4,352 norms) + 2 x 311,164,928 embeddings + 2,048 final norm
    "qwen3-30b-a3b": 3_353_032_704,
}


@pytest.mark.parametrize("model", sorted(ACTIVE))
def test_active_parameter_count(lib, model):
    assert Scenario.create(lib, model).evaluate("n_params_active") == ACTIVE[model]


def test_every_model_preset_has_a_published_count(lib):
    assert {name for kind, name in lib.presets if kind == "model"} == set(PUBLISHED)


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


def test_zero_shards_expert_states_over_their_own_data_parallel_ranks(lib):
    """Mixtral 8x7B, ep = 8 inside dp = 64, ZeRO-1, mixed-precision AdamW (16 B per parameter).
    Each GPU holds the dense part D and one of 8 experts per layer (E / 8) in bf16 weights and
    gradients; the 12 B of master copy and Adam moments are sharded over the 64 ranks for D,
    and for E / 8 over the 64 / 8 = 8 ranks that hold the same experts (DeepSpeed-MoE's
    expert data-parallel group), i.e. 12 (D + E) / 64."""
    experts = 32 * 8 * 3 * 4096 * 14336  # layers x experts x (gate, up, down) x hidden x inner
    dense = PUBLISHED["mixtral-8x7b"] - experts
    assert experts == 45_097_156_608
    s = Scenario.create(lib, "mixtral-8x7b", values={"dp": 64, "ep": 8, "zero_stage": 1,
                                                     "optimizer_step_bytes": 0})
    held = dense + experts // 8
    assert s.evaluate("weights") == 2 * held
    assert s.evaluate("grads") == 2 * held
    assert s.evaluate("master") + s.evaluate("optimizer_states") == 12 * (dense + experts) // 64
    assert s.evaluate("model_states") == 4 * held + 12 * (dense + experts) // 64


def test_expert_groups_with_tensor_parallel_attention_and_whole_experts(lib):
    """Mixtral 8x7B with tp = 2 for the dense parts, experts whole (etp = 1) over ep = 8, dp = 8,
    ZeRO-1. Megatron-Core groups the 2 x 8 ranks of a stage into 8 expert shards with
    16 / 8 = 2 replicas each, so expert states are sharded 2 ways; DeepSpeed-MoE groups dp
    alone (8 / 8 = 1 replica): expert states are not sharded. Dense states: over tp, then dp."""
    experts = 32 * 8 * 3 * 4096 * 14336
    dense = PUBLISHED["mixtral-8x7b"] - experts
    base = {"tp": 2, "dp": 8, "ep": 8, "etp": 1, "zero_stage": 1, "optimizer_step_bytes": 0}
    for layout, expert_replicas in (("megatron", 2), ("deepspeed", 1)):
        s = Scenario.create(lib, "mixtral-8x7b", values={**base, "expert_groups": layout})
        states = s.evaluate("master") + s.evaluate("optimizer_states")
        assert states == 12 * (Fraction(dense, 2 * 8) + Fraction(experts, 8 * expert_replicas)), layout
        assert s.evaluate("weights") == 2 * (Fraction(dense, 2) + Fraction(experts, 8))


def test_zero_shards_over_data_and_context_parallel_ranks(lib):
    """Llama-2-7B on dp = 2 x cp = 4 ranks with ZeRO-1: the 8 ranks hold the same weights (each
    a quarter of every sequence), and Megatron's distributed optimizer shards the 12 bytes per
    parameter of master copy and Adam moments over all 8."""
    p = PUBLISHED["llama2-7b"]
    s = Scenario.create(lib, "llama2-7b", values={"dp": 2, "cp": 4, "zero_stage": 1, "optimizer_step_bytes": 0})
    assert s.evaluate("master") + s.evaluate("optimizer_states") == 12 * p // 8
    assert s.evaluate("weights") == s.evaluate("grads") == 2 * p
