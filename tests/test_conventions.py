"""Conventions (formulas/conventions.mem): other tools' accounting, reproduced exactly.

Every expected figure is computed here from the tool's *published* formula, transcribed
line by line with plain ``int`` / ``fractions.Fraction`` (the tools use floats; exact
arithmetic gives the value their float arithmetic approximates, and ``int()`` truncation is
written as ``//`` or ``math.floor``).  Architecture numbers are the models' published
configs and parameter counts, written out here, never read from memform.

Sources (quoted in the comments beside each transcription):

- ZeRO: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", sec. 3.1 (2 + 2 + K bytes per parameter, K = 12) and fig. 1.
- Megatron-LM: ``megatron/training/theoretical_memory_usage.py`` (NVIDIA/Megatron-LM,
  commit 00caa53a), and ``megatron/training/tokenizer/tokenizer.py``
  ``_vocab_size_with_padding`` (``--make-vocab-size-divisible-by`` defaults to 128).
- DeepSpeed: ``deepspeed/runtime/zero/stage_1_and_2.py`` ``estimate_zero2_model_states_mem_needs``
  (microsoft/DeepSpeed, commit 022f2236) and ``deepspeed/runtime/zero/stage3.py``
  ``estimate_zero3_model_states_mem_needs`` (commit 0003660d).
- Transformer Math 101: Anthony, Biderman and Schoelkopf 2023, EleutherAI blog
  (blog.eleuther.ai/transformer-math), sections "Model Parameters", "Optimizer States",
  "Gradients", "Activations and Batch Size", "Total Training Memory", "Sharded Optimizers",
  "3D Parallelism" and "Total Inference Memory".
"""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
import sympy

from engine.compile.model import Scenario

# published parameter counts (Touvron et al. 2023b, table 1 / the HF checkpoints; the same
# figures as seed-cases LIT-06)
LLAMA2_7B = 6_738_415_616
LLAMA2_70B = 68_976_648_192

# published configs (config.json of the checkpoints; GPT-3: Brown et al. 2020, table 2.1)
LLAMA2_7B_CFG = dict(h=4096, L=32, heads=32, groups=32, ffn=11008, V=32000)
LLAMA2_70B_CFG = dict(h=8192, L=80, heads=64, groups=8, ffn=28672, V=32000)
GPT3_CFG = dict(h=12288, L=96, heads=96, groups=96, ffn=49152, V=50257)
MIXTRAL_CFG = dict(h=4096, L=32, heads=32, groups=8, ffn=14336, V=32000)


def ev(lib, model, rule, **values):
    """memform's exact value of ``rule`` on a model preset with ``values`` set (as --set)."""
    return Scenario.create(lib, model, values=values).evaluate(rule)


def per_parameter(lib) -> dict:
    """Values that reduce memform's model states to per-parameter accounting, as the ZeRO
    paper, Megatron and DeepSpeed count: memform may also count optimizer state kept per
    parameter *tensor* (PyTorch AdamW's fp32 step, input optimizer_step_bytes), which no
    per-parameter formula has."""
    return {"optimizer_step_bytes": 0} if "optimizer_step_bytes" in lib.inputs else {}


def exact(x) -> sympy.Rational:
    x = Fraction(x)
    return sympy.Rational(x.numerator, x.denominator)


# ============================================================================ ZeRO paper
def zero_paper(psi, n, stage):
    """Rajbhandari et al. 2020, fig. 1: baseline (2 + 2 + K) Psi, P_os 2Psi + 2Psi + K Psi / Nd,
    P_os+g 2Psi + (2 + K) Psi / Nd, P_os+g+p (2 + 2 + K) Psi / Nd, with K = 12."""
    K = 12
    return {0: (2 + 2 + K) * psi,
            1: 2 * psi + 2 * psi + Fraction(K * psi, n),
            2: 2 * psi + Fraction((2 + K) * psi, n),
            3: Fraction((2 + 2 + K) * psi, n)}[stage]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_paper_llama2_7b_dp8(lib, stage):
    got = ev(lib, "llama2-7b", "convention_total", convention="zero_paper", dp=8, zero_stage=stage)
    assert got == exact(zero_paper(LLAMA2_7B, 8, stage))


