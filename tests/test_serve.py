"""memform serve: vLLM's KV budget (formulas/serving.mem) and inference without training
activations (issue 14, first piece).  Expected figures are derived by hand in each test from
vLLM's documented budget rule, or read from published vLLM startup logs (tests/published/)."""
import io
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from engine.cli import main
from engine.compile.model import Scenario, parse_setting
from engine.answers.serve import serve

GiB = 2**30
H100_NVIDIA_SMI = 81559 * 2**20          # the h100-80g preset: what nvidia-smi reports
#: what CUDA reports (torch.cuda.mem_get_info, vLLM's "79.19 GiB"): nvidia-smi's total less the 469 MiB the
#: driver reserves (deviceQuery 85,028,896,768 bytes, R570; docs/research/cuda-total-memory.md)
H100_CUDA = (81559 - 469) * 2**20
LLAMA31_8B = 8_030_261_248               # Hugging Face model card of Llama-3.1-8B
PUBLISHED = json.loads((Path(__file__).parent / "published" / "vllm_serving.json").read_text())["rows"]


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- inference memory
def test_inference_holds_one_forward_not_saved_activations(lib):
    # Llama-3.1-8B, one prefill of 8192 tokens in bf16: nothing is saved for backward; the
    # largest block alive is the MLP.  Eager code (vLLM's --enforce-eager, fused add-and-norm in
    # place): residual and normed input (2 x 4096), gate/up (2 x 14336) and SiLU-and-mul's output
    # (14336) per token, 2 bytes each
    s = Scenario.create(lib, "llama3.1-8b", values={"mode": "infer", "seq_len": 8192, "enforce_eager": "true"})
    assert s.evaluate("activations") == 8192 * (2 * 4096 + 3 * 14336) * 2
    # tp = 2 splits the inner tensors, not the residual stream
    assert s.with_values(tp=2).evaluate("activations") == 8192 * (2 * 4096 + 3 * 14336 // 2) * 2
    # vLLM's default, torch.compile pieces split at attention: the piece holds its inputs (the
    # attention output, 32 heads x 128, and the old residual) while it writes the new residual;
    # the normed input is freed after gate/up: 6h + 6 d_ff bytes per token
    # (docs/research/vllm-forward-peak.md, 864 MiB at 8192 tokens)
    compiled = s.with_values(enforce_eager="false")
    assert compiled.evaluate("activations") == 8192 * (6 * 4096 + 6 * 14336) == 864 * 2**20
    assert compiled.with_values(tp=2).evaluate("activations") == 8192 * (2 * 4096 + 4096 // 2 + 3 * 14336 // 2) * 2
    # eager attention's s x s scores and recomputation are training notions: no effect here
    assert s.with_values(attention="eager").evaluate("activations") == s.evaluate("activations")
    assert s.with_values(recompute="full").evaluate("activations") == s.evaluate("activations")
    # logits only for the sampled rows: one per sequence, fp32
    assert s.with_values(micro_batch=4).evaluate("logits") == 4 * 128256 * 4


def test_estimate_in_infer_mode_is_far_below_training_activations():
    # issue 14: the old figure was Korthikanti's saved-for-backward bytes, 34 s b h per layer
    # (+ scores); a forward's working set of Llama-3.1-8B as vLLM runs it (compiled pieces) is
    # (3h + 3 d_ff) x 2 B = 110,592 B/token
    code, out, _ = run("estimate", "llama3.1-8b", "--set", "mode=infer", "--set", "seq_len=4096", "--json")
    assert code == 0
    assert json.loads(out)["components"]["activations"] == 4096 * 110_592


# ---------------------------------------------------------------- the budget, by hand
def hand_budget(total, util, weights, act, non_torch, per_block, block_size, max_model_len):
    """vLLM V1: KV memory = util x total - (weights + activation peak + non-torch);
    blocks = floor(KV memory / (block_size x bytes per token of every layer))."""
    kv = math.ceil(Fraction(util) * total) - weights - act - non_torch
    blocks = math.floor(kv / per_block)
    tokens = blocks * block_size
    return kv, blocks, tokens, Fraction(tokens, max_model_len)


def test_llama31_8b_on_one_h100_at_0_9(lib):
    # weights 2 P; the profile run's peak is its sampler: 1024 rows (max_num_seqs on an 80 GB
    # GPU) x 128,256 vocabulary x 14 B (bf16 logits, their fp32 copy, fp32 probabilities, fp32
    # exponential noise) and the Triton top-k/top-p scratch buffer (132 SMs x 128,256 x fp32),
    # with the forward's 8192 x 4096 bf16 hidden states, the 1024 sampled rows and their random
    # stand-in still held, above the forward itself (8192 x 110,592 B and Inductor's 50 MiB L2
    # buffer), plus cuBLAS's 32 MiB and cuBLASLt's 1 MiB workspaces on Hopper (docs/research/vllm-gpt-oss.md); 0.25 GiB outside
    # torch at tp = 1; one block is 16 tokens x 32 layers x K,V x 8 heads x 128 x 2 B.  Loading
    # the model takes the weights and the rotary cos/sin table: 131,072 positions
    # (max_position_embeddings) x 128 (head_dim) in bf16
    act = max(1024 * 128256 * 14 + 132 * 128256 * 4 + (8192 + 2 * 1024) * 4096 * 2, 8192 * 110_592 + 50 * 2**20) + 33 * 2**20
    per_block = 16 * 32 * 2 * 8 * 128 * 2
    loaded = 2 * LLAMA31_8B + 131072 * 128 * 2
    kv, blocks, tokens, concurrency = hand_budget(H100_CUDA, Fraction(9, 10), loaded, act,
                                                  GiB // 4, per_block, 16, 8192)
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={"seq_len": 8192})
    r = serve(s, formulas=False, explicit={"seq_len"}).rules
    assert r["model_memory"] == loaded and r["activation_peak"] == act
    assert r["kv_cache_memory"] == kv
    assert (r["num_gpu_blocks"], r["kv_cache_tokens"], r["max_concurrency"]) == (blocks, tokens, concurrency)
    assert (blocks, tokens) == (27722, 443552)  # the arithmetic above, done once by hand
    # the command line prints the same figures
    code, out, _ = run("serve", "llama3.1-8b", "--engine", "vllm", "--gpu", "h100-80g",
                       "--set", "gpu_memory_utilization=0.9", "--set", "max_model_len=8192", "--json")
    got = json.loads(out)
    assert code == 0 and got["rules"]["num_gpu_blocks"] == blocks and got["rules"]["kv_cache_tokens"] == tokens
    assert got["max_model_len"] == 8192 and got["rules"]["max_concurrency"] == pytest.approx(float(concurrency))


def test_cuda_graph_pool_and_enforce_eager(lib):
    # v0.19 captures the graphs after sizing the KV cache: nothing comes off by default; with
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 the estimate does (0.5 GiB by default, pinned here)
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={"seq_len": 8192, "cudagraph_estimate": GiB})
    base = serve(s, formulas=False, explicit={"seq_len"}).rules["kv_cache_memory"]
    counted = serve(s.with_values(estimate_cudagraphs="true"), formulas=False, explicit={"seq_len"}).rules
    assert counted["kv_cache_memory"] == base - GiB
    eager = s.with_values(estimate_cudagraphs="true", enforce_eager="true")
    assert serve(eager, formulas=False, explicit={"seq_len"}).rules["kv_cache_memory"] == base


def test_vllm_releases_change_the_budget(lib):
    # vllm/config/cache.py: gpu_memory_utilization's default 0.9 in v0.19.1, 0.92 in v0.20.0;
    # vllm/envs.py: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "0" in v0.19.0, "1" in v0.20.0, so the
    # graph pool's estimate comes off the KV cache from v0.20 (docs/research/vllm-versions.md)
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={"seq_len": 8192, "cudagraph_estimate": GiB})
    old = serve(s, formulas=False, explicit={"seq_len"}).rules
    new = serve(s.with_values(vllm_version=20), formulas=False, explicit={"seq_len"}).rules
    assert old["requested_memory"] == math.ceil(Fraction(9, 10) * H100_CUDA)
    assert new["requested_memory"] == math.ceil(Fraction(92, 100) * H100_CUDA)
    assert new["cudagraph_reserve"] == GiB and old["cudagraph_reserve"] == 0
    # v0.29 runs every model with the V2 model runner, whose profile run samples without
    # sampling parameters: the bf16 logits alone (no fp32 copy, softmax, noise or top-k/top-p
    # buffer) and no random stand-in for the sampled rows' hidden states
    v2 = s.with_values(vllm_version=29)
    assert v2.evaluate("profile_sampler_peak") == 1024 * 128256 * 2 + (8192 + 1024) * 4096 * 2
    # v0.25-0.28 put dense models on it with the logits' fp32 copy; MoE models stay on V1 there
    assert s.with_values(vllm_version=25).evaluate("profile_sampler_peak") == 1024 * 128256 * 6 + (8192 + 1024) * 4096 * 2
    moe = Scenario.create(lib, "qwen3-30b-a3b", "h100-80g", values={"mode": "infer", "serving_engine": "vllm"})
    assert moe.with_values(vllm_version=25).evaluate("vllm_v2_runner") == 0
    assert moe.with_values(vllm_version=29).evaluate("vllm_v2_runner") == 1
    # the command line takes the release as vLLM writes it
    code, out, _ = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--engine-version", "0.29.0",
                       "--set", "max_model_len=8192", "--json")
    assert code == 0 and json.loads(out)["inputs"]["vllm_version"] == "29"
    code, _, err = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--engine-version", "0.8.5")
    assert code == 2 and "0.10 to 0.34" in err
    # v0.34's extensible KV cache is not modelled: refused unless it is off
    code, _, err = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--engine-version", "0.34")
    assert code == 2 and "extensible_kv_cache=false" in err
    code, out, _ = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--engine-version", "0.34",
                       "--set", "extensible_kv_cache=false", "--set", "max_model_len=8192", "--json")
    assert code == 0 and json.loads(out)["rules"]["gpu_memory_utilization"] == 0.92


