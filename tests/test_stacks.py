"""Stacks against what real frameworks measured.

Megatron-LM's functional tests record ``mem-max-allocated-bytes`` (torch.cuda.max_memory_allocated,
logged by the last global rank: the last pipeline stage) in golden-value files beside each
recipe; tests/published/megatron_golden.json keeps ten of them with their source, quoted line
and full configuration.  memform's ``peak_allocated`` with ``stack=megatron`` and
``pp_stage=last`` is compared with each.  The two large GPT recipes (issue 13: TP4; PP4 with
virtual stages) must be within 3 %; the small 12-layer test models, whose vocabulary is inferred
and whose figures carry a ~0.1 GB of cuBLAS / Transformer Engine workspace memform does not
model, are listed with their error (``pytest tests/test_stacks.py -s`` prints the table).
"""
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from engine.compile.model import Scenario, parse_setting
from engine.library.megatron import read_text

PUBLISHED = Path(__file__).parent / "published"
MEGATRON = json.loads((PUBLISHED / "megatron_golden.json").read_text())["cases"]

#: the acceptance cases of issue 13, within 3 %, and the small recipes the GEMM workspaces
#: (megatron_gemm_workspaces: PyTorch's cuBLAS workspace for the forward's and for backward's
#: thread, Transformer Engine's) bring within it
EXACT = {"megatron-gpt3_7b_tp4_pp1_memory_speed-h100": 0.03, "megatron-gpt3_7b_tp1_pp4_vp_memory_speed-h100": 0.03,
         "megatron-gpt3_mcore_te_tp4_pp1_distopt_overlap-h100": 0.03, "megatron-gpt3_mcore_te_tp1_pp4_vp1-h100": 0.03,
         "megatron-gpt3_mcore_te_tp1_pp1_dp8_distopt-h100": 0.03,
         "megatron-gpt3_mcore_te_tp1_pp1_uniform_full_recompute-a100": 0.03,
         "megatron-gpt3_mcore_te_tp2_pp2_cross_entropy_loss_fusion-h100": 0.03,
         "megatron-gpt3_mcore_tp4_pp1_local-a100": 0.03}
#: cases with a known gap, each with the reason, checked only against a gross regression
PARTIAL = {
}


def model_config_yaml(config: dict) -> str:
    """A recipe's model_config.yaml as Megatron-LM's functional tests write it: its ENV_VARS and
    its MODEL_ARGS verbatim (true: a switch given, false: one left out)."""
    lines = ["ENV_VARS:", *(f"  {k}: {v}" for k, v in config.get("env_vars_verbatim", {}).items()), "MODEL_ARGS:"]
    for name, value in config["model_args_verbatim"].items():
        lines.append(f"  {name}: {str(value).lower() if isinstance(value, bool) else value}")
    return "\n".join(lines) + "\n"


def megatron_scenario(lib, case) -> Scenario:
    """The recipe as memform reads Megatron-LM's arguments (engine/library/megatron.py), on its 8
    GPUs (dp = 8 / (tp pp cp)), for the last pipeline stage, whose rank logs the figure."""
    text = case.get("model_config_yaml") or model_config_yaml(case["config"])
    args = read_text(text, lib, case["id"], gpus=case.get("gpus") or case["config"]["gpus"])
    # the golden file's machine: a DGX A100 (compute capability 8.0) or H100 (9.0), which sizes
    # the GEMM workspaces (megatron_gemm_workspaces)
    dgx = re.search(r"golden_values_dev_dgx_(a100|h100)\.json$", case["source"]["path"]).group(1)
    return Scenario.create(lib, None, values=args.values).with_values(
        pp_stage="last", cuda_major=8 if dgx == "a100" else 9)


def predict(lib, case) -> tuple[int, int, float]:
    assert case["measured"]["statistic"] == "max_memory_allocated"
    measured, predicted = case["measured"]["bytes"], int(megatron_scenario(lib, case).evaluate("peak_allocated"))
    return measured, predicted, (predicted - measured) / measured


DENSE = [c for c in MEGATRON if not c["config"].get("num-experts")]
#: the MoE recipes, with the gap each keeps (docs/research/megatron-moe.md)
MOE_PARTIAL = {
    "megatron-moe_tp2_pp1_ep2_8experts_groupedgemm_distopt-h100":
        "the allgather dispatcher's rows, index_add_'s kept expert output and the GEMM workspaces are modelled",
    "megatron-moe_mla_mtp_tp2_pp2_vp4_ep4_etp1_memory_speed-h100":
        "dropless routing's imbalance on this rank's experts (the peak moves 2.3 GB between steps)",
}


def test_every_dense_case_is_held():
    assert {c["id"] for c in DENSE} == set(EXACT) | set(PARTIAL)
    assert {c["id"] for c in MEGATRON} - {c["id"] for c in DENSE} == set(MOE_PARTIAL)


@pytest.mark.parametrize("case", [c for c in DENSE if c["id"] in EXACT], ids=lambda c: c["id"])
def test_megatron_gpt_recipes_within_three_percent(lib, case):
    measured, predicted, error = predict(lib, case)
    assert abs(error) <= EXACT[case["id"]], f"{case['id']}: {predicted:,} vs {measured:,} ({error:+.1%})"


def test_the_table_of_every_megatron_case(lib, capsys):
    rows = [(c["id"], *predict(lib, c)) for c in MEGATRON]
    with capsys.disabled():
        print("\nMegatron-LM golden values, mem-max-allocated-bytes (last rank) vs memform peak_allocated")
        for name, measured, predicted, error in rows:
            why = PARTIAL.get(name, MOE_PARTIAL.get(name, ""))
            print(f"{name:62} {measured:>15,} {predicted:>15,} {error:+7.1%}  {why}")
    for name, measured, predicted, error in rows:
        assert abs(error) <= 0.4, f"{name}: {error:+.1%}"  # a gross regression, not the bound