def test_zero_paper_reproduces_the_papers_own_example(lib):
    # the paper's fig. 1 example: Psi = 7.5B, Nd = 64 -> 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
    printed = {0: 120e9, 1: 31.4e9, 2: 16.6e9, 3: 1.9e9}
    for stage in range(4):
        got = ev(lib, "llama2-70b", "zero_paper_model_states", n_params=7_500_000_000, dp=64, zero_stage=stage)
        assert got == exact(zero_paper(7_500_000_000, 64, stage))
        assert abs(float(got) - printed[stage]) <= 0.05e9  # the paper prints one decimal


def test_zero_paper_with_tensor_parallelism_and_any_optimizer(lib):
    # Psi is the model-parallel partition (Psi / t); the paper's K = 12 whatever the optimizer
    psi = Fraction(LLAMA2_70B, 4)
    for opt in ("adamw", "sgd", "adamw_8bit"):
        got = ev(lib, "llama2-70b", "zero_paper_model_states", tp=4, dp=16, zero_stage=2, optimizer=opt)
        assert got == exact(zero_paper(psi, 16, 2))


@pytest.mark.parametrize("model", ["llama2-7b", "llama2-70b", "gpt3-175b", "qwen2.5-7b"])
@pytest.mark.parametrize("values", [
    {"zero_stage": 0},
    {"zero_stage": 1, "dp": 8},
    {"zero_stage": 2, "dp": 16, "precision": "fp16_mixed"},
    {"zero_stage": 3, "dp": 64},
])
def test_zero_paper_equals_memform_model_states_for_mixed_precision_adamw(lib, model, values):
    # both are the ZeRO paper's 2 + 2 + 12 accounting for full mixed-precision AdamW
    s = Scenario.create(lib, model, values={"optimizer": "adamw", **per_parameter(lib), **values})
    assert s.evaluate("zero_paper_model_states") == s.evaluate("model_states")


def test_zero_paper_splits_what_tensor_parallel_ranks_keep_whole(lib):
    # The paper's Psi is the model-parallel partition, every parameter split over t; Megatron keeps
    # Llama-2-7B's 65 RMSNorm weights of 4096 whole on each of t = 2 ranks (TENorm;
    # docs/research/tp-replicated.md), so memform counts half of them again: 16 / 64 bytes each
    # under ZeRO-3 over 64 ranks
    s = Scenario.create(lib, "llama2-7b", values={"optimizer": "adamw", **per_parameter(lib),
                                                  "zero_stage": 3, "dp": 64, "tp": 2})
    assert s.evaluate("model_states") - s.evaluate("zero_paper_model_states") == 65 * 4096 // 2 * 16 // 64


def test_zero_paper_differs_from_memform_where_memform_counts_more_or_less(lib):
    for values in ({"optimizer": "adamw_8bit"}, {"precision": "bf16"}, {"grad_dtype": "fp32"},
                   {"finetune": "lora"}, {"pp": 4}):
        s = Scenario.create(lib, "llama2-7b", values=values)
        assert s.evaluate("zero_paper_model_states") != s.evaluate("model_states"), values