def test_mla_down_projections_are_whole_on_every_rank(lib):
    # vLLM 0.19 deepseek_v2.py: fused_qkv_a_proj (hidden -> q_lora_rank + kv_lora_rank + rope key)
    # is built with disable_tp=True and q_a_layernorm / kv_a_layernorm are RMSNorms: at tp = 8 each
    # rank holds them whole beside its eighth of everything else. DeepSeek-V3 in bf16: 61 layers,
    # 7168 x (1536 + 512 + 64) each, and the 1536 + 512 norm weights
    s = Scenario.create(lib, "deepseek-v3", values={"mode": "infer", "serving_engine": "vllm", "tp": 8,
                                                    "weight_dtype": "bf16"})
    whole = s.evaluate("vllm_weights") - s.with_values(attention_type="gqa").evaluate("vllm_weights")
    one = s.with_values(tp=1)  # an eighth of the whole model's difference: every part split
    split = (one.evaluate("weights") - one.with_values(attention_type="gqa").evaluate("weights")) / 8
    assert whole - split == 61 * (7168 * 2112 + 1536 + 512) * 2 * Fraction(7, 8)


def test_tp_splits_weights_and_kv_heads(lib):
    # Llama-3.1-70B at tp = 4 on H100: each GPU caches 2 of the 8 KV heads over 80 layers
    s = Scenario.create(lib, "llama3.1-70b", "h100-80g", values={"seq_len": 8192, "tp": 4})
    r = serve(s, formulas=False, explicit={"seq_len", "tp"}).rules
    assert r["kv_block_bytes"] == 16 * 80 * 2 * 2 * 128 * 2
    assert r["non_torch_memory"] == Fraction(215, 100) * GiB
    assert r["kv_cache_tokens"] == r["num_gpu_blocks"] * 16 and r["num_gpu_blocks"] > 0


# ---------------------------------------------------------------- published vLLM logs
def _row_id(row):
    return row["id"]


@pytest.mark.parametrize("row", PUBLISHED, ids=_row_id)
def test_published_vllm_startup(lib, row):
    how = row["memform"]
    if "skip" in how:
        pytest.skip(how["skip"])
    values = dict(parse_setting(lib, f"{k}={v}") for k, v in how["set"].items())
    scenario = Scenario.create(lib, how["preset"], values=values)
    r = serve(scenario, formulas=False, explicit=set(values)).rules
    logged = row["measured"]["values"]
    # the model within 1 % ('Model loading took X GiB', printed to 0.01 GiB)
    assert float(r["model_memory"]) / GiB == pytest.approx(logged["weights_gib"], rel=0.01)
    # KV tokens ('GPU KV cache size: N tokens') within 3 % for dense full-attention models,
    # 5 % for sliding-window, MoE and MLA models (issue 14's tiers)
    tier = 0.05 if (scenario.evaluate("num_experts") > 0 or scenario.evaluate("sliding_window") > 0
                    or scenario.values["attention_type"] != "gqa") else 0.03
    assert r["kv_cache_tokens"] == pytest.approx(logged["kv_cache_tokens"], rel=tier)
    # the log's concurrency follows from its own blocks and tokens by vLLM's rule (checked on the
    # logged figures), and memform's by the same rule: blocks / the blocks one request takes
    groups = round(logged["num_gpu_blocks"] * 16 / logged["kv_cache_tokens"])
    assert logged["num_gpu_blocks"] // groups * 16 == logged["kv_cache_tokens"]
    request = r["num_gpu_blocks"] / r["max_concurrency"]
    assert round(float(logged["num_gpu_blocks"] / request), 2) == logged["max_concurrency"]


V019 = [row for row in PUBLISHED if row["id"].startswith("llmd-vllm0.19-")]
#: rows held to the issue's 3 % rather than 0.5 %, with why
V019_WIDER = {
    "llmd-vllm0.19-h100-qwen2.5-72b-instruct-tp2pp1-len8192":
        "a 3 GiB KV cache, where the model's +24 MiB (some of its 231 MiB down projections reuse freed "
        "blocks; the sizes alone give each a fresh 232 MiB segment) and the non-torch figure's +60 MiB (2.15 GiB, "
        "this log 2.09) are 2.6 % of the tokens",
}


def test_published_vllm_019_runs_within_half_a_percent(lib):
    # the llm-d-planner v0.19.0 logs (H100, gpu_memory_utilization 0.95): the KV tokens within
    # 0.5 % and the model within 1 % for every one, dense, MoE, quantised, sliding-window,
    # vision-language, fp32, fp8 KV cache and pipeline-parallel runs alike, with the h100-80g
    # preset's own total (nvidia-smi's 81559 MiB less the 469 MiB the driver reserves: the logs'
    # 79.19 GiB) in place of the rows' pinned one
    assert len(V019) >= 28
    misses = []
    for row in V019:
        how = row["memform"]
        values = dict(parse_setting(lib, f"{k}={v}") for k, v in how["set"].items() if k != "total_gpu_memory")
        r = serve(Scenario.create(lib, how["preset"], "h100-80g", values=values), formulas=False,
                  explicit=set(values)).rules
        assert round(float(r["total_gpu_memory"]) / GiB, 2) == row["measured"]["values"]["total_gpu_gib"] == 79.19
        logged = row["measured"]["values"]
        tokens = r["kv_cache_tokens"] / logged["kv_cache_tokens"] - 1
        loading = float(r["model_memory"]) / GiB / logged["weights_gib"] - 1
        if abs(tokens) > (0.03 if row["id"] in V019_WIDER else 0.005) or abs(loading) > 0.01:
            misses.append((row["id"], f"tokens {100 * tokens:+.2f} %", f"loading {100 * loading:+.2f} %"))
        if row["id"] in V019_WIDER and abs(tokens) <= 0.005:  # listed while it is a gap
            misses.append((row["id"], "within 0.5 %: take it off V019_WIDER"))
        # the profile run's peak ('torch peak memory increase', printed to 0.01 GiB) within 0.015
        # GiB; with pipeline stages the row quotes one rank's (test_published_pipeline_stages_...)
        if how["set"].get("pp", 1) == 1 and abs(float(r["activation_peak"]) / GiB - logged["activation_peak_gib"]) > 0.015:
            misses.append((row["id"], f"activation peak {float(r['activation_peak']) / GiB:.3f} GiB"))
    assert not misses, misses


def test_forward_sets_the_peak_as_logged_where_the_sampler_is_small(lib):
    # vLLM 0.19's compiled forward over 8192 tokens (6h + 6 d_ff bytes per token), cuBLAS's 33 MiB
    # and Inductor's 50 MiB L2-flush buffer (H100) set the logged peak where the vocabulary is
    # small: CodeLlama-7B (d_ff 11008, 32,016 tokens) 0.77 GiB, Granite-3.3-8B (d_ff 12800) 0.85 GiB
    # (llm-d-planner's logs, tests/published/vllm_serving.json)
    for model, d_ff in (("codellama-7b-hf", 11008), ("granite-3.3-8b-instruct", 12800)):
        row = next(r for r in V019 if model in r["id"])
        how = row["memform"]
        values = dict(parse_setting(lib, f"{k}={v}") for k, v in how["set"].items() if k != "total_gpu_memory")
        s = Scenario.create(lib, how["preset"], "h100-80g", values=values)
        by_hand = 8192 * (6 * 4096 + 6 * d_ff) + 33 * 2**20 + 50 * 2**20
        assert s.evaluate("activation_peak") == by_hand
        assert round(by_hand / GiB, 2) == row["measured"]["values"]["activation_peak_gib"]
        # a warm compile cache benchmarks nothing; eager code keeps neither the held attention
        # output nor the buffer (its add-and-norm runs in place)
        assert s.with_values(compile_cache="warm").evaluate("profile_forward_peak") == 8192 * (6 * 4096 + 6 * d_ff)
        eager = s.with_values(enforce_eager="true").evaluate("profile_forward_peak")
        assert eager == 8192 * (4 * 4096 + 6 * d_ff)


def test_published_rows_keep_their_sources():
    assert len(PUBLISHED) >= 20
    for row in PUBLISHED:
        assert row["source"]["url"].startswith("https://github.com/") and row["quote"]
        assert "skip" in row["memform"] or "preset" in row["memform"]


# ---------------------------------------------------------------- the command
def test_serve_table_shows_each_figure_with_its_formula():
    code, out, _ = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--set", "max_model_len=8192")
    assert code == 0
    # the figures of test_llama31_8b_on_one_h100_at_0_9 (27,722 blocks of 16 tokens; 27,722 / 512
    # blocks per request of 8,192 tokens = 54.14)
    for text in ("ceiling(gpu_memory_utilization*total_gpu_", "vllm_weights = weights",
                 "kv_cache_memory =", "KV cache blocks (num_gpu_blocks)", "27,722", "443,552",
                 "model_memory = draft_weights +", "rope_cache_bytes + vllm_allocator_slack +",
                 "maximum concurrency for 8,192 tokens per request: 54.14x"):
        assert text in out


def test_serve_errors_are_usage_errors():
    code, _, err = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--set", "gpu_memory_utilization=1.5")
    assert code == 2 and "gpu_memory_utilization" in err and "^" in err  # located in the --set value
    assert run("serve", "llama3.1-8b")[0] == 2                            # no device memory
    assert run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--engine", "tgi")[0] == 2  # not an engine modelled
    code, _, err = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--set", "mode=train")
    assert code == 2 and "inference" in err
    code, out, _ = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--tp", "3", "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "DomainError"  # 3 does not divide 32 heads
    # vLLM dropped Mllama with its encoder-decoder models (vllm-project/vllm PR 24907); the other
    # engines' cross-attention pools are not modelled: said, not sized as a text model's
    for engine in ("vllm", "sglang", "trtllm"):
        code, _, err = run("serve", "llama3.2-11b-vision", "--gpu", "h100-80g", "--engine", engine)
        assert code == 2 and "cross-attention" in err


