"""Megatron-LM's arguments read as a model (engine/library/megatron.py), and the pipeline rules
they reach: uneven stages, the embedding and loss counted in the split, the interleaved
schedule's micro-batch groups.

Expected figures come from Megatron-LM's own code (d98e8a64): arguments.py's defaults, the
tokenizer's vocabulary padding, transformer_block.py's get_num_layers_to_build and schedules.py's
warm-up count and schedule table, restated here as plain loops over the schedule.
"""
import subprocess
import sys
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.compile.model import Scenario
from engine.errors import DomainError, SourceError, UsageError
from engine.library.megatron import is_args_file, read_args, read_text

SCRIPT = """#!/bin/bash
# GPT 2B on two nodes
export CUBLAS_WORKSPACE_CONFIG=:4096:8
GPT_ARGS=(
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16
    --seq-length 4096 --max-position-embeddings 4096
    --micro-batch-size 2 --global-batch-size 64   # 64 sequences a step
    --tensor-model-parallel-size=2 --pipeline-model-parallel-size 2
    --swiglu --bf16 --use-distributed-optimizer --sequence-parallel
    --tokenizer-type GPT2BPETokenizer --lr 3e-4 --save /ckpt --data-path /data/a
    --my-own-flag 3
)
torchrun --nproc_per_node 8 --nnodes 2 --master_addr node0 pretrain_gpt.py \\
    "${GPT_ARGS[@]}" \\
    --log-interval 10
"""


def test_a_launch_script_with_megatrons_defaults(lib):
    a = read_text(SCRIPT, lib, "train.sh")
    v = a.values
    # arguments.py: --swiglu without --ffn-hidden-size is int(4 h 2 / 3 / 64) 64 wide
    assert v["intermediate_size"] == 85 * 64
    # GPT-2's BPE has 50,257 tokens, padded to a multiple of 128 x tp
    assert v["vocab_size"] == 50432
    # 16 GPUs over tp 2 x pp 2
    assert (v["tp"], v["pp"], v["dp"], v["global_batch"], v["micro_batch"]) == (2, 2, 4, 64, 2)
    assert (v["stack"], v["precision"], v["zero_stage"], v["sequence_parallel"]) == ("megatron", "bf16_mixed", "1", "true")
    assert (v["norm"], v["position_embedding"], v["tie_word_embeddings"], v["mlp"]) == ("layernorm", "learned", "true", "swiglu")
    assert v["dropout"] == Fraction(1, 10) and v["num_key_value_heads"] == 16
    assert v["cublas_workspace_config"] == 4096 * 8 * 1024
    assert a.unknown == ("--my-own-flag",)  # --lr, --save, --data-path, --log-interval have no effect
    s = Scenario.create(lib, None, values=v)
    assert s.evaluate("num_microbatches") == 64 // (2 * 4)  # the global batch over micro_batch x dp


def test_a_functional_tests_model_config(lib):
    text = """ENV_VARS:
  CUBLAS_WORKSPACE_CONFIG: :4096:8
MODEL_ARGS:
  --num-layers: 12
  --hidden-size: 512
  --num-attention-heads: 8
  --seq-length: 1024
  --max-position-embeddings: 1024
  --micro-batch-size: 4
  --global-batch-size: 32
  --untie-embeddings-and-output-weights: true
  --swiglu: false
  --position-embedding-type: rope
  --normalization: RMSNorm
  --vocab-size: 131072 # NullTokenizer
  --tokenizer-type: NullTokenizer
  --tensor-model-parallel-size: 4
  --pipeline-model-parallel-size: 2
  --num-layers-per-virtual-pipeline-stage: 2
  --tensorboard-dir: ${TENSORBOARD_PATH}
  --bf16: true
"""
    a = read_text(text, lib, "model_config.yaml")
    v = a.values
    assert (v["tie_word_embeddings"], v["mlp"], v["position_embedding"], v["norm"]) == ("false", "gelu", "rope", "rmsnorm")
    assert v["intermediate_size"] == 4 * 512 and v["vocab_size"] == 131072  # a multiple of 128 x 4 already
    # 12 layers over pp 2 are 6 a stage, 2 a virtual stage: 3 model chunks
    assert (v["pp_schedule"], v["pp_virtual_stages"]) == ("interleaved", 3)
    assert "dp" not in v and any("world size" in n for n in a.notes)