# ============================================================================ Megatron-LM
def megatron_padded_vocab(V, tp, divisible_by=128):
    # tokenizer.py _vocab_size_with_padding:
    #   multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    #   after = int(math.ceil(after / multiple) * multiple)
    multiple = divisible_by * tp
    return -(-V // multiple) * multiple


def megatron_weight_and_optimizer(*, h, L, heads, groups, ffn, V, swiglu, rmsnorm, untied,
                                  tp, pp, dp, distributed_optimizer, kv_channels=None,
                                  num_experts=None, moe_ffn=0, shared_ffn=0, num_moe_layers=0,
                                  mla=None):
    """theoretical_memory_usage.py, compute_weight_and_optimizer_memory, line by line."""
    kv_channels = kv_channels or h // heads
    query_projection_size = kv_channels * heads
    query_projection_to_hidden_size_ratio = Fraction(query_projection_size, h)
    n_experts = 1 if num_experts is None else num_experts
    gated_linear_multiplier = Fraction(3, 2) if swiglu else 1
    num_dense_layers = L - num_moe_layers
    norm_size = 1 if rmsnorm else 2
    if mla is not None:
        q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim = mla
        if q_lora_rank is None:
            q_term = h * heads * (qk_head_dim + qk_pos_emb_head_dim)
        else:
            q_term = q_lora_rank * (h + heads * (qk_head_dim + qk_pos_emb_head_dim) + norm_size)
        self_attn_term = (q_term
                          + kv_lora_rank * (h + heads * (qk_head_dim + v_head_dim) + norm_size)
                          + h * qk_pos_emb_head_dim
                          + (heads * v_head_dim) * h)
    else:
        self_attn_term = 2 * h * h * ((1 + Fraction(groups, heads)) * query_projection_to_hidden_size_ratio)
    dense = 2 * h * (ffn * gated_linear_multiplier + norm_size) + self_attn_term
    moe = 2 * h * (moe_ffn * n_experts * gated_linear_multiplier + shared_ffn * gated_linear_multiplier
                   + norm_size) + self_attn_term
    embedding_size = h * megatron_padded_vocab(V, tp)
    final_layernorm = norm_size * h
    block = dense * num_dense_layers + moe * num_moe_layers + final_layernorm
    shard = (Fraction(block, pp) + embedding_size) / tp
    if untied and pp == 1:
        shard += Fraction(embedding_size, tp)
    num_bytes_per_parameter = 18 if not distributed_optimizer else 6 + Fraction(12, dp)
    total = block + (2 if untied else 1) * embedding_size
    return shard * num_bytes_per_parameter, total


def megatron_pipeline_factor(pp, vp, num_microbatches):
    # "Multiply by interleaved PP memory factor" / "non-interleaved ... discount accordingly"
    if vp is not None:
        return 1 + Fraction(pp - 1, pp * vp)
    if pp > 1:
        return min(1, Fraction(num_microbatches, pp))
    return 1


def megatron_activation_with_sp(*, s, b, h, ffn, L, V, tp, pp, vp=None, num_microbatches=None):
    """compute_activation_memory (SP + selective recomputation, Korthikanti table 2)."""
    act = (s * b * h) * (18 + 4 * Fraction(ffn, h))
    act *= L
    act += 8 * s * b * pp          # input to embedding
    act += s * b * h * pp          # dropout in embedding layer
    act *= megatron_pipeline_factor(pp, vp, pp if num_microbatches is None else num_microbatches)
    if pp == 1:
        act += s * b * h * 4 * (1 + Fraction(megatron_padded_vocab(V, tp), h))
    return act / tp


def megatron_activation_without_sp(*, s, b, h, L, V, tp, pp, vp=None, num_microbatches=None):
    """compute_activation_memory_without_sp."""
    per_layer = s * b * h * (10 + Fraction(24, tp))
    total = per_layer * L
    total += 8 * s * b * pp
    total += s * b * h * pp
    total *= megatron_pipeline_factor(pp, vp, pp if num_microbatches is None else num_microbatches)
    if pp == 1:
        logits_size = Fraction(s * b * megatron_padded_vocab(V, tp), tp)
        final_ln_output = s * b * h
        total += (logits_size + final_ln_output) * 2
    return total * Fraction(105, 100)  # overhead_factor = 1.05


def test_megatron_parameter_count_is_the_published_llama2_7b_count(lib):
    # Megatron's count at tp = 1 (32000 is already a multiple of 128) is the published one
    _, total = megatron_weight_and_optimizer(**LLAMA2_7B_CFG, swiglu=True, rmsnorm=True, untied=True,
                                             tp=1, pp=1, dp=1, distributed_optimizer=False)
    assert total == LLAMA2_7B
    assert ev(lib, "llama2-7b", "megatron_params") == LLAMA2_7B


def test_megatron_llama2_7b_dp8_without_sp(lib):
    values = dict(convention="megatron", dp=8, micro_batch=2, seq_len=4096)
    wo, _ = megatron_weight_and_optimizer(**LLAMA2_7B_CFG, swiglu=True, rmsnorm=True, untied=True,
                                          tp=1, pp=1, dp=8, distributed_optimizer=False)
    act = megatron_activation_without_sp(s=4096, b=2, h=4096, L=32, V=32000, tp=1, pp=1)
    assert wo == 18 * LLAMA2_7B
    assert ev(lib, "llama2-7b", "megatron_weight_and_optimizer", **values) == exact(wo)
    assert ev(lib, "llama2-7b", "megatron_activations", **values) == exact(act)
    assert ev(lib, "llama2-7b", "convention_total", **values) == exact(wo + act)


def test_megatron_llama2_70b_tp8_sequence_parallel_selective_distributed_optimizer(lib):
    # SP path: sequence_parallel and recompute_granularity == 'selective'; 32000 pads to 32768 at tp = 8
    values = dict(convention="megatron", tp=8, dp=4, zero_stage=1, sequence_parallel="true",
                  recompute="selective", micro_batch=1, seq_len=4096)
    wo, _ = megatron_weight_and_optimizer(**LLAMA2_70B_CFG, swiglu=True, rmsnorm=True, untied=True,
                                          tp=8, pp=1, dp=4, distributed_optimizer=True)
    act = megatron_activation_with_sp(s=4096, b=1, h=8192, ffn=28672, L=80, V=32000, tp=8, pp=1)
    assert megatron_padded_vocab(32000, 8) == 32768
    assert ev(lib, "llama2-70b", "megatron_padded_vocab_size", tp=8) == 32768
    assert ev(lib, "llama2-70b", "megatron_weight_and_optimizer", **values) == exact(wo)
    assert ev(lib, "llama2-70b", "megatron_activations", **values) == exact(act)
    assert ev(lib, "llama2-70b", "convention_total", **values) == exact(wo + act)


def test_megatron_takes_the_path_without_sp_unless_sp_and_selective(lib):
    # report_theoretical_memory: SP formula only with sequence_parallel and selective recompute
    for sp, rc in (("true", "none"), ("false", "selective"), ("true", "full")):
        got = ev(lib, "llama2-70b", "megatron_activations", tp=8, sequence_parallel=sp, recompute=rc,
                 micro_batch=1, seq_len=4096)
        assert got == exact(megatron_activation_without_sp(s=4096, b=1, h=8192, L=80, V=32000, tp=8, pp=1))


def test_megatron_gpt3_tp8_pp8_interleaved_tied_layernorm(lib):
    # GPT-3 175B: LayerNorm, GELU, tied embedding; 50257 pads to 51200 at tp = 8; pp > 1 holds
    # one embedding copy on the most loaded shard; interleaved schedule with v = 2
    values = dict(convention="megatron", tp=8, pp=8, dp=16, zero_stage=1, sequence_parallel="true",
                  recompute="selective", pp_schedule="interleaved", pp_virtual_stages=2,
                  micro_batch=1, seq_len=2048)
    wo, _ = megatron_weight_and_optimizer(**GPT3_CFG, swiglu=False, rmsnorm=False, untied=False,
                                          tp=8, pp=8, dp=16, distributed_optimizer=True)
    act = megatron_activation_with_sp(s=2048, b=1, h=12288, ffn=49152, L=96, V=50257, tp=8, pp=8, vp=2)
    assert ev(lib, "gpt3-175b", "megatron_weight_and_optimizer", **values) == exact(wo)
    assert ev(lib, "gpt3-175b", "megatron_activations", **values) == exact(act)
    assert ev(lib, "gpt3-175b", "convention_total", **values) == exact(wo + act)


def test_megatron_fewer_microbatches_than_stages_discounts_activations(lib):
    # non-interleaved, pp = 4, 2 micro-batches: activation_memory *= min(1, 2 / 4)
    values = dict(pp=4, num_microbatches=2, micro_batch=4, seq_len=2048)
    act = megatron_activation_without_sp(s=2048, b=4, h=4096, L=32, V=32000, tp=1, pp=4, num_microbatches=2)
    assert ev(lib, "llama2-7b", "megatron_activations", **values) == exact(act)
    wo, _ = megatron_weight_and_optimizer(**LLAMA2_7B_CFG, swiglu=True, rmsnorm=True, untied=True,
                                          tp=1, pp=4, dp=1, distributed_optimizer=False)
    assert ev(lib, "llama2-7b", "megatron_weight_and_optimizer", **values) == exact(wo)


def test_megatron_moe_and_mla_parameter_terms(lib):
    # Mixtral 8x7B: 8 experts of d_ff 14336 in every layer, GQA 8 groups
    wo, _ = megatron_weight_and_optimizer(**MIXTRAL_CFG, swiglu=True, rmsnorm=True, untied=True, tp=2, pp=1,
                                          dp=8, distributed_optimizer=True, num_experts=8, moe_ffn=14336,
                                          num_moe_layers=32)
    assert ev(lib, "mixtral-8x7b", "megatron_weight_and_optimizer", tp=2, dp=8, zero_stage=1) == exact(wo)
    # DeepSeek-V3 (config.json): MLA q_lora 1536, kv_lora 512, qk 128 + rope 64, v 128; 3 dense
    # layers (d_ff 18432) and 58 MoE layers of 256 experts (d_ff 2048) plus one shared expert
    wo, total = megatron_weight_and_optimizer(h=7168, L=61, heads=128, groups=128, ffn=18432, V=129280,
                                              swiglu=True, rmsnorm=True, untied=True, tp=1, pp=1, dp=1,
                                              distributed_optimizer=False, num_experts=256, moe_ffn=2048,
                                              shared_ffn=2048, num_moe_layers=58,
                                              mla=(1536, 512, 128, 64, 128))
    assert ev(lib, "deepseek-v3", "megatron_weight_and_optimizer") == exact(wo)
    assert ev(lib, "deepseek-v3", "megatron_params") == total


def test_megatron_18_bytes_equal_memform_with_fp32_gradients(lib):
    # Megatron's 2 + 4 + 12 is memform's bf16 weights, fp32 main grads, fp32 master, m and v
    for values in ({"dp": 8}, {"dp": 8, "zero_stage": 1}):
        s = Scenario.create(lib, "llama2-7b", values={"grad_dtype": "fp32", **per_parameter(lib), **values})
        assert s.evaluate("megatron_weight_and_optimizer") == s.evaluate("model_states")
        assert s.with_values(grad_dtype="auto").evaluate("model_states") != s.evaluate("megatron_weight_and_optimizer")


# ============================================================================ DeepSpeed
def ds_zero2(total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
             additional_buffer_factor=Fraction(3, 2)):
    """stage_1_and_2.py, estimate_zero2_model_states_mem_needs."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        # 2 = params_16bit, 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit
        gpu_mem = 2 * total_params + int(Fraction(18 * total_params, total_gpus))
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return math.floor(cpu_mem), math.floor(gpu_mem)


def ds_zero3(total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
             cpu_offload_params=True, zero_init=True, additional_buffer_factor=Fraction(3, 2)):
    """stage3.py, estimate_zero3_model_states_mem_needs."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = Fraction(1, num_nodes)
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
        else:
            gpu_mem = largest_layer_memory + int(Fraction(2 * total_params, total_gpus))
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(Fraction(18 * total_params, total_gpus))
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return math.floor(cpu_mem), math.floor(gpu_mem), largest_layer_memory


OFFLOAD = {"none": dict(cpu_offload=False), "optimizer": dict(cpu_offload=True),
           "optimizer_and_params": dict(cpu_offload=True, cpu_offload_params=True)}


@pytest.mark.parametrize("offload", ["none", "optimizer"])
def test_deepspeed_zero2_llama2_7b_one_node_of_8(lib, offload):
    cpu, gpu = ds_zero2(LLAMA2_7B, num_gpus_per_node=8, **OFFLOAD[offload])
    values = dict(convention="deepspeed", zero_stage=2, dp=8, offload=offload)
    assert ev(lib, "llama2-7b", "convention_total", **values) == gpu
    assert ev(lib, "llama2-7b", "deepspeed_cpu_bytes", **values) == cpu


@pytest.mark.parametrize("offload", ["none", "optimizer"])
def test_deepspeed_zero2_llama2_70b_two_nodes_of_8(lib, offload):
    cpu, gpu = ds_zero2(LLAMA2_70B, num_gpus_per_node=8, num_nodes=2, **OFFLOAD[offload])
    values = dict(zero_stage=2, dp=16, num_nodes=2, offload=offload)
    assert ev(lib, "llama2-70b", "deepspeed_gpu_bytes", **values) == gpu
    assert ev(lib, "llama2-70b", "deepspeed_cpu_bytes", **values) == cpu


@pytest.mark.parametrize("zero_init", [True, False])
@pytest.mark.parametrize("offload", ["none", "optimizer", "optimizer_and_params"])
def test_deepspeed_zero3_llama2_70b_two_nodes_of_8(lib, offload, zero_init):
    # the largest single module of Llama-2-70B is embed_tokens (and lm_head): 32000 x 8192,
    # larger than an MLP projection (8192 x 28672)
    largest = 32000 * 8192
    kwargs = dict(OFFLOAD[offload])
    kwargs.setdefault("cpu_offload_params", False)
    cpu, gpu, _ = ds_zero3(LLAMA2_70B, largest, num_gpus_per_node=8, num_nodes=2, zero_init=zero_init, **kwargs)
    values = dict(convention="deepspeed", zero_stage=3, dp=16, num_nodes=2, offload=offload,
                  zero_init="true" if zero_init else "false")
    assert ev(lib, "llama2-70b", "deepspeed_largest_layer_params") == largest
    assert ev(lib, "llama2-70b", "convention_total", **values) == gpu
    assert ev(lib, "llama2-70b", "deepspeed_cpu_bytes", **values) == cpu


def test_deepspeed_zero3_llama2_7b_pinned_largest_layer_and_buffer_factor(lib):
    # all_cold style call: the caller passes the largest layer (here a whole Llama-2-7B decoder
    # layer, 202,383,360 parameters) and another buffer factor
    layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    for offload in ("none", "optimizer"):
        cpu, gpu, _ = ds_zero3(LLAMA2_7B, layer, num_gpus_per_node=4, cpu_offload=offload != "none",
                               cpu_offload_params=False, additional_buffer_factor=2)
        values = dict(zero_stage=3, dp=4, offload=offload, deepspeed_largest_layer_params=layer,
                      additional_buffer_factor=2)
        assert ev(lib, "llama2-7b", "deepspeed_gpu_bytes", **values) == gpu
        assert ev(lib, "llama2-7b", "deepspeed_cpu_bytes", **values) == cpu


def test_deepspeed_differs_from_memform_model_states(lib):
    # DeepSpeed counts fp16 and fp32 gradients (2 + 18/N), memform ZeRO-2 a 16-bit one (2 + 14/N)
    s = Scenario.create(lib, "llama2-7b", values={"zero_stage": 2, "dp": 8, **per_parameter(lib)})
    assert s.evaluate("deepspeed_gpu_bytes") - s.evaluate("model_states") == 4 * LLAMA2_7B // 8


# ============================================================================ Transformer Math 101
def tm101_activations(s, b, h, L, a, t, recompute):
    """Activations and Batch Size: sbhL(10 + 24/t + 5as/(ht)) bytes without recomputation,
    sbhL(10 + 24/t) selective, 2sbhL full (16-bit activations, no sequence parallelism)."""
    if recompute == "none":
        return s * b * h * L * (10 + Fraction(24, t) + 5 * Fraction(a * s, h * t))
    if recompute == "selective":
        return s * b * h * L * (10 + Fraction(24, t))
    return 2 * s * b * h * L


def test_tm101_llama2_7b_one_gpu_mixed_precision_adamw(lib):
    # Model 2 B/param (mixed precision), AdamW 12 B/param, gradients 2 B/param (model dtype);
    # Total = Model + Optimizer + Activation + Gradient
    P = LLAMA2_7B
    expected = 2 * P + 12 * P + tm101_activations(2048, 1, 4096, 32, 32, 1, "none") + 2 * P
    got = ev(lib, "llama2-7b", "convention_total", convention="transformer_math_101", micro_batch=1, seq_len=2048)
    assert got == exact(expected)


def test_tm101_zero2_dp8_eight_bit_adam_selective(lib):
    # ZeRO-2: Model + Activation + (Optimizer + Gradient) / No. GPUs; 8-bit optimizer 6 B/param
    P = LLAMA2_7B
    expected = 2 * P + tm101_activations(4096, 2, 4096, 32, 32, 1, "selective") + Fraction(6 * P + 2 * P, 8)
    got = ev(lib, "llama2-7b", "tm101_total", zero_stage=2, dp=8, optimizer="adamw_8bit", recompute="selective",
             micro_batch=2, seq_len=4096)
    assert got == exact(expected)


def test_tm101_zero3_dp16_fp32_full_recompute_with_live_params(lib):
    # pure fp32: model 4 B/param, gradients 4 B/param; ZeRO-3:
    # Activation + (Model + Optimizer + Gradient) / No. GPUs + ZeRO-3 Live Params
    # (stage3_max_live_parameters = 1e9, counted in the model dtype as EleutherAI's cookbook does)
    P = LLAMA2_70B
    expected = (tm101_activations(4096, 1, 8192, 80, 64, 1, "full")
                + Fraction(4 * P + 12 * P + 4 * P, 16) + 10**9 * 4)
    got = ev(lib, "llama2-70b", "tm101_total", zero_stage=3, dp=16, precision="fp32", recompute="full",
             micro_batch=1, seq_len=4096)
    assert got == exact(expected)


def test_tm101_zero1_with_tensor_and_pipeline_parallelism(lib):
    # 3D parallelism with ZeRO-1: Model / (PP x TP) + Optimizer / No. GPUs + Gradient / PP, and
    # the activation formula's t = TP; No. GPUs = DP x PP x TP
    P = LLAMA2_70B
    tp, pp, dp = 8, 4, 2
    expected = (Fraction(2 * P, pp * tp) + Fraction(12 * P, dp * pp * tp) + Fraction(2 * P, pp)
                + tm101_activations(4096, 1, 8192, 80, 64, tp, "none"))
    got = ev(lib, "llama2-70b", "tm101_total", zero_stage=1, dp=dp, tp=tp, pp=pp, micro_batch=1, seq_len=4096)
    assert got == exact(expected)


@pytest.mark.parametrize("dtype,size", [("bf16", 2), ("int8", 1), ("fp32", 4)])
def test_tm101_inference_is_1_2_times_model_memory(lib, dtype, size):
    # Total Inference Memory ~ 1.2 x Model Memory (int8 1, fp16/bf16 2, fp32 4 bytes/param)
    got = ev(lib, "llama2-7b", "convention_total", convention="transformer_math_101", mode="infer", weight_dtype=dtype)
    assert got == exact(Fraction(12, 10) * size * LLAMA2_7B)


# ============================================================================ the option
def test_memform_convention_is_memforms_own_total(lib):
    s = Scenario.create(lib, "llama2-7b", values={"dp": 8, "zero_stage": 3})
    assert s.evaluate("convention_total") == s.evaluate("total")
    assert s.evaluate("convention_model_states") == s.evaluate("model_states")


@pytest.mark.parametrize("model", ["llama2-7b", "llama2-70b", "gpt3-175b"])
def test_conventions_differ_from_memform_total(lib, model):
    # every other tool leaves something out (activations, logits, context, margin) or counts
    # other bytes per parameter, so none reproduces memform's total on a training step
    s = Scenario.create(lib, model, values={"dp": 8, "zero_stage": 1, "micro_batch": 1, "seq_len": 2048})
    figures = {c: s.with_values(convention=c).evaluate("convention_total")
               for c in ("memform", "zero_paper", "megatron", "deepspeed", "transformer_math_101")}
    assert len(set(figures.values())) == len(figures), figures
    assert figures["memform"] == s.evaluate("total")


def test_convention_model_states_picks_each_tools_model_states(lib):
    s = Scenario.create(lib, "llama2-7b", values={"dp": 8, "zero_stage": 2})
    P = LLAMA2_7B
    assert s.with_values(convention="zero_paper").evaluate("convention_model_states") == exact(zero_paper(P, 8, 2))
    assert s.with_values(convention="megatron").evaluate("convention_model_states") == exact(6 * P + Fraction(12 * P, 8))
    assert s.with_values(convention="deepspeed").evaluate("convention_model_states") == ds_zero2(
        P, num_gpus_per_node=8, cpu_offload=False)[1]
    assert s.with_values(convention="transformer_math_101").evaluate("convention_model_states") == exact(
        2 * P + Fraction(12 * P + 2 * P, 8))


def test_estimate_reports_the_convention_beside_memform():
    import io
    import json
    from engine.cli import main
    out = io.StringIO()
    code = main(["estimate", "llama2-7b", "--json", "--set", "convention=zero_paper"], out, io.StringIO())
    data = json.loads(out.getvalue())
    assert code == 0
    # the ZeRO paper's 16 bytes per parameter (Rajbhandari et al. 2020)
    assert data["rules"]["convention_total"] == 16 * 6_738_415_616