def test_serve_that_does_not_fit_exits_1():
    # Llama-3.1-70B's bf16 weights (141 GB) exceed one H100's budget: no KV cache at all
    code, out, _ = run("serve", "llama3.1-70b", "--gpu", "h100-80g", "--set", "max_model_len=8192")
    assert code == 1 and "does not serve one request" in out


def test_default_max_model_len_is_the_models_context(lib):
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g")
    result = serve(s, formulas=False)
    assert result.scenario.values["seq_len"] == 131072  # max_position_embeddings, vLLM's default


# ---------------------------------------------------------------- SGLang
# tests/published/sglang_serving.json: SGLang startup logs with their configuration; SGLang's
# KV pool is mem_fraction_static x T0 - weights ('Load weight begin. avail mem' = T0, GiB).
# memform's own weights and cell size are checked: T0 and mem_fraction_static come from the
# log (or the version's default, which the row records).
SGLANG = {r["id"]: r for r in json.loads((Path(__file__).parent / "published" / "sglang_serving.json")
                                         .read_text())["rows"]}
#: rows whose model is a memform preset: (preset, GPU preset, T0 in GiB as logged)
SGLANG_ROWS = {
    "sglang-docs-llama31-8b-tp1-h100-2025-01": ("llama3.1-8b", "h100-80g", "78.81"),
    "sglang-r1-distill-qwen7b-tp1-rtx3090": ("qwen2.5-7b", None, "22.76"),  # Qwen2.5-Math-7B's shape
    "sglang-pr11716-llama31-70b-tp8-h200": ("llama3.1-70b", "h200-141g", "137.29"),
    # T0 = 'Load weight end' avail 160.78 + mem usage 15.50
    "sglang-pr22537-qwen3-32b-tp4-b200": ("qwen3-32b", "b200", "176.28"),
}


@pytest.mark.parametrize("row_id", list(SGLANG_ROWS))
def test_sglang_kv_tokens_against_its_logs(lib, row_id):
    row = SGLANG[row_id]
    model, gpu, t0 = SGLANG_ROWS[row_id]
    mfs = row["config"]["mem_fraction_static"]["value"]
    s = Scenario.create(lib, model, gpu, values={
        "tp": row["config"]["tp"], "startup_free_memory": sympy.Rational(t0) * 2**30,
        **({"capacity": 24576 * 2**20} if gpu is None else {}),  # an RTX 3090 (no preset yet)
        **({"sglang_version": "503"} if gpu == "h200-141g" else {"mem_fraction_static": sympy.Rational(str(mfs))})})
    result = serve(s, "sglang", formulas=False, explicit={"startup_free_memory", "mem_fraction_static", "tp"})
    if gpu == "h200-141g":  # v0.5.3's default on an H200 at tp 8: reserved 14,848 MiB -> 0.897
        assert result.rules["mem_fraction_static"] == Fraction("0.897") == Fraction(str(mfs))
    logged = row["logged"]["kv_tokens"]
    tokens = result.rules["max_total_num_tokens"]
    # memform's weights are the tensors; SGLang's T0 - A adds the loader's leftovers (0.1-0.2
    # GiB), which on a 24 GB card's 6 GiB pool is 3.7 % of its tokens (0.2-0.3 % on the others)
    assert abs(tokens - logged) / logged < 0.05, (tokens, logged)


def test_sglang_default_mem_fraction_static_on_an_h100(lib):
    # v0.5.3 to v0.5.9: reserved = 512 + 1.5 x 8192 + 2 x 256 + 1024 x 1 / 8 = 13,440 MiB (over the
    # 10 GiB floor); round((81559 - 13440) / 81559, 3) = 0.835
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={"mode": "infer", "serving_engine": "sglang",
                                                                 "sglang_version": "508"})
    assert s.evaluate("sglang_reserved_memory") == 13_440 * 2**20
    assert s.evaluate("mem_fraction_static") == Fraction("0.835")
    # from v0.5.10 the prefill CUDA graphs' sizes up to 8,192 tokens: 4..32 by 4 (8), 48..256 by 16
    # (14), 288..512 by 32 (8), 576..1024 by 64 (8), 1280..4096 by 256 (12), 4608..8192 by 512 (8)
    # = 58, 8 MiB each: 13,904 MiB, round(67655 / 81559, 3) = 0.830 (reserve_for_graph_mb)
    new = s.with_values(sglang_version="523")
    assert new.evaluate("sglang_prefill_graph_buckets") == 8 + 14 + 8 + 8 + 12 + 8
    assert new.evaluate("sglang_reserved_memory") == 13_904 * 2**20
    assert new.evaluate("mem_fraction_static") == Fraction("0.830")
    # MLA keeps a flat 1.5 GiB for them, but not from v0.5.15 to v0.5.17 (the breakable graph was
    # off for MLA); with pipeline stages none up to v0.5.14 and from v0.5.19
    mla = new.with_values(attention_type="mla")
    assert mla.evaluate("sglang_prefill_graph_reserve") == 1536 * 2**20
    assert mla.with_values(sglang_version="516").evaluate("sglang_prefill_graph_reserve") == 0
    assert new.with_values(pp=2).evaluate("sglang_prefill_graph_reserve") == 0
    assert new.with_values(pp=2, sglang_version="517").evaluate("sglang_prefill_graph_reserve") == 58 * 8 * 2**20
    # none on ROCm (an MI300X) nor for a multimodal model
    assert Scenario.create(lib, "llama3.1-8b", "mi300x", values={"mode": "infer", "serving_engine": "sglang"}
                           ).evaluate("sglang_prefill_graph_reserve") == 0


def test_sglang_default_on_a_24_gb_card_from_v0520(lib):
    # memory_hook.py (0.5.20): below 35 GiB the chunk is 4096 and the decode graphs' largest batch
    # 48 at tp < 4; reserved = 512 + 1.5 x 4096 + 2 x 48 + 1024 / 8 + 50 prefill sizes x 8 =
    # 7,280 MiB (no floor under 60 GiB); an RTX 4090's 24,564 MiB: round(17284 / 24564, 3) = 0.704
    # (0.5.19: 2048, 24 and 42 sizes: 512 + 3072 + 48 + 128 + 336 = 4,096 MiB, 0.833)
    s = Scenario.create(lib, "llama3.1-8b", "rtx4090", values={"mode": "infer", "serving_engine": "sglang",
                                                                "sglang_version": "520"})
    assert (s.evaluate("chunked_prefill_size"), s.evaluate("cuda_graph_max_bs")) == (4096, 48)
    assert s.evaluate("sglang_reserved_memory") == 7_280 * 2**20
    assert s.evaluate("mem_fraction_static") == Fraction("0.704")
    old = s.with_values(sglang_version="519")
    assert old.evaluate("sglang_reserved_memory") == 4_096 * 2**20
    assert old.evaluate("mem_fraction_static") == Fraction("0.833")


#: rows whose mem_fraction_static is their release's default: (SGLang release, GPU preset or
#: nvidia-smi MiB, tp, a vision encoder's layers and width)
SGLANG_DEFAULTS = {
    "sglang-docs-llama31-8b-tp1-h100-2025-01": ("0.4.1", "h100-80g", 1, None),
    "sglang-pr4760-llama31-8b-tp1-h100-fa3": ("0.4.4", "h100-80g", 1, None),
    "sglang-r1-distill-qwen7b-tp1-rtx3090": ("0.4.2", "rtx3090", 1, None),
    "sglang-qwq32b-tp4-4xL4": ("0.4.3.post4", "l4", 4, None),
    "sglang-llama31-8b-tp1-24gb-consumer": ("0.4.9", "rtx4090", 1, None),
    "sglang-grok2-fp8-tp8-h100": ("0.5.2", "h100-80g", 8, None),
    "sglang-pr11716-llama31-70b-tp8-h200": ("0.5.3", "h200-141g", 8, None),
    # an MI355X (288 GiB; any total from 293,362 to 296,586 MiB gives 0.908 before the scaling)
    # and Kimi-K2.5's MoonViT encoder (27 layers, 1152 wide)
    "sglang-kimi-k25-tp8-mi355x-mla": ("0.5.8.post1", 294_912, 8, (27, 1152)),
    # v0.5.10's prefill CUDA graphs: 74 sizes up to 16,384 tokens, 592 MiB more reserved
    "sglang-pr22537-qwen3-32b-tp4-b200": ("0.5.10", "b200", 4, None),
}


@pytest.mark.parametrize("row_id", list(SGLANG_DEFAULTS))
def test_sglang_default_mem_fraction_static_of_each_release(lib, row_id):
    # each row records its release's default as read from SGLang's server_args.py of that release
    # (docs/research/sglang.md sec. 4): memform's --engine-version gives the same fraction and
    # chunked-prefill size
    row = SGLANG[row_id]
    release, gpu, tp, vision = SGLANG_DEFAULTS[row_id]
    args = ["serve", "llama3.1-8b", "--engine", "sglang", "--engine-version", release, "--tp", str(tp), "--json"]
    args += ["--gpu", gpu] if isinstance(gpu, str) else ["--capacity", f"{gpu}MiB"]
    if vision:
        args += ["--set", "vision_tower=siglip", "--set", f"vision_num_hidden_layers={vision[0]}",
                 "--set", f"vision_hidden_size={vision[1]}"]
    code, out, err = run(*args)
    assert code in (0, 1), err
    rules = json.loads(out)["rules"]
    assert rules["mem_fraction_static"] == pytest.approx(row["config"]["mem_fraction_static"]["value"], abs=1e-12)
    assert rules["chunked_prefill_size"] == row["config"]["chunked_prefill_size"]