# tests/published/megatron_more.json: 43 more recipes' golden values, each with its
# model_config.yaml verbatim (uneven pipeline stages, the embedding and loss counted in the split,
# the interleaved schedule's micro-batch group, context parallelism, MLA, qk-layernorm, MoE with
# every dispatcher, FP8), read by memform's own reader of Megatron-LM's arguments
MORE = json.loads((PUBLISHED / "megatron_more.json").read_text())["cases"]
#: the recipes with a known gap, each with what is not modelled (docs/research/megatron-holdout.md)
MORE_PARTIAL = {
    "megatron-gpt3_mcore_te_tp2_pp2_resume_torch_dist_defer_embedding_wgrad_compute-h100":
        "--defer-embedding-wgrad-compute with --wgrad-deferral-limit 2 keeps two micro-batches' output-layer input "
        "and logits gradient to the flush (421.5 MB, modelled: -25.3 % before); 59 MB more at the peak is not explained",
}


@pytest.mark.parametrize("case", [c for c in MORE if c["id"] not in MORE_PARTIAL], ids=lambda c: c["id"])
def test_more_megatron_recipes_within_three_percent(lib, case):
    measured, predicted, error = predict(lib, case)
    assert abs(error) <= 0.03, f"{case['id']}: {predicted:,} vs {measured:,} ({error:+.1%})"


def test_the_table_of_more_megatron_recipes(lib, capsys):
    assert set(MORE_PARTIAL) < {c["id"] for c in MORE}
    rows = [(c["id"], *predict(lib, c)) for c in MORE]
    with capsys.disabled():
        print("\nMore Megatron-LM golden values, mem-max-allocated-bytes (last rank) vs memform peak_allocated")
        for name, measured, predicted, error in rows:
            print(f"{name:62} {measured:>15,} {predicted:>15,} {error:+7.1%}  {MORE_PARTIAL.get(name, '')}")
    for name, measured, predicted, error in rows:
        if name in MORE_PARTIAL:  # listed while it is a gap: a recipe brought within the bound leaves the list
            assert abs(error) > 0.03, f"{name} is within 3 % ({error:+.1%}): take it off MORE_PARTIAL"


def test_megatron_moe_layer_keeps_what_its_dispatcher_and_experts_save(lib):
    # the 8-expert allgather recipe: s 1024, b 4, h 512, tp = etp 2 with sequence parallelism,
    # ep 2, top-1, experts 2048 wide with GELU, deterministic mode (docs/research/megatron-moe.md
    # sec. 4 and 6, read in Megatron-LM d98e8a64): the rank's experts take s b k etp / tp = 4,096
    # rows; GroupedLinear keeps fc1's bf16 input [rows, h], the unfused GELU with the routing
    # weights fc1's output, GELU's output and the product [rows, d_e / etp], and unpermute's
    # index_add_ the experts' output [rows, h]
    case = next(c for c in MEGATRON if c["id"] in MOE_PARTIAL and c["config"]["moe-token-dispatcher-type"] == "allgather")
    s = megatron_scenario(lib, case)
    dense_part = s.with_values(num_experts=0).evaluate("architecture_dense_mlp")
    rows, h, inner = 1024 * 4 * 1 * 2 // 2, 512, 2048 // 2
    experts = rows * h * 2 * 2 + rows * inner * 2 * 3
    router = 1024 * 4 // 2 * (8 * 4 + 40)  # fp32 probabilities and routing indices per SP-local token
    # the dense block's norm, input and dropout mask stay; its fc1 / GELU tensors give way to the experts'
    dense_inner = 1024 * 4 * 2048 * 2 * 2 // 2
    assert s.evaluate("architecture_moe_mlp") == dense_part - dense_inner + experts + router
    # persistent: the 'mpu' buffer holds the tokens gathered over etp x ep ranks, [s b ep, h]
    # bf16; Transformer Engine's grouped GEMM 4 cuBLAS workspaces of 32 MiB + 1 KiB
    assert s.evaluate("megatron_gather_buffer") == 1024 * 4 * 2 * 512 * 2
    assert s.evaluate("megatron_moe_workspace") == 4 * (32 * 2**20 + 2**10)
    # alltoall with Transformer Engine's fused permute keeps no expert output
    fused = s.with_values(moe_dispatcher="alltoall", moe_permute_fusion="true")
    assert s.evaluate("architecture_moe_mlp") - fused.evaluate("architecture_moe_mlp") == rows * h * 2
    # and needs the buffer only for the output layer's sequence-parallel gather, [s b, h]
    assert fused.evaluate("megatron_gather_buffer") == 1024 * 4 * 512 * 2


