"""Hybrid models: linear-attention (Mamba2, gated DeltaNet) layers beside attention.

Parameters are held to transformers' model built on the meta device (test_hfconfig's
meta_counts), the serving state and vLLM's block arithmetic to published startup logs and to
the state sizes vLLM's shape calculators give (worked by hand in docs/research/hybrid-state.md),
the training activations to the saved tensors read from the kernels' sources
(docs/research/hybrid-activations.md).
"""
import json
from fractions import Fraction
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.library.hfconfig import read_config
from engine.compile.model import Scenario
from test_hfconfig import meta_counts

CONFIGS = Path(__file__).parent / "configs"
GiB = 2**30


def config_scenario(lib, name, **values):
    config = read_config(CONFIGS / f"{name}.json", lib)
    assert config.unknown == ()
    return Scenario.create(lib, None, values={**config.values, **values})


def variant(tmp_path, name, **changes):
    data = json.loads((CONFIGS / f"{name}.json").read_text())
    data.update(changes)
    for key in [k for k, v in changes.items() if v is ...]:
        del data[key]
    return json.dumps(data)


def counts_of(lib, text, tmp_path):
    path = tmp_path / "variant.json"
    path.write_text(text)
    s = Scenario.create(lib, None, values=read_config(path, lib).values)
    return s.evaluate("n_params"), s.evaluate("param_tensors")


# ---------------------------------------------------------------- layer kinds and parameters
def test_layer_kinds_follow_the_pattern(lib):
    pattern = json.loads((CONFIGS / "nemotron-3-nano-30b-a3b.json").read_text())["hybrid_override_pattern"]
    s = config_scenario(lib, "nemotron-3-nano-30b-a3b")
    assert s.evaluate("num_hidden_layers") == len(pattern) == 52
    assert s.evaluate("linear_attention_layers") == pattern.count("M") == 23
    assert s.evaluate("attention_layers") == pattern.count("*") == 6
    assert s.evaluate("num_moe_layers") == pattern.count("E") == 23
    assert s.evaluate("num_dense_layers") == pattern.count("-") == 0
    q = config_scenario(lib, "qwen3-next-80b-a3b-instruct")
    # full_attention_interval 4: layers 3, 7, ... 47 attend, the other 36 are gated DeltaNet layers
    assert (q.evaluate("attention_layers"), q.evaluate("linear_attention_layers")) == (12, 36)


@pytest.mark.parametrize("name, changes", [
    # Qwen3-Next: dense layers where mlp_only_layers says and between MoE layers
    ("qwen3-next-80b-a3b-instruct", {"mlp_only_layers": [0, 5], "decoder_sparse_step": 2, "num_hidden_layers": 8,
                                     "layer_types": ...}),
    ("qwen3-next-80b-a3b-instruct", {"num_hidden_layers": 6, "full_attention_interval": 3, "layer_types": ...}),
    # Nemotron-H: squared-ReLU MLP blocks, Mamba2 projections with biases (use_bias), no conv bias
    ("nemotron-3-nano-30b-a3b", {"hybrid_override_pattern": "M-M*E-", "num_hidden_layers": 6, "use_bias": True,
                                 "use_conv_bias": False}),
    # Granite 4.0-H without experts: the shared MLP is each layer's dense MLP; mamba_d_head auto
    ("granite-4.0-h-tiny", {"num_local_experts": 0, "num_hidden_layers": 4, "mamba_d_head": "auto",
                            "layer_types": ["mamba", "attention", "mamba", "mamba"], "attention_bias": True}),
    # Jamba: attention every 4th layer from the 1st, experts every other layer, the time-step rank
    # derived (auto: ceil(64 / 16)), both Mamba1 biases; and another layout, tied, without biases
    ("ai21-jamba-1.5-mini", {"hidden_size": 64, "num_hidden_layers": 8, "num_experts": 4, "attn_layer_period": 4,
                             "attn_layer_offset": 1, "mamba_d_state": 8, "mamba_dt_rank": "auto",
                             "mamba_proj_bias": True, "intermediate_size": 96, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "vocab_size": 300}),
    ("ai21-jamba-1.5-mini", {"hidden_size": 48, "num_hidden_layers": 6, "num_experts": 3, "attn_layer_period": 3,
                             "attn_layer_offset": 2, "expert_layer_period": 3, "expert_layer_offset": 0,
                             "mamba_expand": 3, "mamba_dt_rank": 5, "mamba_d_conv": 3, "mamba_conv_bias": False,
                             "tie_word_embeddings": True, "intermediate_size": 80, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "vocab_size": 200}),
    # Jamba with one expert: every layer a dense MLP
    ("ai21-jamba-1.5-mini", {"num_hidden_layers": 8, "num_experts": 1, "hidden_size": 64, "intermediate_size": 96,
                             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300}),
    # Mamba2 with projection biases and an untied head
    ("mamba2-780m", {"use_bias": True, "tie_word_embeddings": False, "num_hidden_layers": 3, "n_groups": 4}),
])
def test_variants_agree_with_transformers(lib, tmp_path, name, changes):
    text = variant(tmp_path, name, **changes)
    assert counts_of(lib, text, tmp_path) == meta_counts(text, tmp_path)