def test_engine_version_names_the_releases_modelled():
    # SGLang's releases not read (0.4.5, 0.4.7, 0.4.8) and TensorRT-LLM's are refused, naming what is
    code, _, err = run("serve", "llama3.1-8b", "--engine", "sglang", "--gpu", "h100-80g", "--engine-version", "0.4.7")
    assert code == 2 and "0.4.6, 0.4.9" in err
    code, _, err = run("serve", "llama3.1-8b", "--engine", "trtllm", "--gpu", "h100-80g", "--engine-version", "1.1.0")
    assert code == 2 and "trtllm are not told apart" in err
    code, out, _ = run("serve", "llama3.1-8b", "--engine", "sglang", "--gpu", "h100-80g", "--engine-version", "v0.5.2rc2",
                       "--json")
    assert code == 0 and json.loads(out)["inputs"]["sglang_version"] == "502"


def test_sglang_hybrid_sliding_window_split_as_published(lib):
    """SGLang's hybrid SWA pool splits the profiled tokens N into full and sliding-window pools.
    Published (sgl-project/sglang PR 18039, MiMo-V2-Flash at tp 4, --page-size 64, ratio 0.8,
    before the fix; docs/research/sglang-swa.md): 'Use sliding window memory pool.
    full_layer_tokens=375360, swa_layer_tokens=300288'. MiMo-V2-Flash has 48 layers, 39 of them
    sliding; its cell size differs from memform's (the fix), so the budget is set to give
    N = 314,368, the one page-rounded count that gives both figures."""
    s = Scenario.create(lib, "llama3.1-8b", values={
        "mode": "infer", "serving_engine": "sglang", "num_hidden_layers": 48, "sliding_window_layers": 39,
        "sliding_window": 128, "sglang_swa_pool": "on", "page_size": 64, "mem_fraction_static": 1, "weights": 0})
    s = s.with_values(startup_free_memory=314_368 * s.evaluate("kv_cell_bytes"))
    assert s.evaluate("sglang_profiled_tokens") == 314_368
    assert s.evaluate("sglang_hybrid_swa") == 1
    assert s.evaluate("max_total_num_tokens") == 375_360
    assert s.evaluate("swa_max_total_num_tokens") == 300_288
    assert s.evaluate("sglang_longest_request") == 300_288  # max_token_pool_size: the smaller pool


@pytest.mark.parametrize("model, hybrid", [("gpt-oss-20b", 1), ("llama4-scout", 1), ("gemma2-9b", 0),
                                           ("gemma3-27b", 0), ("llama3.1-8b", 0)])
def test_sglang_hybrid_sliding_window_pool_only_where_sglang_uses_it(lib, model, hybrid):
    # model_config.py: Llama 4 and gpt-oss (and MiMo); Gemma 2/3 turned off in server_args.py;
    # a model without sliding layers has nothing to split
    s = Scenario.create(lib, model, "h100-80g", values={"mode": "infer", "serving_engine": "sglang", "tp": 4})
    assert s.evaluate("sglang_hybrid_swa") == hybrid
    if hybrid:
        # --disable-hybrid-swa-memory: one pool of every layer, as before the split
        off = s.with_values(sglang_swa_pool="off")
        assert off.evaluate("sglang_hybrid_swa") == 0
        assert off.evaluate("max_total_num_tokens") == off.evaluate("sglang_profiled_tokens") == s.evaluate("sglang_profiled_tokens")
        # with S sliding and F full layers the pools hold what the profiled tokens held over
        # every layer, but for the truncations: F full + S swa <= N L < F full + S swa + 2 L (page 1)
        layers, sliding = s.evaluate("num_hidden_layers"), s.evaluate("sliding_window_layers")
        full, swa, n = (s.evaluate(r) for r in ("max_total_num_tokens", "swa_max_total_num_tokens", "sglang_profiled_tokens"))
        assert (layers - sliding) * full + sliding * swa <= n * layers < (layers - sliding) * full + sliding * swa + 2 * layers
        assert swa == int(full * Fraction(4, 5)) or swa == int(full * Fraction(4, 5)) - 1


def test_memform_serve_engine_sglang_prints_its_log_figures():
    code, out, err = run("serve", "llama3.1-8b", "--engine", "sglang", "--gpu", "h100-80g", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["engine"] == "sglang" and got["rules"]["kv_cell_bytes"] == 32 * 2 * 8 * 128 * 2
    assert got["rules"]["max_total_num_tokens"] == got["rules"]["sglang_kv_memory"] // (32 * 2 * 8 * 128 * 2)


# ---------------------------------------------------------------- TensorRT-LLM
# tests/published/trtllm_serving.json: TensorRT-LLM startup logs with their sources; the
# mechanism (free_gpu_memory_fraction of what the profile run leaves free, whole blocks of
# tokens_per_block) is read from its source in docs/research/trtllm.md.
TRTLLM = {c["id"]: c for c in json.loads((Path(__file__).parent / "published" / "trtllm_serving.json")
                                         .read_text())["cases"]}
GIB = 2**30


def test_trtllm_budget_from_its_own_profile_log(lib):
    """gpt-oss-120b on a DGX Spark (TensorRT-LLM 1.1.0rc3, trtllm-serve): with the log's own
    figures for what memform does not model here (torch memory after warm-up 63.52 GiB, of which
    the 0.56 GiB temporary KV pool is given back; 0.85 GiB allocated in the profile's prefill;
    49.28 GiB outside torch, the host's share of unified memory) and gpt-oss's KV shape (36
    layers x 8 KV heads x 64 x bf16 = the log's 'kv size is 73728'), the rules give the logged
    budget and the logged max tokens within the rounding of the log's two-decimal GiB figures."""
    case = TRTLLM["trtllm-1.1.0rc3-gpt-oss-120b-dgx-spark-tp1"]
    quote = "\n".join(case["quote"])
    assert "kv size is 73728" in quote and "available KV cache memory when calculating max tokens: 5.95 GiB" in quote
    s = Scenario.create(lib, "llama3.1-8b", values={
        "mode": "infer", "serving_engine": "trtllm", "capacity": sympy.Rational("119.70") * GIB,
        "num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 64, "kv_dtype": "bf16",
        "weights": (sympy.Rational("63.52") - sympy.Rational("0.56")) * GIB, "cudagraph_memory": 0,
        "trtllm_activation_peak": sympy.Rational("0.85") * GIB, "non_torch_memory": sympy.Rational("49.28") * GIB})
    assert s.evaluate("kv_cache_per_token") == 73728
    budget = s.evaluate("trtllm_kv_memory")
    assert abs(budget / GIB - sympy.Rational("5.95")) <= sympy.Rational("0.005")  # printed with two decimals
    # four two-decimal figures enter the budget: +-0.02 GiB x 0.9 / 73728 B is +-262 tokens
    assert abs(s.evaluate("trtllm_max_tokens") - 86711) <= 262
    # the final pool: with a budget of 86,711 tokens (a total memory that leaves exactly that),
    # whole 32-token blocks give the logged 86,720
    exact = s.with_values(capacity=s.evaluate("trtllm_profile_peak") + sympy.Rational(10, 9) * (86711 * 73728 + 1))
    assert exact.evaluate("trtllm_max_tokens") == 86711
    assert exact.evaluate("trtllm_kv_tokens") == 86720
    assert "exceeds upper bound 86720" in quote


def test_trtllm_fp8_kv_blocks_on_an_h100(lib):
    """Llama-3.1-8B-Instruct-FP8 on an H100 (TensorRT-LLM 0.20.0, issue 6294): an FP8 KV cache
    costs 32 layers x 8 heads x 128 x 2 x 1 B = 65,536 B per token, and 860,308 estimated tokens
    become 860,320 in 32-token blocks, 52.51 GiB as logged."""
    case = TRTLLM["trtllm-0.20.0-llama31-8b-fp8-h100-issue6294"]
    quote = "\n".join(case["quote"])
    assert "860320" in quote.replace(",", "")
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={
        "mode": "infer", "serving_engine": "trtllm", "kv_dtype": "fp8_e4m3", "free_gpu_memory_fraction": 0.8})
    assert s.evaluate("kv_cache_per_token") == 65536
    # a total memory that leaves a budget of exactly 860,308 tokens (the log's estimate)
    s = s.with_values(total_gpu_memory=s.evaluate("trtllm_profile_peak") + sympy.Rational(5, 4) * (860308 * 65536 + 1))
    assert s.evaluate("trtllm_max_tokens") == 860308
    assert s.evaluate("trtllm_kv_tokens") == 860320
    assert round(float(s.evaluate("trtllm_kv_tokens") * 65536) / GIB, 2) == 52.51


def test_trtllm_takes_a_fraction_of_what_is_free_not_of_the_total(lib):
    # the same deployment under vLLM's rule (0.9 x total - everything) and TensorRT-LLM's
    # (0.9 x (total - everything)): TensorRT-LLM leaves 10 % of the free memory, vLLM 10 % of all
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={"mode": "infer", "seq_len": 8192})
    trt = s.with_values(serving_engine="trtllm")
    free = trt.evaluate("total_gpu_memory") - trt.evaluate("trtllm_profile_peak")
    assert trt.evaluate("trtllm_kv_memory") == sympy.Rational(9, 10) * free