def test_megatron_keeps_its_gemm_workspaces_and_the_local_attention_buffer(lib):
    # PyTorch's cuBLAS workspace per handle (CublasHandlePool.cpp: ':4096:2:16:8', 8.125 MiB, before
    # Hopper; CUBLAS_WORKSPACE_CONFIG=':4096:8' is 32 MiB) and cuBLASLt's 1 MiB, for the forward's
    # thread and for autograd's; Transformer Engine's own 4 MiB on an A100
    a100 = Scenario.create(lib, "gpt2", values={"stack": "megatron", "cuda_major": 8, "micro_batch": 4, "seq_len": 1024})
    MiB = 2**20
    assert a100.evaluate("megatron_gemm_workspaces") == 2 * (8 * MiB + 128 * 1024 + MiB) + 4 * MiB
    pinned = a100.with_values(cublas_workspace_config=4096 * 8 * 1024)
    assert pinned.evaluate("megatron_gemm_workspaces") == 2 * 33 * MiB + 4 * MiB
    # --transformer-impl local: torch.matmul GEMMs (no Transformer Engine workspace), and the
    # unfused attention takes baddbmm's input [b np, s, s] from the 'mpu' buffer: 4 x 12 x 1024^2 bf16
    local = pinned.with_values(megatron_impl="local", attention="eager", precision="bf16_mixed")
    assert local.evaluate("megatron_gemm_workspaces") == 2 * 33 * MiB
    assert local.evaluate("megatron_gather_buffer") == 4 * 12 * 1024 * 1024 * 2
    assert local.with_values(attention="flash").evaluate("megatron_gather_buffer") == 0


def test_megatron_keeps_fp32_gradients_and_a_bf16_and_fp32_copy_of_the_logits(lib):
    # param_and_grad_buffer.py: bf16 training accumulates into an fp32 main_grad buffer;
    # cross_entropy.py: the bf16 logits [s, b, V/t] and their fp32 copy, gradient in place
    # (the 32 x 2 + 1 RMSNorm weights of 4096 are whole on both tp ranks: TENorm, not split)
    s = Scenario.create(lib, "llama2-7b", values={"stack": "megatron", "micro_batch": 2, "seq_len": 4096, "tp": 2})
    norms = 65 * 4096
    n = 6_738_415_616 + norms  # the parameters of the two ranks together
    assert s.evaluate("grads") == 4 * n // 2
    assert s.evaluate("logits_tensor") == 2 * 4096 * 32000 * (2 + 4) // 2
    assert s.evaluate("loss_backward_temp") == 0 and s.evaluate("loss_forward_temp") == 0
    # --cross-entropy-loss-fusion (native, torch.compile'd): Inductor writes the exponentiated
    # logits to a fresh fp32 [s, b, V/t] buffer before copying them back
    fused = s.with_values(cross_entropy_fusion="native")
    assert fused.evaluate("loss_forward_temp") == 2 * 4096 * 32000 * 4 // 2
    assert fused.evaluate("loss_backward_temp") == 0
    generic = s.with_values(stack="generic")
    assert generic.evaluate("grads") == 2 * n // 2 and generic.evaluate("logits_tensor") == 2 * 4096 * 32000 * 4 // 2
    # each choice stays overridable
    assert s.with_values(grad_dtype="bf16").evaluate("grads") == 2 * n // 2


@pytest.mark.parametrize("schedule, stage, chunks", [
    # Megatron-Core schedules.py: the first stage runs min(p v + p - 1, m v) model chunks ahead,
    # the last min((v - 1) p + 1, m v); 1F1B: p and 1 micro-batches
    ("interleaved", "first", 32), ("interleaved", "last", 29),
    ("one_f_one_b", "first", 4), ("one_f_one_b", "last", 1),
])
def test_micro_batches_in_flight_per_pipeline_stage(lib, schedule, stage, chunks):
    v = 8 if schedule == "interleaved" else 1
    s = Scenario.create(lib, "llama2-7b", values={"pp": 4, "num_microbatches": 4, "pp_schedule": schedule,
                                                   "pp_virtual_stages": 8, "pp_stage": stage})
    assert s.evaluate("in_flight") == Fraction(chunks, v)  # in micro-batches of the stage's layers
    if stage == "first":
        assert s.evaluate("logits") == 0  # the output layer is on the last stage


# ---------------------------------------------------------------- torchtune and torchtitan
# tests/published/training_peaks.json: the train_peak rows of ../shared/reference/published-
# measurements.json (torchtitan's Llama 3.1 8B benchmark on 8 H100s, torchtune's Llama 3.2 3B
# recipes on an A100), each with its source, quote, the statistic it reports and the structure
# the framework keeps, read from its source at the commit named.
PYTORCH = json.loads((PUBLISHED / "training_peaks.json").read_text())["cases"]