def test_nemotron_nano_9b_preset_agrees_with_transformers(lib, tmp_path):
    # NVIDIA-Nemotron-Nano-9B-v2's fields as third-party copies of its config.json give them
    # (search ids 58509742523, 52050998251; docs/research/hybrid-state.md sec. 4.1)
    config = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "vocab_size": 131072,
              "hidden_size": 4480, "intermediate_size": 15680, "num_attention_heads": 40,
              "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 80,
              "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "tie_word_embeddings": False,
              "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"}
    text = json.dumps(config)
    preset = Scenario.create(lib, "nemotron-nano-9b-v2")
    assert (preset.evaluate("n_params"), preset.evaluate("param_tensors")) == meta_counts(text, tmp_path)
    assert counts_of(lib, text, tmp_path) == meta_counts(text, tmp_path)


def test_tensor_counts_by_hand(lib):
    # Qwen3-Next: 36 DeltaNet layers (in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log, norm,
    # out_proj) and 12 attention layers (q, k, v, o, q_norm, k_norm); in each layer two norms and the
    # MoE block (stacked experts 2, router, shared expert 3 and its gate); embedding, final norm, head
    assert config_scenario(lib, "qwen3-next-80b-a3b-instruct").evaluate("param_tensors") == \
        36 * 7 + 12 * 6 + 48 * (2 + 2 + 1 + 3 + 1) + 3
    # Nemotron 3 Nano: 23 Mamba2 mixers with a conv bias (8), 6 attention (4), 23 MoE blocks (stacked
    # up and down, router and its correction bias, shared up and down: 6), one norm per block, three
    assert config_scenario(lib, "nemotron-3-nano-30b-a3b").evaluate("param_tensors") == \
        23 * 8 + 6 * 4 + 23 * 6 + 52 + 3


@pytest.mark.parametrize("name, changes, says", [
    # a list of lists (fuzz seed 1217: TypeError 'unhashable type: list' before)
    ("granite-4.0-h-tiny", {"layer_types": [["mamba"] * 40]}, "must list 'mamba'"),
    ("nemotron-3-nano-30b-a3b", {"hybrid_override_pattern": ..., "layers_block_type": [["mamba"], 1]},
     "must list 'M'"),
    ("nemotron-3-nano-30b-a3b", {"mamba_ssm_cache_dtype": ["float32"]}, "is not one of"),
    ("qwen3-next-80b-a3b-instruct", {"layer_types": [{"full_attention": 1}] * 48}, "must list 'mamba'"),
    # null where a whole number is read (fuzz seed 1219: TypeError in sympy.Integer(None) before)
    ("ai21-jamba-1.5-mini", {"num_experts": None}, "not null"),
    ("ai21-jamba-1.5-mini", {"mamba_dt_rank": None}, "not null"),
    ("ai21-jamba-1.5-mini", {"attn_layer_period": None}, "not null"),
    ("qwen3-next-80b-a3b-instruct", {"layer_types": ..., "full_attention_interval": None}, "not null"),
    ("granite-4.0-h-tiny", {"mamba_d_head": None}, "not null"),
    # a width Mamba2's reader takes from the library's defaults otherwise (fuzz seed 1263: KeyError before)
    ("mamba2-780m", {"num_hidden_layers": None}, "'num_hidden_layers' must be a whole number >= 1, not null"),
    ("mamba2-780m", {"hidden_size": None}, "'hidden_size' must be a whole number >= 1, not null"),
])
def test_malformed_layer_fields_are_located_errors(lib, tmp_path, name, changes, says):
    path = tmp_path / "config.json"
    path.write_text(variant(tmp_path, name, **changes))
    with pytest.raises(EngineError, match=says):
        read_config(path, lib)