def test_trtllm_pipeline_stages_take_the_fewest_tokens_of_any_rank(lib):
    # TensorRT-LLM (docs/research/pp-engines.md): each rank sizes its pool from its own free memory
    # and its own layers' bytes per token, then max_tokens is all-reduced with MIN.  Llama-3.1-70B
    # at pp = 4: 20 layers a stage (8 KV heads x 128 x K,V x bf16 x 20 = 81,920 B a token);
    # the first stage adds the embedding, the last the final norm and the head (the same size plus
    # the norm), so the last has the least left (by 16 KiB: the same tokens as the first here)
    s = Scenario.create(lib, "llama3.1-70b", "h100-80g", values={"mode": "infer", "seq_len": 8192, "pp": 4,
                                                                 "serving_engine": "trtllm"})
    stage = {st: s.with_values(pp_stage=st) for st in ("first", "middle", "last")}
    for st in stage.values():
        assert st.evaluate("kv_cache_per_token") == 20 * 8 * 128 * 2 * 2
    tokens = {n: math.floor(st.evaluate("trtllm_kv_memory") / 81_920) for n, st in stage.items()}
    assert tokens["last"] <= tokens["first"] < tokens["middle"]
    for st in ("busiest", "first", "last"):
        assert s.with_values(pp_stage=st).evaluate("trtllm_max_tokens") == tokens["last"]
    # torch.tensor_split puts the remainder on the first ranks: 30 layers over 4 are 8, 8, 7, 7
    # (vLLM's split: 7, 8, 8, 7)
    odd = s.with_values(num_hidden_layers=30)
    assert [odd.with_values(pp_stage=st).evaluate("stage_layers") for st in ("first", "middle", "last")] == [8, 8, 7]
    assert odd.with_values(serving_engine="vllm", pp_stage="first").evaluate("stage_layers") == 7


def test_memform_serve_engine_trtllm_prints_its_log_figures():
    code, out, err = run("serve", "llama3.1-8b", "--engine", "trtllm", "--gpu", "h100-80g",
                         "--set", "max_seq_len=8192", "--set", "kv_cache_free_gpu_mem_fraction=0.8", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["engine"] == "trtllm" and got["inputs"]["free_gpu_memory_fraction"] == 0.8
    per_token = 32 * 2 * 8 * 128 * 2
    assert got["rules"]["trtllm_max_tokens"] == got["rules"]["trtllm_kv_memory"] // per_token
    assert got["rules"]["trtllm_kv_tokens"] % 32 == 0
    code, out, err = run("serve", "llama3.1-8b", "--engine", "trtllm", "--gpu", "h100-80g", "--set", "max_seq_len=8192")
    assert code == 0 and "estimated max tokens" in out and "trtllm_kv_tokens =" in out


# ---------------------------------------------------------------- layer kinds (vLLM's hybrid KV cache)
def _vllm(lib, preset, **values):
    s = Scenario.create(lib, preset, "h100-80g", values={"mode": "infer", **values})
    return s, serve(s, formulas=False, explicit=set(values)).rules


@pytest.mark.parametrize("layers, sliding, window, step, group, groups, per_request", [
    # Gemma-2-2B: 13 sliding (4096) + 13 full layers -> one group of each; a request of 8192
    # tokens takes 8192 / 16 = 512 blocks in the full group and min(4096 - 1 + 8192, 8192) / 16
    # + 1 = 513 in the sliding one (vLLM v0.19 logs 81.73x from 83,770 blocks: 83770 / 1025)
    (26, 13, 4096, 8192, 13, 2, 512 + 513),
    # Gemma-3-27B: 52 sliding (1024) + 10 full -> groups of 10 (52 >= 1.5 x 10): 1 + 6 groups;
    # the log's 15,997 blocks give 15997 // 7 x 16 = 36,560 tokens and 15997 / 3590 = 4.46x
    (62, 52, 1024, 8192, 10, 7, 512 + 6 * 513),
    # 12 full + 13 sliding: 13 < 1.5 x 12, so groups of 13 (one of each kind, the full one padded)
    (25, 13, 128, 8192, 13, 2, 512 + 513),
    # a window shorter than the request, with a smaller step: 1024 - 1 + 2048 tokens -> 193 blocks
    (26, 13, 1024, 2048, 13, 2, 512 + 193),
])
def test_sliding_window_layers_in_vllm_groups(lib, layers, sliding, window, step, group, groups, per_request):
    values = {"num_hidden_layers": layers, "sliding_window_layers": sliding, "sliding_window": window,
              "seq_len": 8192, "max_num_batched_tokens": step}
    s, r = _vllm(lib, "gemma2-9b", **values)
    assert s.evaluate("kv_group_size") == group and s.evaluate("kv_cache_groups") == groups
    page = 16 * 2 * 8 * 256 * 2  # 16 tokens x K,V x 8 KV heads x 256 x bf16, one layer
    assert r["kv_block_bytes"] == group * page
    assert r["num_gpu_blocks"] == r["kv_cache_memory"] // (group * page)
    assert r["kv_cache_tokens"] == r["num_gpu_blocks"] // groups * 16
    assert r["max_concurrency"] == Fraction(r["num_gpu_blocks"], per_request)


def test_sliding_window_layers_keep_only_their_window(lib):
    # estimate in infer mode: Gemma 2 9B, 2 sequences of 8192 tokens; the 21 full layers keep
    # 8192 tokens each, the 21 sliding ones 4096; 2 x 8 KV heads x 256 x bf16 per token and layer
    s = Scenario.create(lib, "gemma2-9b", values={"mode": "infer", "micro_batch": 2, "seq_len": 8192})
    per = 2 * 8 * 256 * 2
    assert s.evaluate("kv_cache") == 2 * per * (21 * 8192 + 21 * 4096)
    # within the window both kinds keep every token
    assert s.with_values(seq_len=4096).evaluate("kv_cache") == 2 * per * 42 * 4096


# ---------------------------------------------------------------- solving over serving
def test_longest_max_model_len_for_a_concurrency(capsys):
    # Llama-3.1-8B on one H100 at 0.9: 27,722 blocks of 16 tokens (derived by hand in
    # test_llama31_8b_on_one_h100_at_0_9; they do not depend on max_model_len).  54 requests fit
    # while ceil(L / 16) <= 27722 / 54 = 513.4, i.e. up to 513 x 16 = 8,208 tokens
    code, out, _ = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--max-len-for", "54", "--json")
    got = json.loads(out)
    assert code == 0 and got["solve"]["value"] == 8208
    assert got["rules"]["num_gpu_blocks"] == 27722 and got["max_model_len"] == 8208
    tried = dict(got["solve"]["tried"])
    assert 8208 in tried and all((length <= 8208) == (c >= 54) for length, c in tried.items())


def test_smallest_tp_for_a_concurrency():
    # Llama-3.1-70B, 8k requests on H100s: tp=2 leaves no room for 50 (the bf16 weights alone are
    # 70.6 GB per GPU), tp=4 does (the README's table: 55.50x)
    code, out, err = run("serve", "llama3.1-70b", "--gpu", "h100-80g", "--set", "max_model_len=8192",
                         "--min-tp-for", "50")
    assert code == 0
    assert out.startswith("smallest tp for 50 requests of 8,192 tokens: tp=4   (maximum concurrency at each tp tried: 1: ")
    assert "llama3.1-70b on h100-80g: vllm, tp=4 pp=1" in out


def test_serving_solves_that_cannot_be_met_exit_1():
    code, out, err = run("serve", "llama3.1-70b", "--gpu", "rtx4090", "--set", "max_model_len=8192",
                         "--min-tp-for", "500")
    assert code == 1 and out == ""
    assert err.startswith("memform: error: 500 requests of 8,192 tokens do not fit at any tp up to 64 (tp=1: ")
    code, out, err = run("serve", "llama3.1-70b", "--gpu", "rtx4090", "--max-len-for", "1")
    assert code == 1 and "fewer than 1 requests fit even at max_model_len=16" in err
    code, _, err = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--tp", "2", "--min-tp-for", "5")
    assert code == 2 and "--min-tp-for searches tp: drop --tp" in err


def test_vllm_keeps_the_fused_moe_workspace_through_the_sampler(lib):
    # vllm 0.19's Triton MoE experts take two workspaces from a manager that never frees them
    # (docs/research/vllm-moe-workspace.md): for Qwen3-30B-A3B, 8192 tokens x top-8 x bf16 x
    # (max(768, 2048) + max(2 x 768, 2048)) = 0.5 GiB, on top of the sampler's peak (1024 rows x
    # 151,936 x 14 B, the top-k/top-p buffer of 132 x 151,936 fp32, the 8192 + 2 x 1024 rows of
    # 2048 bf16 hidden states) and cuBLAS's 33 MiB; the log says 2.68 GiB
    s = Scenario.create(lib, "qwen3-30b-a3b", "h100-80g", values={"seq_len": 8192})
    r = serve(s, formulas=False, explicit={"seq_len"}).rules
    workspace = 8192 * 8 * 2 * (2048 + 2048)
    assert workspace == GiB // 2
    sampler = 1024 * 151936 * 14 + 132 * 151936 * 4 + (8192 + 2048) * 2048 * 2
    assert r["activation_peak"] == sampler + workspace + 33 * 2**20
    dense = serve(Scenario.create(lib, "llama3.1-8b", "h100-80g", values={"seq_len": 8192}),
                  formulas=False, explicit={"seq_len"}).rules
    # no experts, no workspace
    assert dense["activation_peak"] == 1024 * 128256 * 14 + 132 * 128256 * 4 + (8192 + 2048) * 4096 * 2 + 33 * 2**20


def test_vllm_does_not_start_beside_a_process_that_leaves_too_little(lib):
    # vLLM v0.19 logs 0.51 GiB in use at startup on one H100 (79.19 GiB total, 78.68 free:
    # every tp = 1 row of tests/published/vllm_serving.json); its budget must fit in what is free
    for row in PUBLISHED:
        logged = row["measured"].get("values", {})
        if row["parallelism"]["tp"] * row["parallelism"]["pp"] == 1 and "initial_free_gib" in logged:
            assert round(logged["total_gpu_gib"] - logged["initial_free_gib"], 2) == 0.51
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g",
                        values=dict(parse_setting(lib, t) for t in ("seq_len=8192", "total_gpu_memory=79.19GiB")))
    r = serve(s, formulas=False, explicit={"seq_len", "total_gpu_memory"})
    assert r.rules["startup_free_gpu_memory"] == Fraction(7868, 100) * GiB and r.starts
    # beside a process holding 20 GiB: 79.19 - 20 - 0.51 = 58.68 GiB free, at most 58.68 / 79.19
    beside = s.with_values(other_process_memory=sympy.Integer(20 * GiB))
    r = serve(beside, formulas=False, explicit={"seq_len", "total_gpu_memory", "other_process_memory"})
    assert r.rules["max_gpu_memory_utilization"] == Fraction(5868, 7919)
    assert not r.starts and not r.fits  # 0.9 x 79.19 = 71.27 GiB > 58.68 GiB
    code, out, _ = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--set", "max_model_len=8192",
                       "--set", "other_process_memory=20GiB")
    assert code == 1 and "does not start: its budget" in out and "can be at most 0.7" in out