#: rows whose structure memform models, held to issue 13's 5 %
WITHIN_5 = {
    "torchtitan-h100-8b-fsdp8-eager", "torchtitan-h100-8b-fsdp8-cp1-s32768",
    "torchtitan-h100-8b-fsdp4-cp2-s65536", "torchtitan-h100-8b-fsdp2-cp4-s131072", "torchtitan-h100-8b-fsdp1-cp8-s262144",
    "torchtitan-h100-8b-fsdp128-eager",
    "torchtitan-h100-8b-fsdp8-compile", "torchtitan-h100-8b-fsdp128-compile",
    "torchtitan-h100-405b-fsdp8-cp1-tp8-pp8-s32768", "torchtitan-h100-405b-fsdp4-cp2-tp8-pp8-s65536",
    "torchtitan-h100-405b-fsdp2-cp4-tp8-pp8-s131072",
    "torchtitan-h100-qwen3-32b-fsdp8-compile", "torchtitan-h100-qwen3-32b-fsdp4-tp8-b16", "torchtitan-h100-qwen3-32b-fsdp4-tp8-b32", "torchtitan-h100-qwen3-32b-fsdp8-tp8-b32",
    "torchtune-a100-llama3.2-3b-full-packed-dataset", "torchtune-a100-llama3.2-3b-full-activation-checkpointing",
    "torchtune-a100-llama3.2-3b-full-fuse-optimizer-step-into-backward",
    "torchtune-a100-llama3.2-3b-full-compile", "torchtune-a100-llama3.2-3b-full-chunked-cross-entropy",
    "torchtune-a100-llama3.2-3b-full-activation-offloading",
}
#: rows with a known gap, and why
PYTORCH_PARTIAL = {
    "torchtitan-h100-8b-fsdp8-compile-fp8": "Float8 changes nothing at the loss's turn (its fp8 casts are recomputed "
        "under compile and checkpointing; -0.43 GiB with FSDP's float8 all-gather, which the table does not state: "
        "docs/research/torchtitan-float8.md); the error is the compile row's",
    "torchtitan-h100-8b-fsdp128-compile-fp8": "as the 8-GPU Float8 row",
    "torchtitan-h100-70b-fsdp32-tp8-2d": "not Float8 (the AsyncTP row has the same and is -3.0 %): synchronous tensor "
        "parallelism's collective copies inside the compiled blocks raise reserved above allocated by some 4 GiB more "
        "than AsyncTP, which its sizes do not tell",
    "torchtitan-h100-70b-fsdp32-tp8-2d-asynctp": "the symmetric-memory workspaces are outside max_reserved; 2 GiB of "
        "allocator slack beyond the 10 % margin",
    "torchtitan-h100-405b-fsdp8-tp8-pp8-1f1b": "the stage split of 126 layers over 8 stages is not stated; AsyncTP's buffers",
    "torchtitan-h100-405b-fsdp8-tp8-pp8-interleaved": "stages per rank not stated (memform: pp_virtual_stages = 2)",
    "torchtitan-h100-405b-fsdp1-cp8-tp8-pp8-s262144": "context parallelism's ring-attention buffers at cp = 8",
    "torchtune-a100-llama3.2-3b-full-8-bit-adamw": "torchao AdamW8bit inferred; its compiled step's fp32 temporaries on the tied embedding are not rules (docs/research/torchtune-8bit-adamw.md)",
    "torchtune-a100-llama3.2-3b-lora": "the adapters' AdamW states count at the start of backward (a steady-state step); the README's row may be a first step (docs/research/torchtune-lora-peak.md)",
    "torchtune-a100-llama3.2-3b-qlora": "as the LoRA row, on a 4.6 GiB total",
}
STATISTIC = {"max_reserved": "peak_reserved", "active_bytes.all.peak": "peak_allocated"}


def pytorch_settings(lib, cf: dict) -> dict:
    """A row's configuration (memform's names, as recorded) plus the framework's choices."""
    values = {k: str(v).lower() if isinstance(v, bool) else v for k, v in cf.items()
              if k in lib.decls and k not in ("loss_chunks", "logits_dtype", "loss_kernel", "torch_compile")}
    if cf.get("torch_compile"):  # torchtitan and torchtune compile each transformer block
        values["torch_compile"] = "blocks"
    values["activation_model"] = "architecture"  # the tensors the block saves
    # the rows' models (Llama 3, Qwen3 as torchtitan and torchtune build them: separate wq, wk, wv,
    # no output-projection bias, no dropout) over the gpt2 preset the scenario starts from
    for name, value in (("qkv_fused", "false"), ("o_proj_bias", "false"), ("dropout", 0)):
        values.setdefault(name, value)
    if cf.get("loss_chunks", 0) > 1:  # torchtune's CEWithChunkedOutputLoss
        values["loss_chunks"] = cf["loss_chunks"]
    else:  # the model's bf16 logits upcast in the loss: log_softmax + nll_loss in fp32
        values.update(logits_dtype=cf["logits_dtype"], loss_kernel=cf["loss_kernel"])
    if cf.get("recompute_policy", "").startswith("torchtitan_op"):
        values["recompute"] = "op"
    if cf.get("activation_offload"):
        values.update(activation_offload="true", offload_stash=cf["activation_offload_stash"])
    if cf.get("optimizer_in_backward"):
        values["optimizer_in_backward"] = "true"
    return values


def predict_pytorch(lib, case) -> tuple[int, int, float]:
    cf = case["config"]
    s = Scenario.create(lib, "gpt2", values=pytorch_settings(lib, cf))
    assert case["unit"] == "GiB"
    measured = round(case["value"] * 2**30)  # published with one decimal
    predicted = int(s.evaluate(STATISTIC[cf["measured_stat"]]))
    return measured, predicted, (predicted - measured) / measured


def test_every_pytorch_row_is_held():
    assert {c["id"] for c in PYTORCH} == WITHIN_5 | set(PYTORCH_PARTIAL)


@pytest.mark.parametrize("case", [c for c in PYTORCH if c["id"] in WITHIN_5], ids=lambda c: c["id"])
def test_pytorch_stacks_within_five_percent(lib, case):
    measured, predicted, error = predict_pytorch(lib, case)
    assert abs(error) <= 0.05, f"{case['id']}: {predicted / 2**30:.2f} GiB vs {case['value']} ({error:+.1%})"


def test_the_table_of_every_pytorch_row(lib, capsys):
    rows = [(c["id"], c["config"]["measured_stat"], *predict_pytorch(lib, c)) for c in PYTORCH]
    with capsys.disabled():
        print("\ntorchtitan / torchtune published peaks vs memform (the statistic each reports)")
        for name, stat, measured, predicted, error in rows:
            print(f"{name:62} {stat:22} {measured / 2**30:6.1f} {predicted / 2**30:6.1f} GiB {error:+7.1%}  "
                  f"{PYTORCH_PARTIAL.get(name, '')}")
    for name, stat, measured, predicted, error in rows:
        assert abs(error) <= 0.3, f"{name}: {error:+.1%}"  # a gross regression, not the bound