def test_what_the_arguments_do_not_say_is_said(lib):
    a = read_text("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                  "--tokenizer-type HuggingFaceTokenizer --tokenizer-model org/x", lib)
    assert "vocab_size" not in a.values and any("vocab_size" in n for n in a.notes)
    b = read_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-file /data/vocab.json", lib)
    assert b.values["vocab_size"] == 50304 and any("50,257" in n for n in b.notes)


@pytest.mark.parametrize("text, error, words", [
    ("--num-layers $LAYERS --hidden-size 64 --num-attention-heads 4", UsageError, "shell variable"),
    ("--num-layers twelve --hidden-size 64 --num-attention-heads 4", DomainError, "needs a number"),
    ("--hidden-size 64 --num-attention-heads 4", SourceError, "no --num-layers"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --bf16 yes", DomainError, "takes no value"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-experts 4 --moe-layer-freq 2",
     DomainError, "not modelled"),
    ("--num-layers 0 --hidden-size 64 --num-attention-heads 4", DomainError, "num_hidden_layers"),
    ("torchrun --nproc_per_node 6 x.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
     "--tensor-model-parallel-size 4", DomainError, "multiple of tp x pp x cp"),
])
def test_bad_arguments_are_refused_at_their_place(lib, text, error, words):
    with pytest.raises(error) as info:
        read_text(text, lib, "run.sh")
    assert words in info.value.message
    if info.value.span is not None:
        assert info.value.span.file == "run.sh" and info.value.span.line == 1


def test_the_cli_reads_a_script_as_a_model(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    assert is_args_file(script) and not is_args_file(tmp_path / "missing.sh")
    run = subprocess.run([sys.executable, "-m", "engine", "estimate", str(script), "--gpu", "h100-80g", "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "arguments not modelled (not used): --my-own-flag" in run.stderr
    bad = tmp_path / "bad.sh"
    bad.write_text("pretrain_gpt.py \\\n  --num-layers 2 --hidden-size 64 \\\n  --num-attention-heads x\n")
    run = subprocess.run([sys.executable, "-m", "engine", "estimate", str(bad)], capture_output=True, text=True)
    assert run.returncode == 2 and f"{bad}:3:" in run.stderr and "^" in run.stderr and "Traceback" not in run.stderr


# ---------------------------------------------------------------- the pipeline split
def megatron_layers(L, p, rank, vp=None, first=None, last=None, embedding=False, loss=False):
    """transformer_block.py get_num_layers_to_build, summed over the rank's model chunks."""
    chunks = []
    for chunk in range(vp or 1):
        if first is not None or last is not None:
            rest, stages = L - (first or 0) - (last or 0), p - (first is not None) - (last is not None)
            n = rest // stages if stages else 0
            n = first if rank == 0 and first is not None else last if rank == p - 1 and last is not None else n
        else:
            n = (L + embedding + loss) // p
        n //= vp or 1
        n -= embedding and rank == 0 and chunk == 0
        n -= loss and rank == p - 1 and chunk == (vp or 1) - 1
        chunks.append(n)
    return chunks


@pytest.mark.parametrize("L, p, vp, first, last, embedding, loss", [
    (12, 4, None, 2, 2, False, False), (12, 4, 2, 2, 2, False, False), (30, 4, None, 6, 8, False, False),
    (6, 4, 2, None, None, True, True), (31, 4, None, None, None, True, False), (15, 2, 2, None, None, False, True),
    (61, 16, None, 3, 2, False, False),
])
def test_each_stage_holds_the_layers_megatron_builds_there(lib, L, p, vp, first, last, embedding, loss):
    values = {"num_hidden_layers": L, "pp": p, "pp_first_stage_layers": first or 0, "pp_last_stage_layers": last or 0,
              "pp_split_embedding": int(embedding), "pp_split_loss": int(loss)}
    if vp:
        values.update(pp_schedule="interleaved", pp_virtual_stages=vp)
    s = Scenario.create(lib, "llama2-7b", values=values)
    per_layer = s.evaluate("layer_params")
    for stage, rank in (("first", 0), ("middle", 1), ("last", p - 1)):
        at = s.with_values(pp_stage=stage)
        layers = sum(megatron_layers(L, p, rank, vp, first, last, embedding, loss))
        assert at.evaluate("stage_layers") == layers
        ends = {"first": at.evaluate("embedding_params"), "middle": 0, "last": at.evaluate("output_stage_params")}[stage]
        assert at.evaluate("stage_share") * at.evaluate("architecture_params") == layers * per_layer + ends


def schedule_in_flight(p, v, m, group, rank, layers, overlap=False):
    """Layer micro-batches a rank holds at its peak under Megatron-Core's interleaved schedule:
    get_pp_rank_microbatches' warm-up forwards plus the one at the peak, taken in the order of
    get_schedule_table (a group of micro-batches through chunk 0, then chunk 1, ...); the group
    is at least p and at most m (forward_backward_pipelining_with_interleaving refuses others)."""
    assert p <= group <= m
    warmup = (p - rank - 1) * 2 + (v - 1) * group + overlap
    table = []
    for start in range(0, m, group):
        ids = range(start, min(start + group, m))
        table += [(mb, chunk) for chunk in range(v) for mb in ids]
    return sum(layers[chunk] for _, chunk in table[:min(warmup + 1, m * v)])


@pytest.mark.parametrize("p, v, m, group, embedding, loss, overlap", [
    (4, 2, 8, 4, False, False, False), (4, 3, 5, 5, False, False, False), (4, 2, 4, 4, True, True, False),
    (2, 4, 4, 2, False, False, True), (4, 2, 16, 8, False, True, False), (4, 4, 12, 6, False, True, True),
    (8, 3, 24, 8, True, False, False),
])
def test_the_interleaved_schedule_holds_what_megatron_runs_ahead(lib, p, v, m, group, embedding, loss, overlap):
    L = p * v * 2 - embedding - loss
    s = Scenario.create(lib, "llama2-7b", values={
        "num_hidden_layers": L, "pp": p, "pp_schedule": "interleaved", "pp_virtual_stages": v, "num_microbatches": m,
        "pp_microbatch_group": group, "pp_split_embedding": int(embedding),
        "pp_split_loss": int(loss), "ep_comm_overlap": str(overlap).lower()})
    for stage, rank in (("first", 0), ("middle", 1), ("last", p - 1)):
        at = s.with_values(pp_stage=stage)
        chunks = megatron_layers(L, p, rank, v, embedding=embedding, loss=loss)
        expected = schedule_in_flight(p, v, m, group, rank, chunks, overlap)
        # in_flight_layers counts micro-batches of an even stage's layers
        assert at.evaluate("in_flight_layers") * at.evaluate("layers_per_stage") == expected, (stage, chunks)


def test_an_uneven_split_is_checked_as_megatron_checks_it(lib):
    from engine.library.layout import broken
    size = {"num_hidden_layers": 30}.get
    assert any("pp=4 does not divide" in t for t in broken({"pp": 4}, size))
    assert broken({"pp": 4, "pp_first_stage_layers": 6, "pp_last_stage_layers": 8}, size) == []
    assert "do not share evenly" in broken({"pp": 4, "pp_first_stage_layers": 7}, size)[0]
    assert "more layers than" in broken({"pp": 3, "pp_first_stage_layers": 20, "pp_last_stage_layers": 20}, size)[0]
    assert broken({"pp": 2, "pp_split_embedding": 1, "pp_split_loss": 1}, size) == []
    assert "32 layers the split counts" in broken({"pp": 5, "pp_split_embedding": 1, "pp_split_loss": 1}, size)[0]
    assert "refuses" in broken({"pp": 2, "pp_split_loss": 1, "pp_first_stage_layers": 10}, size)[0]


def test_read_args_reads_a_file(lib, tmp_path):
    f = tmp_path / "model_config.yaml"
    f.write_text("MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 64\n  --num-attention-heads: 4\n  --vocab-size: 1000\n")
    assert read_args(f, lib).values["vocab_size"] == 1024
    with pytest.raises(UsageError):
        read_args(tmp_path / "none.yaml", lib)


# ---------------------------------------------------------------- any text
FLAGS = ["--num-layers", "--hidden-size", "--num-attention-heads", "--vocab-size", "--make-vocab-size-divisible-by",
         "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
         "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank", "--global-batch-size",
         "--micro-batch-size", "--swiglu", "--bf16", "--num-experts", "--moe-layer-freq", "--normalization",
         "--decoder-first-pipeline-num-layers", "--account-for-loss-in-pipeline-split", "--kv-channels",
         "--group-query-attention", "--num-query-groups", "--nproc_per_node", "--moe-grouped-gemm", "--foo",
         "--pipeline-model-parallel-layout", "--recompute-granularity", "--recompute-modules"]
WORDS = ["0", "1", "2", "4", "-3", "1.5", "1e400", "RMSNorm", "x", "$N", "(", ")", "pretrain_gpt.py", "torchrun",
         "\\", "#", "'", '"', "([0]*1+[1]*3)", "--x=", "=", "\x00", "é", "Et*3|t|L", "(t|)*2", "t*99999",
         "selective", "core_attn", "[mlp"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FLAGS + WORDS + ["\n"]), max_size=40))
def test_any_arguments_give_settings_or_a_clear_error(words):
    from engine.errors import EngineError
    import engine
    lib = engine.load()
    try:
        read_text(" ".join(words), lib, "fuzz.sh")
    except EngineError:
        pass


def test_a_pipeline_layout_gives_the_virtual_stages_and_the_end_ranks_layers(lib):
    # Megatron-LM's selective_recompute_experimental recipe: 16 layers over pp 2, 8 stages:
    # 'Ettt', six 'tt', 'tmL'; rank 0 holds stages 0, 2, 4, 6 (9 layers), rank 1 stages 1, 3, 5, 7 (7)
    base = "--num-layers 16 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 --pipeline-model-parallel-size 2"
    v = read_text(base + " --pipeline-model-parallel-layout 'Et*3|(tt|)*6tmL'", lib).values
    assert (v["pp_schedule"], v["pp_virtual_stages"], v["pp_first_stage_layers"], v["pp_last_stage_layers"]) \
        == ("interleaved", 4, 9, 7)
    for bad, words in (("'Et*3|(tt|)*6tmLx'", "is not a layout"), ("'Et*3|(tt|)*5tmL'", "places 14 transformer layers"),
                       ("'Et*15|t|L'", "not a multiple"), ("'(t*1000)*1000'", "more than")):
        with pytest.raises(DomainError) as info:
            read_text(f"{base} --pipeline-model-parallel-layout {bad}", lib)
        assert words in info.value.message


def test_recompute_modules_replace_selective_recomputation_of_the_attention_core(lib):
    # transformer_config.py: --recompute-modules replaces the default ["core_attn"]
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 --recompute-granularity selective"
    assert read_text(base, lib).values["recompute"] == "selective"
    a = read_text(base + " --recompute-modules mlp moe_act", lib)
    assert a.values["recompute"] == "none" and not a.unknown
    assert str(a.values["recompute_mlp"]) == str(a.values["recompute_moe_act"]) == "true"
    b = read_text(base + " --recompute-modules core_attn layernorm mla_up_proj moe shared_experts mhc", lib)
    assert b.values["recompute"] == "selective"
    assert all(str(b.values[f"recompute_{m}"]) == "true" for m in ("layernorm", "mla_up_proj", "moe", "shared_experts"))
    assert "recompute_mlp" not in b.values
    assert any("--recompute-modules mhc" in u for u in b.unknown)  # a module not modelled is listed
    # without selective granularity Megatron recomputes no module
    c = read_text(base.replace("selective", "full") + " --recompute-modules mlp", lib)
    assert "recompute_mlp" not in c.values