def test_vllm_keeps_mxfp4_experts_in_the_triton_layout(lib):
    # gpt-oss-20b at tp = 2 on H100 (vllm 0.19's TRITON MXFP4 backend; shapes read from
    # mxfp4.py create_weights and the Hopper swizzle, docs/research/vllm-gpt-oss.md): per layer,
    # 32 experts of inner width 2880 / 2 = 1440, rounded up to 1472;
    #   gate_up values [32, 1472 (2880 / 2 bytes padded to 64), 2944], down values [32, 768, 2880],
    #   re-laid scales [32, 3072, 90] and [32, 3072, 46], the loaded scales [32, 2944, 90] and
    #   [32, 2880, 46] kept, fp32 biases [32, 2944] and [32, 2880]
    layer = 32 * (1472 * 2944 + 768 * 2880 + 3072 * 90 + 3072 * 46 + 2944 * 90 + 2880 * 46) + 32 * (2944 + 2880) * 4
    assert layer == 236_285_952
    # everything else in bf16 split over the two ranks: 20,914,757,184 parameters less the
    # experts' 24 x 32 x (3 x 2880 x 2880 + 2 x 2880 + 2880) with their biases; the routers
    # (GateLinear, a ReplicatedLinear: 32 x 2880 and 32 biases per layer), the 49 RMSNorms of
    # 2880 and the output projections' biases (RowParallelLinear: "bias is not parallelized",
    # 2880 per layer) whole on each rank
    replicated = 24 * (32 * 2880 + 32) + 49 * 2880 + 24 * 2880
    rest = (20_914_757_184 - 24 * 32 * (3 * 2880 * 2880 + 3 * 2880)) * 2 // 2 + replicated * 2 // 2
    s = Scenario.create(lib, "gpt-oss-20b", "h100-80g",
                        values={"seq_len": 8192, "tp": 2, "weight_dtype": "mxfp4", "quant_scope": "experts"})
    r = serve(s, formulas=False, explicit={"seq_len", "tp", "weight_dtype", "quant_scope"}).rules
    assert r["vllm_weights"] == rest + 24 * layer
    # the rotary table in fp32 (gpt_oss.py asks for it): 131,072 positions x 64; and the caching
    # allocator's blocks: each output projection, 2048 x 2880 x 2 B = 11.25 MiB, gets a 12 MiB
    # segment whose 0.75 MiB is not split off (the allocator splits only where more than 1 MiB
    # is left); the qkv's 14.06 MiB (16 MiB segment) and the embedding's and head's 552.3 MiB
    # leave more and are split; the rotary table's 32 MiB is whole
    o_proj = 2048 * 2880 * 2
    assert s.evaluate("vllm_allocator_slack") == 24 * (12 * 2**20 - o_proj)
    assert r["model_memory"] == rest + 24 * layer + 131072 * 64 * 4 + 24 * (12 * 2**20 - o_proj)
    # the monolithic MXFP4 kernel keeps no workspace: the sampler and cuBLAS make the peak
    sampler = 1024 * 201088 * 14 + 132 * 201088 * 4 + (8192 + 2048) * 2880 * 2
    assert r["activation_peak"] == sampler + 33 * 2**20


def test_vllm_profiles_a_vision_language_model_with_its_encoded_images(lib):
    # Gemma 3 27B on one H100 (docs/research/vllm-multimodal.md): the encoder budget of 8192
    # tokens holds 32 images of 256 tokens; their bf16 pixels (3 x 896 x 896) and embeddings
    # (256 x 5376) stay alive through the text forward and the sampler
    s = Scenario.create(lib, "gemma3-27b", "h100-80g", values={"seq_len": 8192})
    r = serve(s, formulas=False, explicit={"seq_len"}).rules
    encoded = 32 * (3 * 896 * 896 + 256 * 5376) * 2
    assert encoded == 242_221_056
    sampler = 1024 * 262208 * 14 + 132 * 262208 * 4 + (8192 + 2048) * 5376 * 2
    assert r["activation_peak"] == sampler + 33 * 2**20 + encoded
    # two rotary tables: the sliding layers' (131,072 x 128 in bf16) and the global layers',
    # linearly scaled by 8 (131,072 x 8 rows)
    assert r["rope_cache_bytes"] == (1 + 8) * 131072 * 128 * 2
    # a text model encodes nothing
    text = serve(Scenario.create(lib, "gemma2-9b", "h100-80g", values={"seq_len": 8192}),
                 formulas=False, explicit={"seq_len"}).rules
    assert text["activation_peak"] == (1024 * 256000 * 14 + 132 * 256000 * 4 + (8192 + 2048) * 3584 * 2
                                       + 33 * 2**20)


# ---------------------------------------------------------------- pipeline-parallel stages
# vLLM 0.19's pipeline split, per-stage weights, receive buffers and the fewest blocks, as read in
# vLLM's sources (docs/research/vllm-pp.md): distributed/utils.py get_pp_indices, models/llama.py
# and mixtral.py, v1/worker/gpu_model_runner.py _dummy_run, v1/core/kv_cache_utils.py
@pytest.mark.parametrize("layers, pp, split", [
    (80, 3, [27, 27, 26]), (30, 4, [7, 8, 8, 7]), (61, 4, [15, 15, 16, 15]),
    (94, 8, [11, 12, 12, 12, 12, 12, 12, 11]), (32, 3, [11, 11, 10]), (32, 2, [16, 16]), (33, 2, [17, 16])])
def test_serving_splits_layers_as_vllm_does(lib, layers, pp, split):
    # get_pp_indices: layers // pp each, the remainder one each to the ranks before the last,
    # counting backwards; the research checked these splits against the same code
    s = Scenario.create(lib, "llama3.1-8b", values={"mode": "infer", "pp": pp, "num_hidden_layers": layers})
    got = {stage: s.with_values(pp_stage=stage).evaluate("stage_layers") for stage in ("first", "middle", "last")}
    assert got["first"] == split[0] and got["last"] == split[-1]
    assert got["middle"] == max(split[1:-1] or [split[0]])
    assert s.evaluate("stage_layers") == max(split)  # busiest
    # each stage's KV cache holds its own layers
    for stage, n in got.items():
        assert s.with_values(pp_stage=stage).evaluate("kv_layers_per_stage") == n
    # training keeps its even bound
    assert s.with_values(mode="train").evaluate("stage_layers") == math.ceil(layers / pp)


def test_later_stages_receive_into_buffers_of_the_whole_hidden_size(lib):
    # make_empty_intermediate_tensors(batch_size=max_num_tokens): hidden_states and residual,
    # [8192, 8192] bf16 each for Llama-3.1-70B on an H100 (max_num_batched_tokens 8192), not split
    # over tp; GPT-2's stages hand over hidden_states alone ([2048, 768] below 70 GiB: an A10)
    s = Scenario.create(lib, "llama3.1-70b", "h100-80g", values={"mode": "infer", "pp": 4, "tp": 2})
    buffers = {stage: s.with_values(pp_stage=stage).evaluate("vllm_pp_buffers") for stage in ("first", "middle", "last")}
    assert buffers == {"first": 0, "middle": 2 * 8192 * 8192 * 2, "last": 2 * 8192 * 8192 * 2}
    g = Scenario.create(lib, "gpt2", "a10", values={"mode": "infer", "pp": 2, "pp_stage": "last"})
    assert g.evaluate("vllm_pp_buffers") == 2048 * 768 * 2
    assert s.with_values(pp=1).evaluate("vllm_pp_buffers") == 0


def test_where_each_model_builds_its_embedding_and_head(lib):
    # llama.py: the embedding on the first rank, norm and lm_head on the last (PPMissingLayer
    # elsewhere); mixtral.py builds all three on every rank.  Llama-3.1-8B at pp = 2: 16 layers
    # a stage; Mixtral 8x7B: the 32000 x 4096 embedding and head both on each of the 2 stages
    V, d = 128256, 4096
    layer = (4096 * (4096 + 2 * 1024) + 4096 * 4096) + 3 * 4096 * 14336 + 2 * 4096
    s = Scenario.create(lib, "llama3.1-8b", values={"mode": "infer", "pp": 2, "weight_dtype": "bf16"})
    assert s.with_values(pp_stage="first").evaluate("weights") == 2 * (16 * layer + V * d)
    assert s.with_values(pp_stage="last").evaluate("weights") == 2 * (16 * layer + V * d + d)
    m = Scenario.create(lib, "mixtral-8x7b", values={"mode": "infer", "pp": 2, "weight_dtype": "bf16"})
    mixtral_layer = (4096 * (4096 + 2 * 1024) + 4096 * 4096) + 8 * 3 * 4096 * 14336 + 8 * 4096 + 2 * 4096
    for stage in ("first", "last"):
        assert m.with_values(pp_stage=stage).evaluate("weights") == 2 * (16 * mixtral_layer + 2 * 32000 * 4096 + 4096)