def test_torchtitans_op_policy_keeps_every_other_matmul(lib):
    # Llama 3.1 8B, 2 x 8192 tokens: x, wq, wv, SDPA out, w1, w2 outputs in bf16 and 32 fp32
    # log-sum-exps per token: 2 (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 128 = 63,616 B
    s = Scenario.create(lib, "llama3.1-8b", values={"recompute": "op", "micro_batch": 2, "seq_len": 8192})
    assert s.evaluate("op_policy_layer") == 63_616 * 2 * 8192


# ---------------------------------------------------------------- stack = fsdp2
# Llama 3.1 8B from its published dimensions (vocab 128,256, hidden 4,096, 32 layers, MLP 14,336,
# 8 KV heads of 128): one block is q and o (4096^2 each), k and v (4096 x 1024 each), three MLP
# matrices (4096 x 14336) and two norms; the root group is the embedding, the untied output
# layer and the final norm.  8,030,261,248 parameters, as the model card states.
L31_BLOCK = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
L31_ROOT = 2 * 128256 * 4096 + 4096
L31_P = 32 * L31_BLOCK + L31_ROOT


def fsdp2(lib, **values):
    # the root group as torchtitan's 2024 benchmark had it (the default, separate, is what
    # torchtitan has done since July 2025 and torchtune's custom_sharded_layers)
    return Scenario.create(lib, "llama3.1-8b", values={"stack": "fsdp2", "dp": 8, "micro_batch": 1,
                                                        "seq_len": 2048, "fsdp_units": "root", **values})


def test_fsdp2_keeps_fp32_shards_as_the_master_copy(lib):
    # fully_shard keeps each parameter sharded in the dtype it was built in (fp32 under a
    # MixedPrecisionPolicy); no separate master copy, fp32 gradients and Adam states, all / dp
    assert L31_P == 8_030_261_248
    s = fsdp2(lib)
    assert s.evaluate("weights") == L31_P * 4 // 8
    assert s.evaluate("master") == 0
    assert s.evaluate("grads") == L31_P * 4 // 8
    # zero_stage is not read: fully_shard is ZeRO-3's sharding whatever it says
    assert fsdp2(lib, zero_stage=0).evaluate("weights") == L31_P * 4 // 8
    # a bf16 model without a MixedPrecisionPolicy (torchtune's recipes): bf16 shards, gradients
    # and AdamW states (torch.optim keeps states in the parameters' dtype)
    b = fsdp2(lib, precision="bf16")
    assert b.evaluate("weights") == L31_P * 2 // 8 and b.evaluate("grads") == L31_P * 2 // 8
    assert b.evaluate("fsdp_reduce_bytes") == 2


def test_fsdp2_gathers_blocks_in_the_working_dtype(lib):
    s = fsdp2(lib)
    assert s.evaluate("fsdp_block_params") == L31_BLOCK and s.evaluate("fsdp_root_params") == L31_ROOT
    # when backward starts: the root group (never resharded after forward) and the last block
    # (prefetched by the root's pre-backward hook, or kept by torchtitan), both in bf16; the
    # CPU run in docs/research/fsdp2-cpu.md saw exactly these two at the step's peak
    assert s.evaluate("fsdp_turn_buffers") == (L31_ROOT + L31_BLOCK) * 2
    assert fsdp2(lib, fsdp_reshard_after_forward="false").evaluate("fsdp_turn_buffers") == (L31_ROOT + 32 * L31_BLOCK) * 2
    # one block's backward: it and the prefetched next one (bf16), its bf16 gradients and the
    # fp32 reduce-scatter input they are copied into
    assert s.evaluate("fsdp_block_backward") == L31_BLOCK * (2 + 2 + 2 + 4)
    # the output layer's gradient waits, unsharded in bf16, for the root's reduce-scatter
    assert s.evaluate("fsdp_head_grad") == 128256 * 4096 * 2 and s.evaluate("head_grad") == 0
    # the end of backward, the root's reduce-scatter: its fp32 input beside every sharded
    # gradient, and the output layer's bf16 gradient that foreach_reduce's loop still holds
    assert (s.evaluate("fsdp_root_reduce_peak") - s.evaluate("static_states") - s.evaluate("live_grads")
            == L31_ROOT * 4 + 128256 * 4096 * 2)
    # the communication streams' pools: the root's and the first block's all-gather outputs (bf16)
    # and the reduce-scatter outputs, which are the sharded fp32 gradients
    assert s.evaluate("side_stream_pools") == (L31_ROOT + L31_BLOCK) * 2 + L31_P * 4 // 8


def test_fsdp2_with_the_embedding_and_output_as_their_own_units(lib):
    # torchtune's custom_sharded_layers and torchtitan since 2025: backward starts with the final
    # norm and output layer gathered (their unit is not resharded after forward) and the last
    # block; the output layer's gradient is reduced at once; the embedding (128,256 x 4,096) is
    # gathered again at the end and reduce-scattered from an fp32 input beside its bf16 gradient
    s = fsdp2(lib, fsdp_units="separate")
    assert s.evaluate("fsdp_turn_buffers") == (4096 + 128256 * 4096 + L31_BLOCK) * 2
    assert s.evaluate("fsdp_head_grad") == 0 and s.evaluate("fsdp_root_gathered") == 0
    assert (s.evaluate("fsdp_root_reduce_peak") - s.evaluate("static_states") - s.evaluate("live_grads")
            == 128256 * 4096 * (4 + 2))