def test_a_pattern_that_disagrees_with_the_layer_count_is_refused(lib, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(variant(tmp_path, "nemotron-3-nano-30b-a3b", num_hidden_layers=50))
    with pytest.raises(EngineError, match="not the 52 layers"):
        read_config(path, lib)
    path.write_text(variant(tmp_path, "nemotron-3-nano-30b-a3b", hybrid_override_pattern="MEX*"))
    with pytest.raises(EngineError, match="string of M"):
        read_config(path, lib)


# ---------------------------------------------------------------- the state a sequence keeps
def test_recurrent_state_per_sequence(lib):
    # vLLM v0.19 mamba2_state_shape: conv (K - 1, I + 2 G N), temporal (heads, head_dim, N);
    # Nemotron-Nano-9B-v2 in bf16: 3 x 12,288 x 2 + 128 x 80 x 128 x 2 = 2,695,168 B per layer,
    # x 27 layers = 72,769,536 B (~69.4 MiB: NVIDIA's "~70 MiB of constant Mamba state per
    # sequence", NVIDIA-AI-Blueprints/video-search-and-summarization PR 1649)
    s = Scenario.create(lib, "nemotron-nano-9b-v2", values={"mamba_ssm_dtype": "bf16", "mode": "infer"})
    assert s.evaluate("linear_state_bytes") == 2_695_168
    assert s.evaluate("stage_linear_layers") * s.evaluate("linear_state_bytes") == 72_769_536
    # with the fp32 SSM state transformers' NemotronHConfig asks by default: 5,316,608 B
    assert Scenario.create(lib, "nemotron-nano-9b-v2").evaluate("linear_state_bytes") == 5_316_608
    # gated_delta_net_state_shape, Qwen3-Next at tp 2: 3 x 8192 / 2 x 2 + 16 x 128 x 128 x 2 = 548,864
    assert Scenario.create(lib, "qwen3-next-80b-a3b", values={"tp": 2}).evaluate("linear_state_bytes") == 548_864
    # extra_groups_for_head_shards: one group over tp = 2 is laid out twice
    one_group = Scenario.create(lib, "granite-4.0-h-tiny", values={"tp": 2})
    assert one_group.evaluate("linear_state_bytes") == 3 * (3072 + 2 * 2 * 128) // 2 * 2 + 48 * 64 * 128 // 2 * 2


def test_jamba_state_and_blocks(lib):
    # vLLM v0.19 mamba1_state_shape: conv (K - 1, I / tp), temporal (I / tp, N); Jamba-1.5-Mini at
    # tp 2 in bf16: 3 x 8192 / 2 x 2 + 8192 / 2 x 16 x 2 = 155,648 bytes per layer; the attention
    # block 16 x cdiv(155,648, 16 x 2 x 4 x 128 x 2) = 80 tokens, the page padded by 5.26 %; 4
    # attention and 28 Mamba1 layers in groups of 4: 1 + 7 (docs/research/jamba-falcon-h1.md sec. 2)
    s = config_scenario(lib, "ai21-jamba-1.5-mini", tp=2, mode="infer", seq_len=131_072)
    assert s.evaluate("linear_state_bytes") == 155_648
    assert s.evaluate("vllm_block_size") == 80
    assert round(float(100 * s.evaluate("state_page_padding")), 2) == 5.26
    assert s.evaluate("kv_cache_groups") == 8
    # with the SSM state in fp32 at tp 1: 28 x (3 x 8192 x 2 + 8192 x 16 x 4) = 16,056,320 bytes
    # per sequence (a third-party test's "28 x 573,440 = 16,056,320 B", search id 60797780217)
    f = config_scenario(lib, "ai21-jamba-1.5-mini", mode="infer", mamba_ssm_dtype="fp32")
    assert f.evaluate("stage_linear_layers") * f.evaluate("linear_state_bytes") == 16_056_320
    assert f.evaluate("vllm_block_size") == 144


def test_an_inference_estimate_keeps_every_sequences_state(lib):
    s = Scenario.create(lib, "nemotron-nano-9b-v2", values={"mamba_ssm_dtype": "bf16", "mode": "infer",
                                                            "micro_batch": 3, "seq_len": 1000})
    # the 4 attention layers' K and V (2 x 8 heads x 128 x 2 B per token) in the blocks of 672
    # tokens vLLM makes for this model (1,000 tokens take 1,344), and 3 sequences' states of 72,769,536 B
    assert s.evaluate("kv_cache") == 4 * 2 * 8 * 128 * 2 * 3 * 1344 + 3 * 72_769_536


# ---------------------------------------------------------------- vLLM's blocks for a hybrid
def test_vllm_qwen3_next_reproduces_its_log(lib):
    # Qwen3-Next-80B-A3B-Instruct, vLLM 0.10.2, 2 x H200, tp 2, max_model_len 262144 (search index
    # id 7292846353; docs/research/hybrid-state.md sec. 3, row A):
    #   "Setting attention block size to 544 tokens ..." / "Padding mamba page size by 1.49% ..."
    #   "Available KV cache memory: 44.59 GiB" / "GPU KV cache size: 973,760 tokens"
    #   "Maximum concurrency for 262,144 tokens per request: 14.77x"
    s = config_scenario(lib, "qwen3-next-80b-a3b-instruct", tp=2, mode="infer", seq_len=262_144)
    # "Model loading took 74.2812 GiB": half of the 79,674,391,296 parameters in bf16, the routers
    # and norms whole on both ranks, the rotary table a quarter of a head wide (partial_rotary_factor
    # 0.25); 74.28097 GiB, 0.25 MB short of the log
    assert abs(s.evaluate("model_memory") / GiB - Fraction(742812, 10000)) < Fraction(5, 10000)
    assert s.evaluate("vllm_block_size") == 544
    assert round(float(100 * s.evaluate("state_page_padding")), 2) == 1.49
    assert s.evaluate("kv_page_bytes") == 544 * 2 * 1 * 256 * 2  # one KV head per rank, bf16
    assert s.evaluate("kv_cache_groups") == 4  # 12 attention layers, 36 DeltaNet layers in 3 groups
    block = s.evaluate("kv_block_bytes")
    # vLLM's arithmetic on the logged memory: blocks = memory // page // group size; tokens per
    # group share; concurrency = blocks / blocks a request takes
    for logged in (Fraction(4459, 100), Fraction(44594, 1000)):  # the logged 44.59 GiB
        blocks = int(logged * GiB // block)
        assert blocks // s.evaluate("kv_cache_groups") * s.evaluate("vllm_block_size") == 973_760
        assert round(blocks / int(s.evaluate("request_blocks")), 2) == 14.77


@pytest.mark.parametrize("preset, values, block, padding", [
    # Nemotron 3 Nano 30B-A3B with an fp8 KV cache and the fp32 SSM state its config asks:
    # "Setting attention block size to 4176 tokens" / "Padding mamba page size by 0.19%" (vLLM
    # 0.19.0, Nemotron-Cascade-2-30B-A3B-NVFP4, search id 51961570119; and "4176 tokens" for
    # NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4, id 56927173227)
    ("nemotron-3-nano-30b-a3b", {"kv_dtype": "fp8_e4m3"}, 4176, 0.19),
    # Nemotron-Nano-9B-v2 with its SSM state in 16 bits: "672 tokens for
    # nvidia/NVIDIA-Nemotron-Nano-9B-v2" (https://github.com/vllm-project/vllm/issues/24280)
    ("nemotron-nano-9b-v2", {"mamba_ssm_dtype": "bf16"}, 672, None),
])
def test_vllm_attention_block_size(lib, preset, values, block, padding):
    s = Scenario.create(lib, preset, values={"mode": "infer", **values})
    assert s.evaluate("vllm_block_size") == block
    if padding is not None:
        assert round(float(100 * s.evaluate("state_page_padding")), 2) == padding


def test_vllm_groups_and_request_blocks(lib):
    # Nemotron-Nano-9B-v2: 4 attention and 27 Mamba2 layers: groups of 4, 1 + 7 groups; a request
    # of 131072 tokens takes 196 blocks of 672 in the attention group and one state in each of 7
    s = Scenario.create(lib, "nemotron-nano-9b-v2", values={"mamba_ssm_dtype": "bf16", "mode": "infer",
                                                            "seq_len": 131_072})
    assert (s.evaluate("kv_group_size"), s.evaluate("kv_cache_groups")) == (4, 8)
    assert s.evaluate("request_blocks") == 196 + 7
    # a model without attention: one state per request, a block of max_model_len tokens
    m = Scenario.create(lib, "mamba2-780m", values={"mode": "infer", "seq_len": 2048})
    assert (m.evaluate("vllm_block_size"), m.evaluate("request_blocks")) == (2048, 1)
    assert m.evaluate("kv_block_bytes") == 48 * (3 * (3072 + 2 * 128) * 2 + 48 * 64 * 128 * 2)


def test_vllm_starts_when_one_request_fits_its_layers(lib):
    # vLLM 0.19's start-up check (v1/core/kv_cache_utils.py check_enough_kv_cache_memory) sums
    # every layer's max_memory_usage_bytes: a full-attention layer cdiv(max_model_len, block)
    # pages, a Mamba layer one (padded) page.  Granite 4.0 H Small on an H100 at 131,072 tokens:
    # 4 attention layers of 8 KV heads x 128 x 2 (K, V) x 2 bytes = 4,096 bytes per token, a
    # 528-token block ('Setting attention block size to 528 tokens', the ROCm log in
    # docs/research/hybrid-logs.md sec. E): a page of 528 x 4,096 bytes; 36 Mamba layers
    from engine.answers.serve import serve
    page = 528 * 4096
    needed = (4 * -(-131_072 // 528) + 36) * page
    result = serve(Scenario.create(lib, "granite-4.0-h-small", "h100-80g"), engine="vllm", formulas=False)
    r = result.rules
    assert (r["vllm_block_size"], r["one_request_kv_bytes"]) == (528, needed)
    # the KV memory holds one request although 'GPU KV cache size' (the blocks shared out over
    # 10 groups) is below max_model_len: vLLM starts
    assert r["kv_cache_memory"] >= needed and r["kv_cache_tokens"] < 131_072
    assert result.fits
    # a dense model: the same check as the token count
    dense = serve(Scenario.create(lib, "llama3.1-8b", "l4", values={"seq_len": 131_072}), engine="vllm", formulas=False)
    assert dense.fits == (dense.rules["kv_cache_tokens"] >= 131_072)


def test_falcon_h1_attends_and_keeps_a_state_in_every_layer(lib):
    # vLLM 0.19 model_executor/models/falcon_h1.py registers each layer's attention at index i and
    # its Mamba2 mixer at L + i: 44 attention and 44 state layers, one group of each
    # (docs/research/jamba-falcon-h1.md sec. 3.3).  Falcon-H1-7B in bf16 at tp 1: the state page
    # is the convolution's (K - 1) x (I + 2 G N) = 3 x 3,584 and the SSM's 24 x 128 x 256, 2 bytes
    # each; an attention token is 2 KV heads x 128 x 2 (K, V) x 2 bytes
    s = Scenario.create(lib, "falcon-h1-7b", "h100-80g", values={"mode": "infer", "seq_len": 131_072})
    state = (3 * 3584 + 24 * 128 * 256) * 2
    assert (s.evaluate("linear_state_bytes"), s.evaluate("kv_layer_token_bytes")) == (1_594_368, 1024)
    assert s.evaluate("vllm_block_size") == 16 * -(-state // (16 * 1024)) == 1568
    assert (s.evaluate("kv_layers_per_stage"), s.evaluate("stage_linear_layers"), s.evaluate("kv_cache_groups")) == (44, 44, 2)
    assert s.evaluate("request_blocks") == -(-131_072 // 1568) + 1


def test_sglang_gives_the_states_a_pool_of_their_own(lib):
    # SGLang 0.5.8 (docs/research/hybrid-state.md sec. 2.4): mamba_cache_per_req = the rank's
    # linear layers x (conv numel x 2 (bf16) + SSM numel x 4 (float32 by default)); Qwen3-Next at
    # tp 2: 36 x (3 x 8192 / 2 x 2 + 32 / 2 x 128 x 128 x 4) = 38,633,472 bytes; the pool gets
    # 0.9 / 1.9 of the budget after the weights in whole requests' states, the KV pool the rest in
    # cells of the 12 attention layers' K and V (12 x 2 x 1 x 256 x 2 bytes per token)
    from engine.answers.serve import serve
    s = Scenario.create(lib, "qwen3-next-80b-a3b", "h200-141g", values={"tp": 2, "sglang_version": "508"})
    r = serve(s, engine="sglang", formulas=False).rules
    assert r["sglang_state_per_request"] == 38_633_472
    rest = r["sglang_rest_memory"]
    states = int(rest * Fraction(9, 19) // 38_633_472)
    assert r["max_mamba_cache_size"] == states
    assert r["max_total_num_tokens"] == int((rest - states * 38_633_472) // (12 * 2 * 256 * 2))
    # running requests: at most a third of the states (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO)
    assert r["sglang_max_concurrency"] == min(r["max_total_num_tokens"] / 262_144, states // 3)
    # from 0.5.17 the pool's padding slot is charged (kv_cache_configurator.py: max_mamba_cache_size
    # = (budget - per_slot) // per_slot, the pool (max_mamba_cache_size + 1) x per_slot)
    new = serve(s.with_values(sglang_version="517"), engine="sglang", formulas=False).rules
    rest = new["sglang_rest_memory"]
    states = int((rest * Fraction(9, 19) - 38_633_472) // 38_633_472)
    assert new["max_mamba_cache_size"] == states
    assert new["max_total_num_tokens"] == int((rest - (states + 1) * 38_633_472) // (12 * 2 * 256 * 2))


def test_engines_without_a_hybrid_model_refuse_one(tmp_path):
    from engine.cli import main
    assert main(["serve", "qwen3-next-80b-a3b", "--engine", "trtllm", "--gpu", "h200-141g"]) == 2
    assert main(["serve", "mamba2-780m", "--engine", "sglang", "--gpu", "l4"]) == 2


# ---------------------------------------------------------------- training activations
def test_linear_mixer_saved_tensors(lib):
    # docs/research/hybrid-activations.md sec. 5, per token per layer in bf16, with the block's
    # pre-norm: Qwen3-Next's DeltaNet 2H + 8Kd + 22Vd + 8Nk + 18Nv + 2 x 64 Nv, and 8H + 4 for its
    # norm (H 2048, Kd 2048, Vd 4096, Nk 16, Nv 32)
    q = config_scenario(lib, "qwen3-next-80b-a3b-instruct", precision="bf16", stack="hf", seq_len=1)
    H, Kd, Vd, Nk, Nv = 2048, 2048, 4096, 16, 32
    assert q.evaluate("architecture_linear_mixer") == 2 * H + 8 * Kd + 22 * Vd + 8 * Nk + 18 * Nv + 128 * Nv + 8 * H + 4
    # mamba_ssm's fused Mamba2: 2H + 6I + 4GN + 2Hh + 4G, and 8H + 4 for NemotronH's norm (H 2688,
    # I 4096, G 8, N 128, Hh 64)
    n = config_scenario(lib, "nemotron-3-nano-30b-a3b", precision="bf16", stack="hf", seq_len=1)
    H, I, G, N, Hh = 2688, 4096, 8, 128, 64
    assert n.evaluate("architecture_linear_mixer") == 2 * H + 6 * I + 4 * G * N + 2 * Hh + 4 * G + 8 * H + 4
    # Jamba's Mamba1 (sec. 6): 2H + 16I + 8R + 16N + 12 per token and 6H + 4 for its norm; per 2048-token
    # chunk of a sequence 8 I N; once per layer 8 I N + 8 I (H 4096, I 8192, R 256, N 16)
    j = config_scenario(lib, "ai21-jamba-1.5-mini", precision="bf16", stack="hf", seq_len=4096, micro_batch=3)
    H, I, R, N = 4096, 8192, 256, 16
    per_token = 2 * H + 16 * I + 8 * R + 16 * N + 12 + 6 * H + 4
    assert per_token == 166_160
    assert j.evaluate("architecture_linear_mixer") == 3 * 4096 * per_token + 3 * 2 * 8 * I * N + 8 * I * N + 8 * I