def test_every_stage_keeps_the_fewest_blocks_any_stage_holds(lib):
    # get_kv_cache_configs: num_blocks = min over the workers.  Llama-3.1-70B at pp = 4 on H100s:
    # 20 layers a stage; the last also holds the norm and head (not the embedding), the sampler's
    # peak and the receive buffers, so it has the least left for its 20 layers' blocks
    s = Scenario.create(lib, "llama3.1-70b", "h100-80g", values={"mode": "infer", "pp": 4})
    blocks = {st: s.with_values(pp_stage=st).evaluate("stage_gpu_blocks") for st in ("first", "middle", "last")}
    assert blocks["last"] < blocks["first"] and blocks["last"] < blocks["middle"]
    for stage in ("busiest", "first", "middle", "last"):
        assert s.with_values(pp_stage=stage).evaluate("num_gpu_blocks") == blocks["last"]
    # each stage's own: its KV memory in blocks of its 20 layers' pages (8 KV heads x 128 x 2 x bf16)
    last = s.with_values(pp_stage="last")
    assert blocks["last"] == last.evaluate("kv_cache_memory") // (20 * 16 * 8 * 128 * 2 * 2)


def test_published_pipeline_stages_each_as_logged(lib):
    # llm-d-planner's vLLM 0.19 log of Llama-3.1-8B at pp = 2 on two H100s prints each worker's
    # memory (tests/published/vllm_serving.json): 7.51 GiB of weights on both; the last stage's
    # peak (2.01 GiB: the sampler over 1024 rows of 128,256 logits and the receive buffers) leaves
    # it 65.63 GiB, the first 66.54 GiB; the pool is the last stage's, 1,075,312 tokens.  The
    # first stage's peak (1.1 GiB, no sampler) is Inductor's compile-time benchmark copies of the
    # embedding kernel's arguments: 128,256 x 4,096 x 2 B + 2 x 8,192 x 4,096 x 2 B = 1,130 MiB
    # (docs/research/vllm-versions.md sec. 3; vLLM turns the combo kernels' benchmark on from
    # v0.11.1), above the forward's 0.92 GiB
    row = next(r for r in PUBLISHED if r["id"] == "llmd-vllm0.19-h100-llama-3.1-8b-instruct-tp1pp2-len8192")
    how = row["memform"]
    values = dict(parse_setting(lib, f"{k}={v}") for k, v in how["set"].items() if k != "total_gpu_memory")
    s = Scenario.create(lib, how["preset"], "h100-80g", values=values)
    ranks = row["measured"]["per_rank"]
    for stage, rank in (("first", "Worker_PP0"), ("last", "Worker_PP1")):
        r = serve(s.with_values(pp_stage=stage), formulas=False, explicit=set(values) | {"pp_stage"}).rules
        logged = ranks[rank]
        assert float(r["model_memory"]) / GiB == pytest.approx(logged["weights_gib"], abs=0.005)
        assert float(r["non_torch_memory"]) / GiB == pytest.approx(logged["non_torch_gib"], abs=0.005)
        assert float(r["kv_cache_memory"]) / GiB == pytest.approx(logged["kv_cache_gib"], rel=0.005)
        assert float(r["activation_peak"]) / GiB == pytest.approx(logged["activation_peak_gib"], abs=0.01)
        if stage == "first":
            assert r["activation_peak"] == r["vllm_compile_copies"] == 128256 * 4096 * 2 + 2 * 8192 * 4096 * 2
        assert r["kv_cache_tokens"] == pytest.approx(row["measured"]["values"]["kv_cache_tokens"], rel=0.001)


def test_published_middle_stage_as_logged(lib):
    # llm-d-planner's Llama-3.1-8B log at pp = 4 (L1258): a middle rank, 8 layers and neither the
    # embedding nor the head, "torch peak memory increase: 1.05GiB; ... weights memory: 3.28GiB":
    # the compiled forward (6h + 6 d_ff bytes x 8192 tokens, 864 MiB), cuBLAS's 33 MiB, Inductor's
    # 50 MiB L2 buffer and the receive buffers for the hidden states and the residual (2 x 8192 x
    # 4096 bf16, 128 MiB): 1075 MiB
    row = next(r for r in V019 if r["id"] == "llmd-vllm0.19-h100-llama-3.1-8b-instruct-tp1pp4-len8192")
    assert any("torch peak memory increase: 1.05GiB" in q and "weights memory: 3.28GiB" in q for q in row["quote"])
    how = row["memform"]
    values = dict(parse_setting(lib, f"{k}={v}") for k, v in how["set"].items() if k != "total_gpu_memory")
    middle = Scenario.create(lib, how["preset"], "h100-80g", values=values).with_values(pp_stage="middle")
    assert middle.evaluate("activation_peak") == 1075 * 2**20
    assert round(1075 / 1024, 2) == 1.05
    assert round(float(middle.evaluate("model_memory")) / GiB, 2) == 3.28  # with the rotary table


def test_serve_says_which_stage_it_shows_and_that_blocks_are_the_fewest():
    code, out, _ = run("serve", "llama3.1-8b", "--gpu", "h100-80g", "--pp", "2", "--set", "max_model_len=8192",
                       "--set", "pp_stage=first")
    assert code == 0 and "tp=1 pp=2 (first stage shown)" in out
    assert "stage_gpu_blocks[pp_stage = first]" in out and "stage_gpu_blocks[pp_stage = last]" in out


# ---------------------------------------------------------------- GPUs and layouts the engines treat apart
def test_vllm_keeps_its_small_scheduling_defaults_on_a100s(lib):
    # vLLM's EngineArgs.get_batch_defaults (tests/engine/test_arg_utils.py,
    # test_defaults_with_usage_context): 1024 sequences and 8192 batched tokens for `vllm serve`
    # where device_memory >= 70 GiB and "a100" not in the device name, else 256 and 2048; an
    # A100 80GB log prints 'Chunked prefill is enabled with max_num_batched_tokens=2048'
    # (tests/published/vllm_serving.json, dennislee22 rows)
    for gpu, seqs, tokens in (("h100-80g", 1024, 8192), ("h200-141g", 1024, 8192), ("mi300x", 1024, 8192),
                              ("a100-80g", 256, 2048), ("a100-80g-pcie", 256, 2048), ("a100-40g", 256, 2048),
                              ("l40s", 256, 2048)):
        s = Scenario.create(lib, "qwen2.5-7b", gpu, values={"mode": "infer"})
        assert (s.evaluate("max_num_seqs"), s.evaluate("max_num_batched_tokens")) == (seqs, tokens), gpu


def test_nccl_buffers_outside_torch_only_over_nvlink(lib):
    # memory outside PyTorch at tp > 1: the H100 SXM logs' 2.15 GiB are NCCL's NVLink channels;
    # GPUs that talk over PCIe alone keep what one GPU keeps (vLLM 0.10.2 on 8 L40S: '0.21 GiB
    # for non-torch memory' at tp = 8; docs/research/serving-holdout.md)
    for gpu, tp, expected in (("h100-80g", 2, Fraction(215, 100)), ("h100-80g", 1, Fraction(1, 4)),
                              ("l40s", 8, Fraction(1, 4)), ("a100-80g-pcie", 2, Fraction(1, 4)),
                              ("a100-80g", 2, Fraction(215, 100))):
        s = Scenario.create(lib, "llama3.1-8b", gpu, values={"mode": "infer", "tp": tp})
        assert s.evaluate("non_torch_memory") == expected * GiB, (gpu, tp)


def test_engines_replicate_kv_heads_where_tp_exceeds_them(lib):
    # vLLM's QKVParallelLinear: where tp >= the key/value heads each rank loads one whole head
    # (num_kv_head_replicas = tp / heads); Qwen3-30B-A3B has 4 KV heads. Served at tp = 8 each
    # rank holds what it would hold if the model had 8 KV heads split one per rank: the same
    # weights and the same cache per token
    base = Scenario.create(lib, "qwen3-30b-a3b", "h100-80g", values={"seq_len": 8192})
    four = serve(base.with_values(tp=8), formulas=False, explicit={"seq_len", "tp"}).rules
    eight = serve(base.with_values(tp=8, num_key_value_heads=8), formulas=False,
                  explicit={"seq_len", "tp", "num_key_value_heads"}).rules
    assert four["vllm_weights"] == eight["vllm_weights"] and four["kv_block_bytes"] == eight["kv_block_bytes"]
    # the split alone would give half a head: 48 layers x 2 x 128 x 2048 x 2 B less
    half = serve(base.with_values(tp=4), formulas=False, explicit={"seq_len", "tp"}).rules
    assert half["kv_block_bytes"] == four["kv_block_bytes"] == 16 * 48 * 2 * 128 * 2
    # the command line takes tp = 8 for serving, a tp that is neither a divisor nor a multiple it
    # refuses, and training still needs tp to divide the heads (Megatron-Core splits them)
    code, out, err = run("serve", "qwen3-30b-a3b", "--gpu", "h100-80g", "--tp", "8")
    assert code == 0 and "tp=8" in out
    code, out, err = run("serve", "qwen3-30b-a3b", "--gpu", "h100-80g", "--tp", "3")
    assert code == 2 and "tp=3 neither divides nor is a multiple of num_key_value_heads (4)" in err
    code, out, err = run("estimate", "qwen3-30b-a3b", "--gpu", "h100-80g", "--set", "tp=8")
    assert code == 2 and "tp=8 does not divide num_key_value_heads (4)" in err
    code, out, err = run("estimate", "qwen3-30b-a3b", "--gpu", "h100-80g", "--set", "tp=8", "--set", "mode=infer")
    assert code == 0
    # solve searches the same layouts: serving, tp up to the 32 attention heads (8, 16 and 32 are
    # multiples of the 4 KV heads)
    code, out, err = run("solve", "max", "tp", "qwen3-30b-a3b", "--gpu", "h100-80g", "--set", "mode=infer", "--json")
    answer = json.loads(out)
    assert code == 0 and answer["value"] == 32
    assert "tp divides num_key_value_heads (4) or is a multiple of it" in answer["constraints"]