def test_fsdp2_gathers_a_qlora_block_as_nf4(lib):
    # torchtune's QLoRA under FSDP2: torchao's NF4Tensor all-gathers what it stores (its
    # fsdp_pre_all_gather returns quantized_data, quantized_scalers and quantization_factor):
    # two 4-bit values per byte, an int8 scaler per 64 weights and an fp32 factor per 256
    # scalers; the block's two norms stay bf16, as LoRA's whole bf16 base
    nf4_bytes = Fraction(1, 2) + Fraction(1, 64) + Fraction(4, 64 * 256)
    block = (L31_BLOCK - 2 * 4096) * nf4_bytes + 2 * 4096 * 2
    q = fsdp2(lib, finetune="qlora", precision="bf16")
    assert q.evaluate("fsdp_block_bytes") == block
    assert q.evaluate("fsdp_block_backward") == 2 * block  # frozen: nothing to reduce
    assert fsdp2(lib, finetune="lora", precision="bf16").evaluate("fsdp_block_bytes") == L31_BLOCK * 2


def test_fsdp2_frees_gradients_and_steps_fused_unless_foreach_is_asked(lib):
    s = fsdp2(lib)
    assert s.evaluate("grads_persist") == 0  # optimizer.zero_grad() sets them to None every step
    # torchtitan's optimizer.implementation defaults to fused (PR 881, February 2025): in place
    assert s.evaluate("optimizer_temp") == 0
    foreach = s.with_values(optimizer_impl="foreach")  # torchtitan before it: foreach=True
    assert foreach.evaluate("optimizer_temp") == L31_P * 4 // 8  # one fp32 state-sized buffer


def test_fsdp2_in_a_pipeline_accumulates_unsharded_fp32_gradients(lib):
    # torch.distributed.pipelining turns gradient sync off until the last micro-batch: at pp = 2
    # the busiest stage's 16 blocks and its larger end (the final norm and the output layer)
    # keep their gradients unsharded in reduce_dtype (fp32)
    s = fsdp2(lib, pp=2, dp=4)
    assert s.evaluate("fsdp_accumulated_grads") == (16 * L31_BLOCK + 4096 + 128256 * 4096) * 4
    assert fsdp2(lib, dp=4).evaluate("fsdp_accumulated_grads") == 0  # one stage: reduced block by block


def test_loss_parallel_and_dtensor_sequence_parallelism(lib):
    # tp = 2 with sequence parallelism, 2,048 tokens: torchtitan's loss_parallel backward holds
    # three fp32 logits-sized temporaries (vocabulary split in two) beside the log-probabilities
    values = {"dp": 4, "tp": 2, "sequence_parallel": "true", "activation_model": "architecture"}
    s = fsdp2(lib, **values)
    assert s.evaluate("loss_backward_temp") == 3 * 2048 * (128256 // 2) * 4
    # DTensor's sequence parallelism saves the all-gathered inputs of the attention's and the
    # MLP's projections (two [s, h] bf16 tensors), where Megatron's keeps them split over tp
    megatron_like = Scenario.create(lib, "llama3.1-8b", values={**values, "stack": "generic", "micro_batch": 1,
                                                                "seq_len": 2048})
    assert s.evaluate("layer_activations") - megatron_like.evaluate("layer_activations") == 2 * 2048 * 4096 * 2 // 2


def test_optimizer_in_backward_never_holds_every_gradient(lib):
    s = Scenario.create(lib, "llama2-7b", values={"optimizer_in_backward": "true", "grad_lifetime": "step",
                                                   "micro_batch": 1, "seq_len": 512})
    head = 32000 * 4096 * 2  # the untied output layer's bf16 gradient, first to appear in backward
    assert s.evaluate("live_grads") == head
    assert s.evaluate("optimizer_peak") == s.evaluate("static_states")


# ---------------------------------------------------------------- stack = hf
# tests/published/hf_training_peaks.json: Hugging Face Trainer runs with a published peak, each
# with its source, quote, statistic and configuration.  Two are held: fms-acceleration's
# Mistral-7B benchmark on one A100 (transformers 4.48, pure bf16 weights, gradient
# checkpointing, Trainer's default of that version, adamw_torch: torch.optim.AdamW, foreach on
# CUDA; transformers defaults to adamw_torch_fused with PyTorch >= 2.8, memform's hf default).
HF = {c["id"]: c for c in json.loads((PUBLISHED / "hf_training_peaks.json").read_text())["rows"]}
HF_HELD = {
    # full fine-tuning: the peak is the optimizer step (the batch-8 row has the same peak)
    "fmsacc-mistral7b-full-purebf16-b4-s4096": {},
    # LoRA r = 16 on q, k, v and o over the frozen bf16 base: the peak is the backward pass
    # (peft 0.13.2: fp32 adapters, each with its own dropout of p = 0.1)
    "fmsacc-mistral7b-lora16-bf16base-b4-s4096": {"finetune": "lora", "lora_rank": 16, "lora_targets": "attention",
                                                  "lora_dropout": 0.1},
}
HF_LEFT = {
    "hfdocs-bert-large-fp16-b4": "an encoder (BERT) read by nvidia-smi after training; memform models decoders",
    "hfdocs-bert-large-fp16-gc-b1ga4": "as above",
    "hfdocs-bert-large-fp16-gc-adafactor-b1ga4": "as above",
    "msswift-qwen1_8b-chat-full-purebf16-b1-s512": "Qwen v1 is custom code (no config memform reads); the table is not monotonic in length",
}


def predict_hf(lib, case_id: str) -> tuple[int, int, float]:
    case, extra = HF[case_id], HF_HELD[case_id]
    cf = case["config"]
    assert case["statistic"] == "max_memory_allocated" and cf["n_gpus"] == 1
    values = {"stack": "hf", "precision": "bf16",  # torch_dtype bfloat16, no autocast
              "optimizer_impl": "foreach",  # transformers 4.48's adamw_torch
              "recompute": "full" if cf["gradient_checkpointing"] else "none",
              "micro_batch": cf["micro_batch"], "seq_len": cf["seq_len"], **extra}
    s = Scenario.create(lib, "mistral-7b", values=values)
    measured = int(case["bytes_or_value"].split()[0])
    predicted = int(s.evaluate("peak_allocated"))
    return measured, predicted, (predicted - measured) / measured


def test_every_hf_row_is_held_or_left_with_a_reason():
    assert set(HF) == set(HF_HELD) | set(HF_LEFT)


@pytest.mark.parametrize("case_id", sorted(HF_HELD))
def test_hf_trainer_peaks_within_five_percent(lib, case_id, capsys):
    measured, predicted, error = predict_hf(lib, case_id)
    with capsys.disabled():
        print(f"\n{case_id}: measured {measured:,}, memform {predicted:,} ({error:+.2%})")
    assert abs(error) <= 0.05, (case_id, measured, predicted)


def test_hf_mixed_precision_keeps_fp32_parameters_and_ddp_buckets(lib):
    # Trainer(bf16=True): fp32 parameters (no separate master copy), fp32 gradients, and under
    # DDP a flat all-reduce bucket as large as the gradients (PyTorch pull request 41954)
    s = Scenario.create(lib, "llama2-7b", values={"stack": "hf", "dp": 8})
    n = 6_738_415_616  # Llama-2-7B (meta-llama/Llama-2-7b-hf, safetensors metadata)
    assert s.evaluate("weights") == s.evaluate("grads") == 4 * n
    assert s.evaluate("master") == 0
    assert s.evaluate("comm_buffers") == 4 * n
    assert Scenario.create(lib, "llama2-7b", values={"stack": "hf"}).evaluate("comm_buffers") == 0


# ---------------------------------------------------------------- stack = deepspeed
# tests/published/deepspeed_peaks.json: measured DeepSpeed ZeRO peaks, each with its source,
# quote, statistic and configuration (docs/research/deepspeed.md reads DeepSpeed 0.19.8).  One
# states its statistic and its whole configuration: DeepSpeedExamples' bf16_master_weight
# baseline (ZeRO-3 over 4 H100s, torch.cuda.max_memory_allocated), whose peak is the optimizer
# step's fp32 gradient copy of one sub-group.
DEEPSPEED = {c["id"]: c for c in json.loads((PUBLISHED / "deepspeed_peaks.json").read_text())["cases"]}
DS_HELD = {"ds-bf16-master-baseline-6.9b-z3-4xh100": "peak_allocated"}
#: rows not held to 5 %, why, and the statistic their figure most likely is (printed beside)
DS_LEFT = {
    "ds-bf16-master-bf16full-6.9b-z3-4xh100": (
        "peak_allocated", "bf16 master weights and optimizer states under DeepSpeed's torch_autocast path "
        "(how it stores the parameters was not read; 3.4 GiB unexplained at the end of the step)"),
    "ds-muon-blog-qwen2.5-3b-z2-adamw-8xa100": ("peak_allocated", "statistic not stated; batch and length inferred"),
    "msswift-qwen2.5-14b-z3-8xa800": ("peak_reserved", "statistic not stated (GB vs GiB, reserved or nvidia-smi)"),
    "msswift-qwen2.5-14b-z2-8xa800": ("peak_reserved", "80 GB is the device: the run was at capacity"),
    "peft-llama2-70b-lora-z3-8xh100": ("device_used", "read from a screenshot; library versions not stated"),
    "peft-llama2-70b-qlora-z3-2gpu": ("device_used", "statistic and GPU not stated; QLoRA storage in bf16"),
    "ds5305-gpt-7b-ulysses-sp4-dp2-z3-recompute": ("device_used", "Ulysses sequence parallelism's all-to-all buffers; statistic not stated"),
    "ds5305-gpt-7b-ulysses-sp4-dp2-z2-recompute": ("device_used", "as above"),
    "ds5305-gpt-7b-ulysses-sp4-dp2-z3-norecompute": ("device_used", "as above"),
    "ds5305-gpt-7b-ulysses-sp4-dp2-z2-norecompute": ("device_used", "as above"),
}
DS_UNITS = {"GiB": 2**30, "GB": 10**9}


def deepspeed_settings(lib, cf: dict) -> dict:
    """A row's configuration in memform's names: numbers written as '5e8 (...)' or
    'auto (hidden_size^2 = 26214400)' are the number DeepSpeed used."""
    values = {}
    for key, value in cf.items():
        if key not in lib.decls or key == "model":
            continue
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, str) and "(" in value:
            inner = value[value.index("(") + 1:].rstrip(")")
            value = inner.rpartition("=")[2].strip() if value.startswith("auto") else value.split()[0]
        elif isinstance(value, float) and value == int(value):
            value = int(value)
        values[key] = value
    values.setdefault("precision", "bf16_mixed")
    return values


def predict_deepspeed(lib, case_id: str, statistic: str) -> tuple[float, float, float]:
    case = DEEPSPEED[case_id]
    cf = case["config"]
    values = dict(parse_setting(lib, f"{k}={v}") for k, v in deepspeed_settings(lib, cf).items())
    s = Scenario.create(lib, cf.get("model"), values=values)
    measured = case["value"] * DS_UNITS[case["unit"].split()[0]]
    predicted = float(s.evaluate(statistic))
    return measured, predicted, (predicted - measured) / measured


def test_every_deepspeed_row_is_held_or_left_with_a_reason():
    assert set(DEEPSPEED) == set(DS_HELD) | set(DS_LEFT)


@pytest.mark.parametrize("case_id", sorted(DS_HELD))
def test_deepspeed_peaks_within_five_percent(lib, case_id):
    measured, predicted, error = predict_deepspeed(lib, case_id, DS_HELD[case_id])
    assert abs(error) <= 0.05, (case_id, measured / 2**30, predicted / 2**30, error)