def test_expert_parallel_serving_keeps_experts_whole(lib):
    # vLLM's --enable-expert-parallel (FusedMoEParallelConfig.make: 'In EP, each device owns a set
    # of experts fully', tp_size 1 inside them) and SGLang's --ep-size (moe_tp_size = tp / ep):
    # Mixtral's 8 experts at tp = 8 with ep = 8 hold one whole expert per rank, the same bytes as
    # an eighth of each
    base = Scenario.create(lib, "mixtral-8x7b", "h100-80g", values={"seq_len": 8192, "tp": 8})
    split = serve(base, formulas=False, explicit={"seq_len", "tp"}).rules
    whole = serve(base.with_values(ep=8), formulas=False, explicit={"seq_len", "tp", "ep"}).rules
    assert whole["vllm_weights"] == split["vllm_weights"]
    assert base.with_values(ep=8, mode="infer").evaluate("etp") == 1
    assert base.with_values(ep=2, mode="infer").evaluate("etp") == 4
    assert base.with_values(ep=8, mode="train").evaluate("etp") == 8  # Megatron-Core: etp = tp


V029 = [row for row in PUBLISHED if row["id"].startswith("samilazrak-vllm0.29-")]


def test_published_vllm_029_budget(lib):
    # vLLM 0.29.0 on an L40S, Qwen3-14B in bf16 and AWQ (tests/published/vllm_serving.json): the
    # budget 0.92 (0.95) x 44.39 GiB less the model, the non-torch memory, the profile's transient
    # peak and the CUDA graph estimate. The peak is the compile-time benchmark's copies of the
    # embedding kernel's arguments, 151,936 x 5,120 x 2 B + 2 x N x 5,120 x 2 B (N = 2048, 8192),
    # above the V2 runner's sampler and the forward; the estimate is measured at startup and taken
    # from each log ('CUDA graph pool memory: ... (estimated)')
    assert len(V029) == 3
    for row in V029:
        how, logged = row["memform"], row["measured"]["values"]
        values = dict(parse_setting(lib, f"{k}={v}") for k, v in how["set"].items())
        values["cudagraph_estimate"] = sympy.Rational(str(logged["cudagraph_estimate_gib"])) * GiB
        r = serve(Scenario.create(lib, how["preset"], values=values), formulas=False, explicit=set(values)).rules
        tokens = 151936 * 5120 * 2 + 2 * how["set"].get("max_num_batched_tokens", 2048) * 5120 * 2
        assert r["activation_peak"] == r["vllm_compile_copies"] == tokens
        # the log's transient (peak activation less the estimate) is that, to its 0.01 GiB
        assert abs(tokens / GiB - (logged["peak_activation_gib"] - logged["cudagraph_estimate_gib"])) < 0.015
        assert r["kv_cache_tokens"] == pytest.approx(logged["kv_cache_tokens"], rel=0.015)
        if how["set"].get("weight_dtype") != "int4":
            assert round(float(r["model_memory"]) / GiB, 2) == logged["weights_gib"]
        else:  # AWQ: 18 MiB of scales that take free tails whole follow the load's order, not a rule
            assert 0 < logged["weights_gib"] - float(r["model_memory"]) / GiB < 0.025


# ---------------------------------------------------------------- a separate drafter
def test_vllm_eagle3_head_as_published(lib):
    # kuotunyu/vllm-single-gpu-slo-lab (docs ADR, evidence/raw/w1/matrix-load-check.jsonl at
    # 2c7a3f72): vLLM 0.28.0 on an RTX 4090, --max-model-len 4096 --max-num-seqs 64, Qwen3-4B alone
    # 'Model loading took' 7.56 GiB, 90,480 tokens; with AngelSlim/Qwen3-4B_eagle3
    # (num_speculative_tokens 3) 7.97 GiB, 83,952 tokens. The head (its config: 1 layer, hidden
    # 2560, 32 / 8 heads of 128, MLP 9728, draft vocabulary 32,000, no embedding of its own):
    # qkv over 2 x 2560 inputs 5120 x 6144, o 4096 x 2560, MLP 3 x 2560 x 9728, fc 3 x 2560 x 2560,
    # four norms of 2560 and its head 32,000 x 2560, in bf16, and the int64 token map
    params = 5120 * 6144 + 4096 * 2560 + 3 * 2560 * 9728 + 3 * 2560 * 2560 + 4 * 2560 + 32000 * 2560
    assert params == 218_245_120
    values = {"mode": "infer", "serving_engine": "vllm", "vllm_version": "28", "seq_len": 4096, "max_num_seqs": 64}
    off = Scenario.create(lib, "qwen3-4b", "rtx4090", values=values)
    on = off.with_values(speculative_method="eagle3")
    assert on.evaluate("draft_weights") == params * 2 + 32000 * 8
    assert round(float(on.evaluate("model_memory") - off.evaluate("model_memory")) / GiB, 2) == round(7.97 - 7.56, 2)
    # its layer joins the target's 36 in the one block pool: 37 x 2 x 8 x 128 x 2 bytes a token
    assert on.evaluate("kv_cache_per_token") == 37 * 2 * 8 * 128 * 2
    r = serve(on, formulas=False, explicit=set(values) | {"speculative_method"}).rules
    # within 3 % (+2.8 %: the log's budget is 0.17 GiB smaller than the weights alone explain, the
    # drafter's CUDA graphs in the estimate, which memform takes as measured)
    assert r["kv_cache_tokens"] == pytest.approx(83_952, rel=0.03)


def test_vllm_mla_eagle3_head_caches_one_more_latent_layer(lib):
    # Czyszka/nanoserve-mini (results/runs/2026-06-08_w1_evidence_extra/t6_eagle/kimi_log_eagle3_on.txt
    # and 2026-06-05_w1_evidence/t6_eagle3/kimi_log_eagle3_off.txt): vLLM 0.20, Kimi-K2.6 (MLA,
    # 61 layers, kv_lora_rank 512 + rope 64 in bf16) at tp 8: 'Available KV cache memory: 9.84 GiB',
    # 149,792 tokens alone; 9.44 GiB, 141,504 tokens with lightseekorg/kimi-k2.6-eagle3-mla. Each
    # log's memory over its tokens gives 70,272 and 71,424 bytes a token: 61 and 62 latent layers of
    # 1,152 bytes (the 0.03 GiB the logged memory holds beyond them is the minimum over the ranks)
    assert 149_792 * 61 * 1152 <= 9.84 * GiB < 149_792 * 62 * 1152
    assert 141_504 * 62 * 1152 <= 9.44 * GiB < 141_504 * 63 * 1152
    s = Scenario.create(lib, "deepseek-v3", values={"mode": "infer", "serving_engine": "vllm", "tp": 8})
    assert s.evaluate("kv_cache_per_token") == 61 * 1152
    assert s.with_values(speculative_method="eagle3").evaluate("kv_cache_per_token") == 62 * 1152


def test_vllm_draft_model_of_another_shape_adds_its_own_pages(lib):
    # UniformTypeKVCacheSpecs (vllm 0.19.0 v1/kv_cache_interface.py): Llama-3.2-1B (16 layers, 8 KV
    # heads of 64) drafting Llama-3.1-70B at tp 4 is one group whose page is every layer's own:
    # 80 x 2 x 2 x 128 x 2 + 16 x 2 x 2 x 64 x 2 = 90,112 bytes a token a rank
    s = Scenario.create(lib, "llama3.1-70b", "h100-80g", values={
        "mode": "infer", "serving_engine": "vllm", "tp": 4, "speculative_method": "draft_model", "draft_layers": 16,
        "draft_num_key_value_heads": 8, "draft_head_dim": 64, "draft_params": 1_235_814_400})
    assert s.evaluate("kv_cache_per_token") == 90_112
    assert s.evaluate("kv_block_bytes") == 16 * 90_112
    assert s.evaluate("draft_weights") == 1_235_814_400 * 2 // 4
    # n-gram and draft-model speculation run on the V1 runner before v0.33, whose profile adds the
    # rejection sampler: 30 bytes a sampled row and vocabulary entry in bf16 (rejection_sampler.py:
    # the logits 4, the bonus rows 2, their fp32 log-probabilities 4, the target rows' fp32 copy
    # and its clone 8, their softmax 4, the noise and its reciprocal 8) against the plain 14
    assert s.with_values(vllm_version="29").evaluate("vllm_v2_runner") == 0
    assert s.evaluate("sampler_bytes_per_logit") == 30
    assert s.with_values(speculative_method="none").evaluate("sampler_bytes_per_logit") == 14


def test_sglang_drafter_before_and_from_v0514(lib):
    # up to v0.5.13 the default fraction keeps 2 GiB more for an EAGLE head (0.5.8.post1
    # server_args.py): an H100's 13,440 + 2,048 MiB, round(66071 / 81559, 3) = 0.810; the cell is
    # the target's (the draft's own pool comes out of what the fraction leaves)
    s = Scenario.create(lib, "llama3.1-8b", "h100-80g", values={
        "mode": "infer", "serving_engine": "sglang", "sglang_version": "508", "speculative_method": "eagle3"})
    assert s.evaluate("mem_fraction_static") == Fraction("0.810")
    assert s.evaluate("kv_cell_bytes") == 32 * 2 * 8 * 128 * 2
    # from v0.5.14 the cell takes the draft's layer at the target's bytes, cell + int(cell / 32),
    # and the pool's budget loses the head's weights and the embedding copy it frees only later
    # (pool_configurator.py, eagle_worker_v2.py): 128,256 x 4096 x 2 bytes of embedding
    new = s.with_values(sglang_version="514")
    assert new.evaluate("kv_cell_bytes") == 131_072 + 131_072 // 32
    assert new.evaluate("sglang_draft_weights") == new.evaluate("draft_weights") + 128_256 * 4096 * 2
    assert new.evaluate("sglang_spec_reserve") == 0