def test_the_table_of_every_deepspeed_row(lib, capsys):
    rows = [(name, stat, *predict_deepspeed(lib, name, stat), why)
            for name, (stat, why) in [*((n, (s, "")) for n, s in DS_HELD.items()), *DS_LEFT.items()]]
    with capsys.disabled():
        print("\nDeepSpeed published peaks vs memform --stack deepspeed (the figure named)")
        for name, stat, measured, predicted, error, why in rows:
            print(f"{name:48} {stat:15} {measured / 2**30:6.1f} {predicted / 2**30:6.1f} GiB {error:+7.1%}  {why}")


def test_deepspeed_zero3_step_holds_one_sub_group_in_fp32(lib):
    # DeepSpeed 0.19.8 stage3.py _prepare_fp32_grad_for_sub_group: the flat bf16 gradient of a
    # sub-group (at most sub_group_size = 1e9 partition elements) and its fp32 copy, 6 B each
    s = Scenario.create(lib, "llama2-7b", values={"stack": "deepspeed", "zero_stage": 3, "dp": 4})
    assert s.evaluate("ds_step_temp") == 6 * 10**9  # 6,738,415,616 / 4 > 1e9
    assert s.with_values(dp=8).evaluate("ds_step_temp") == 6 * 6_738_415_616 // 8
    # ZeRO-1/2 convert the whole partition of the one parameter group; ZeRO-2 frees the
    # gradients after the step, ZeRO-3 keeps its bf16 partition from initialisation
    z2 = s.with_values(zero_stage=2)
    assert z2.evaluate("ds_step_temp") == 6 * 6_738_415_616 // 4
    assert (z2.evaluate("grads_persist"), s.evaluate("grads_persist")) == (0, 1)
    # the reduce bucket: 5e8 bf16 elements, one and a copy for each reduction under ZeRO-2 (no
    # overlap_comm), ZeRO-3's kept from initialisation
    assert z2.evaluate("ds_backward_buffers") == 2 * 5 * 10**8 * 2
    assert s.evaluate("ds_persistent_buffers") == 5 * 10**8 * 2


def test_megatron_recompute_modules_free_what_the_next_module_saved(lib):
    # Megatron-LM d98e8a64: a recomputed module runs without autograd and keeps its inputs
    # (tensor_parallel.CheckpointWithoutOutput); its output, which the next module saved, is freed
    # after that module's forward. DeepSeek-V3's dims (h 7168, 128 heads of 128 + 64 rotary, values
    # 128, experts 2048 wide, top-8), tp 2 with sequence parallelism, 4096 tokens, bf16
    s = Scenario.create(lib, "deepseek-v3", values={"stack": "megatron", "tp": 2, "sequence_parallel": "true",
                                                    "seq_len": 4096, "micro_batch": 1})
    tokens = 4096

    def saved(rule, **modules):
        return s.with_values(**{f"recompute_{m}": "true" for m in modules}).evaluate(rule)

    # layernorm: MLA's input norm (a module of its own: TENorm, not fused into a projection) keeps
    # its input but not its fp32 reciprocal RMS, and the q and kv down projections no copy of the
    # normalised input (bf16), each per sequence-parallel shard; likewise an MoE layer's pre-MLP norm
    # for the router and the shared expert
    norm = tokens * (7168 * 2 + 4) // 2
    assert saved("architecture_attention") - saved("architecture_attention", layernorm=1) == norm
    assert saved("architecture_moe_mlp") - saved("architecture_moe_mlp", layernorm=1) == norm
    # mla_up_proj: the query (128 x 192) and key and value (128 x 192 + 128 x 128) core attention
    # saved, bf16 over tp 2
    assert saved("architecture_attention") - saved("architecture_attention", mla_up_proj=1) == tokens * (24576 + 40960)
    # moe_act: fc2's input, the weighted SwiGLU's output, 2048 wide for each of the 8 routed copies
    assert saved("architecture_moe_mlp") - saved("architecture_moe_mlp", moe_act=1) == tokens * 8 * 2048 * 2 // 2
    # mlp: a dense layer's MLP keeps the checkpoint's input alone, the residual stream its fused
    # norm reads (bf16, sequence-parallel shard); an MoE layer's is not affected
    assert saved("architecture_dense_mlp", mlp=1) == tokens * 7168 * 2 // 2
    assert saved("architecture_moe_mlp", mlp=1) == saved("architecture_moe_mlp")
    # moe: the MoE layer's MLP keeps its norm (bf16 input and fp32 reciprocal RMS) and the
    # checkpoint's input, the normalised hidden states (bf16), per sequence-parallel shard;
    # shared_experts: the shared expert (2048 wide, fused SwiGLU) keeps nothing beyond that input:
    # its fc1 output (2 x 2048) and fc2's input (2048), bf16 over tp 2
    assert saved("architecture_moe_mlp", moe=1) == tokens * (7168 * 2 + 4 + 7168 * 2) // 2
    assert saved("architecture_moe_mlp") - saved("architecture_moe_mlp", shared_experts=1) == tokens * 3 * 2048 * 2 // 2
    # a stack other than Megatron has no such modules; full recomputation supersedes them
    other = s.with_values(stack="generic", activation_model="architecture")
    assert other.with_values(recompute_mla_up_proj="true").evaluate("architecture_attention") == \
        other.evaluate("architecture_attention")
    full = s.with_values(recompute="full")
    assert full.with_values(recompute_moe_act="true").evaluate("architecture_moe_mlp") == \
        full.evaluate("architecture_moe_mlp")
