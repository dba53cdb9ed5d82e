"""memform against measurements of real PyTorch / transformers models (tiny, random, CPU).

The expected figures come from torch itself: parameter and gradient tensors, the optimizer's
state after one step, the tensors autograd saves for backward and the KV cache.  Skipped
when torch or transformers is not installed (pip install 'memform[torch]').
"""
import io
import json

import pytest

torch = pytest.importorskip("torch", reason="measuring needs torch (pip install 'memform[torch]')")
pytest.importorskip("transformers", reason="measuring needs transformers (pip install 'memform[torch]')")

from engine.cli import main  # noqa: E402
from engine.library.hfconfig import read_config  # noqa: E402
from engine.answers.measure import format_table, measure  # noqa: E402
from engine.compile.model import Scenario  # noqa: E402

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
        "max_position_embeddings": 128}
CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 128, "n_positions": 128},
    "llama": {"model_type": "llama", **TINY, "num_key_value_heads": 2, "intermediate_size": 96},  # GQA
    "mixtral": {"model_type": "mixtral", **TINY, "num_key_value_heads": 2, "intermediate_size": 96,
                "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", **TINY, "num_key_value_heads": 2, "intermediate_size": 96,
                  "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "num_experts": 4,
                  "num_experts_per_tok": 2},
    # q_norm and k_norm over head_dim
    "qwen3": {"model_type": "qwen3", **TINY, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96},
    # four norms per layer, Gemma's RMSNorm (its weight applied in fp32), q/k norms, GeGLU
    "gemma3_text": {"model_type": "gemma3_text", **TINY, "num_key_value_heads": 2, "head_dim": 16,
                    "intermediate_size": 96, "sliding_window": 512},
    # attention and MLP in parallel on one bias-free LayerNorm written out of elementary ops,
    # q/k LayerNorms per head
    "cohere": {"model_type": "cohere", **TINY, "num_key_value_heads": 2, "intermediate_size": 96,
               "use_qk_norm": True},
}
EXACT = ("n_params", "weights", "grads", "optimizer_states", "logits_tensor", "kv_cache")


def write_configs(root, configs):
    paths = {}
    for name, data in configs.items():
        paths[name] = root / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    return paths


@pytest.fixture(scope="module")
def config_files(tmp_path_factory):
    return write_configs(tmp_path_factory.mktemp("configs"), CONFIGS)


def run_measure(lib, path, peak=False, **values):
    config = read_config(path, lib)
    scenario = Scenario.create(lib, None, values={**config.values, **values})
    return measure(scenario, str(path), peak=peak)


# adafactor: transformers' own (Trainer's optim="adafactor"): fp32 row and column statistics per
# matrix (the 3-D experts', Cohere's per-head q and k norms' too), whole ones per vector, an fp32
# RMS per tensor
@pytest.mark.parametrize("optimizer", ["adamw", "sgd_momentum", "adafactor"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_model_states_and_kv_cache_are_exact(lib, config_files, family, precision, optimizer):
    m = run_measure(lib, config_files[family], micro_batch=2, seq_len=16, precision=precision,
                    optimizer=optimizer)
    for name in EXACT:
        assert m.predicted[name] == m.measured[name], (name, m.predicted[name], m.measured[name])


def test_adamw_keeps_a_step_per_tensor(lib, config_files):
    # AdamW's state is 2 x the parameter bytes plus one 4-byte fp32 step per parameter tensor
    m = run_measure(lib, config_files["llama"], micro_batch=1, seq_len=8, precision="bf16")
    tensors = 2 * 9 + 3  # q, k, v, o, gate, up, down, two norms per layer; embedding, final norm, head
    assert m.measured["optimizer_states"] == 2 * m.measured["weights"] + 4 * tensors


#: (b, s) points of the activation table
POINTS = [(1, 16), (2, 16), (1, 64), (4, 32), (2, 128), (8, 64)]


@pytest.fixture(scope="module")
def activation_table(lib, config_files):
    rows = []
    for family in sorted(CONFIGS):
        for b, s in POINTS:
            m = run_measure(lib, config_files[family], micro_batch=b, seq_len=s, precision="bf16")
            rows.append((family, b, s, m.predicted["saved_for_backward"], m.measured["saved_for_backward"],
                         m.error("saved_for_backward")))
    return rows


def test_activations_with_sdpa_within_ten_percent(activation_table, capsys):
    with capsys.disabled():
        print("\narchitecture  b    s   memform   measured   error")
        for family, b, s, pred, meas, err in activation_table:
            print(f"{family:10} {b:3} {s:4} {pred:9,} {meas:10,} {100 * err:+6.2f} %")
    for family, b, s, pred, meas, err in activation_table:
        assert abs(err) <= 0.10, (family, b, s, pred, meas)


@pytest.mark.parametrize("precision, recompute", [("fp32", "none"), ("bf16", "full"), ("fp32", "full")])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_activations_in_fp32_and_with_checkpointing_within_ten_percent(lib, config_files, family, precision,
                                                                      recompute):
    # with gradient checkpointing the forward keeps each layer's input, the final norm's
    # tensors, the head's input and the fp32 logits (memform: stage_layer_activations + logits)
    for b, s in ((1, 16), (4, 32)):
        m = run_measure(lib, config_files[family], micro_batch=b, seq_len=s, precision=precision,
                        recompute=recompute)
        assert abs(m.error("saved_for_backward")) <= 0.10, (b, s, m.predicted, m.measured)


@pytest.fixture(scope="module")
def peak_table(lib, config_files):
    rows = []
    for family in sorted(CONFIGS):
        for precision in ("fp32", "bf16"):
            for b, s in PEAK_POINTS:
                m = run_measure(lib, config_files[family], peak=True, micro_batch=b, seq_len=s,
                                precision=precision)
                rows.append((family, precision, b, s, m.predicted["peak"], m.measured["peak"], m.error("peak")))
    return rows


#: (b, s) points of the peak table; at the smallest the weight-gradient temporaries of the
#: backward pass (not modelled) are a visible part of these tiny models' peak
PEAK_POINTS = [(1, 16), (4, 32), (8, 64)]


def test_peak_of_a_training_step_against_the_profiler(peak_table, capsys):
    """The rule peak against the most bytes alive at once in a real step (the profiler's memory
    timeline): the start of backward, where the loss's logits-sized gradients join every saved
    tensor, is the largest phase of these steps."""
    with capsys.disabled():
        print("\narchitecture precision  b    s      memform     measured   error")
        for family, precision, b, s, pred, meas, err in peak_table:
            print(f"{family:10} {precision:9} {b:3} {s:4} {pred:12,} {meas:12,} {100 * err:+6.2f} %")
    for family, precision, b, s, pred, meas, err in peak_table:
        assert abs(err) <= (0.12 if (b, s) == PEAK_POINTS[0] else 0.05), (family, precision, b, s, pred, meas)


# ---------------------------------------------------------------- stack = hf: torch.autocast
# precision=bf16_mixed runs as Trainer(bf16=True) / accelerate do: fp32 parameters, the forward
# under torch.autocast, backward outside it; memform predicts it with stack = hf.  What each
# tensor is and why: docs/research/hf-autocast.md.

@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_autocast_model_states_are_fp32_and_exact(lib, config_files, family):
    # no separate master copy: the fp32 parameters are it; gradients fp32; bf16 logits
    m = run_measure(lib, config_files[family], micro_batch=2, seq_len=16, precision="bf16_mixed")
    assert m.measured["weights"] == 4 * m.measured["n_params"] == m.measured["grads"]
    for name in EXACT:
        assert m.predicted[name] == m.measured[name], (name, m.predicted[name], m.measured[name])


#: (b, s, attention) points of the autocast table
AUTOCAST_POINTS = [(2, 32, "flash"), (4, 64, "flash"), (2, 32, "eager")]


@pytest.fixture(scope="module")
def autocast_table(lib, config_files):
    rows = []
    for family in sorted(CONFIGS):
        for b, s, attention in AUTOCAST_POINTS:
            m = run_measure(lib, config_files[family], peak=True, micro_batch=b, seq_len=s,
                            precision="bf16_mixed", attention=attention)
            rows.append((family, b, s, attention, m))
    return rows


def test_autocast_saved_tensors_and_peak(autocast_table, capsys):
    """Saved for backward under autocast: fp32 norm outputs, one bf16 cast per projection, fp32
    routed experts and a bf16 copy of every projection weight (2-28 % of these steps' saved
    bytes) within 1.5 %; the step's peak within 4 %.
    The rotary cos/sin (a row per position), the int64 ids and labels are counted; what memform
    leaves out: the loss's 4-byte total weight."""
    with capsys.disabled():
        print("\nautocast    b    s  attention   saved: memform   measured   error    peak: memform    measured   error")
        for family, b, s, attention, m in autocast_table:
            print(f"{family:10} {b:2} {s:4} {attention:9} {m.predicted['saved_for_backward']:15,} "
                  f"{m.measured['saved_for_backward']:10,} {100 * m.error('saved_for_backward'):+6.2f} % "
                  f"{m.predicted['peak']:14,} {m.measured['peak']:11,} {100 * m.error('peak'):+6.2f} %")
    for family, b, s, attention, m in autocast_table:
        assert abs(m.error("saved_for_backward")) <= 0.015, (family, b, s, attention, m.predicted, m.measured)
        assert abs(m.error("peak")) <= 0.04, (family, b, s, attention, m.predicted["peak"], m.measured["peak"])


def test_autocast_weight_copies_are_what_the_bf16_model_lacks(lib, config_files):
    # the same step in pure bf16 and under autocast: the difference memform predicts (copies of
    # the weights, fp32 norm outputs, per-projection casts) is the difference measured, to 1 %
    pure = run_measure(lib, config_files["llama"], micro_batch=4, seq_len=64, precision="bf16")
    amp = run_measure(lib, config_files["llama"], micro_batch=4, seq_len=64, precision="bf16_mixed")
    grew_measured = amp.measured["saved_for_backward"] - pure.measured["saved_for_backward"]
    grew_predicted = amp.predicted["saved_for_backward"] - pure.predicted["saved_for_backward"]
    assert abs(grew_predicted / grew_measured - 1) < 0.01, (grew_predicted, grew_measured)


def test_eager_attention_keeps_the_scores(lib, config_files):
    flash = run_measure(lib, config_files["llama"], micro_batch=2, seq_len=64, precision="bf16")
    eager = run_measure(lib, config_files["llama"], micro_batch=2, seq_len=64, precision="bf16", attention="eager")
    grew_measured = eager.measured["saved_for_backward"] - flash.measured["saved_for_backward"]
    grew_predicted = eager.predicted["saved_for_backward"] - flash.predicted["saved_for_backward"]
    assert grew_predicted == grew_measured  # fp32 softmax + bf16 copy + repeated K/V - log-sum-exp


# DeepSeek-V3's multi-head latent attention with dense MLPs (first_k_dense_replace = every layer):
# the query latent (48) and the KV latent (32, beside an 8-wide rotary key) each through an RMSNorm
# into an up projection; 4 heads of 16 + 8 query/key and 24 value dims
MLA = {"model_type": "deepseek_v3", **TINY, "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32,
       "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 24, "intermediate_size": 96,
       "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
       "first_k_dense_replace": 2, "n_group": 1, "topk_group": 1}


@pytest.mark.parametrize("precision, attention", [("fp32", "flash"), ("bf16", "flash"), ("fp32", "eager"),
                                                   ("bf16", "eager"), ("bf16_mixed", "flash")])
def test_mla_latents_and_layouts_as_saved(lib, tmp_path, precision, attention):
    path = write_configs(tmp_path, {"mla": MLA})["mla"]
    m = run_measure(lib, path, micro_batch=2, seq_len=32, precision=precision, attention=attention)
    for name in EXACT:
        assert m.predicted[name] == m.measured[name], (name, m.predicted[name], m.measured[name])
    # what autograd keeps (torch's own count): exact but for the loss's 4-byte total weight
    # without autocast; under autocast within 0.1 %
    if precision == "bf16_mixed":
        assert abs(m.error("saved_for_backward")) <= 0.001, (m.predicted, m.measured)
    else:
        assert m.measured["saved_for_backward"] - m.predicted["saved_for_backward"] == 4


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adafactor"])
def test_mla_optimizer_states_are_exact(lib, tmp_path, optimizer):
    path = write_configs(tmp_path, {"mla": MLA})["mla"]
    m = run_measure(lib, path, micro_batch=2, seq_len=32, precision="bf16", optimizer=optimizer)
    for name in EXACT:
        assert m.predicted[name] == m.measured[name], (name, m.predicted[name], m.measured[name])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mla_with_checkpointing_keeps_each_layers_input(lib, tmp_path, precision):
    # gradient checkpointing: the forward keeps each layer's input, the final norm's tensors, the
    # head's input and the logits (memform: stage_layer_activations + logits) within 1 %
    path = write_configs(tmp_path, {"mla": MLA})["mla"]
    m = run_measure(lib, path, micro_batch=2, seq_len=32, precision=precision, recompute="full")
    assert abs(m.error("saved_for_backward")) <= 0.01, (m.predicted, m.measured)


def test_mla_latents_are_what_a_gqa_layer_lacks(lib, tmp_path):
    # the same tiny MLA model in fp32 with SDPA, the latents' share by hand, per token and layer:
    # q latent: its norm's input (fp32, the upcast is the input itself), normalised latent and
    # reciprocal RMS, and q_b_proj's input: 48 x 3 x 4 + 4; KV latent likewise over its 32
    # elements plus the 8-wide rotary key beside it in the norm's input storage; the value is
    # a view of kv_b_proj's output (4 heads x (16 + 24)), so the 4 x 16 no-position keys stay
    # too; o_proj reads a contiguous copy of SDPA's heads-first output (4 x 24)
    path = write_configs(tmp_path, {"mla": MLA})["mla"]
    m = run_measure(lib, path, micro_batch=2, seq_len=32, precision="fp32")
    config = read_config(path, lib)
    s = Scenario.create(lib, None, values={**config.values, "micro_batch": 2, "seq_len": 32, "precision": "fp32"})
    per_token = (48 * 12 + 4) + (32 * 12 + 4 + 8 * 4) + (4 * 16) * 4 + (4 * 24) * 4
    assert s.evaluate("mla_latents_saved") + s.evaluate("mla_layout_copies") == per_token
    assert m.measured["saved_for_backward"] - m.predicted["saved_for_backward"] == 4
    dropped = m.predicted["saved_for_backward"] - 2 * 64 * per_token  # two layers of 64 tokens
    assert dropped < m.measured["saved_for_backward"] * 0.8


def test_format_table_names_every_component(lib, config_files):
    text = format_table(run_measure(lib, config_files["gpt2"], micro_batch=1, seq_len=8, precision="fp32"))
    for name in EXACT + ("saved_for_backward",):
        assert name in text


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def test_cli_measure_json(config_files):
    code, out, err = cli("measure", str(config_files["llama"]), "--set", "micro_batch=2", "seq_len=16",
                         "precision=bf16", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["family"] == "llama"
    assert data["components"]["kv_cache"]["relative_error"] == 0


@pytest.mark.parametrize("setting, message", [
    ("precision=fp8_mixed", "measure runs precision fp32, bf16 (pure) or bf16_mixed"),
    ("recompute=selective", "selective has no transformers counterpart"),
    ("tp=2", "tp must be 1"),
    ("torch_compile=model", "not the whole model"),
])
def test_cli_measure_rejects_what_it_cannot_run(config_files, setting, message):
    code, out, err = cli("measure", str(config_files["llama"]), "--set", "precision=fp32", setting)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_calibrate_writes_a_rule_file_memform_loads(lib, config_files, tmp_path):
    import engine
    from engine.answers.measure import calibrate
    config = read_config(config_files["llama"], lib)
    scenario = Scenario.create(lib, None, values={**config.values, "precision": "bf16"})
    cal = calibrate(scenario, str(config_files["llama"]), points=((1, 16), (2, 32), (1, 64), (2, 64)))
    path = tmp_path / "calibrated.mem"
    path.write_text(cal.rule_file())
    mine = engine.load(extra=[str(path)])
    s = Scenario.create(mine, None, values={**read_config(config_files["llama"], mine).values,
                                            "precision": "bf16", "micro_batch": 4, "seq_len": 32,
                                            "activation_model": "architecture"})
    m = run_measure(lib, config_files["llama"], micro_batch=4, seq_len=32, precision="bf16")
    predicted = s.evaluate("activations") + s.evaluate("logits")
    assert abs(float(predicted) / m.measured["saved_for_backward"] - 1) < 0.02


def test_cli_calibrate_writes_the_file(config_files, tmp_path):
    out_file = tmp_path / "cal.mem"
    code, out, err = cli("calibrate", str(config_files["gpt2"]), "--set", "precision=fp32", "--out", str(out_file))
    assert code == 0, err
    assert out_file.read_text().count("override rule") == 2


def test_gpu_peak_script_dry_run_on_the_cpu(tmp_path):
    """bench/gpu_peak.py compares peaks on a GPU; on the CPU it runs the same step as a dry run."""
    import re
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parent.parent / "bench" / "gpu_peak.py"
    done = subprocess.run([sys.executable, str(script), "llama2-7b", "--device", "cpu", "--layers", "2",
                           "--set", "hidden_size=64", "--set", "num_attention_heads=4",
                           "--set", "num_key_value_heads=2", "--set", "intermediate_size=96",
                           "--set", "vocab_size=128", "--set", "micro_batch=2", "--set", "seq_len=16"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    built = int(re.search(r"\(llama, ([\d,]+) parameters\)", done.stdout).group(1).replace(",", ""))
    predicted = int(re.search(r"memform n_params +([\d,]+)", done.stdout).group(1).replace(",", ""))
    assert built == predicted  # torch's count of the model the script built
    assert "memform peak" in done.stdout and "not measured on the CPU" in done.stdout


@pytest.mark.parametrize("family, precision, bound", [("llama", "fp32", 0.03), ("gpt2", "fp32", 0.03),
                                                      ("llama", "bf16", 0.10), ("mixtral", "bf16", 0.12),
                                                      ("qwen2_moe", "bf16", 0.08)])
def test_peak_with_full_recomputation_counts_the_backward_gradients(lib, config_files, family, precision, bound):
    # with gradient checkpointing the step peaks inside backward: the layer being recomputed, its
    # activation gradients (one block's: the MLP's activation, gate and up gradients) and every
    # weight gradient.  Without the block's gradients these points were 9-25 % low; in bf16 the
    # norms' fp32 upcasts and the router's softmax are not modelled yet (the looser bounds)
    for b, s in ((4, 32), (8, 64)):
        m = run_measure(lib, config_files[family], peak=True, micro_batch=b, seq_len=s, precision=precision,
                        recompute="full")
        assert abs(m.error("peak")) <= bound, (family, precision, b, s, m.predicted["peak"], m.measured["peak"])


#: a vocabulary of 32 makes the loss and the output layer small beside the layers, so that the
#: step peaks in the last layer's backward, its first (Llama with a wide MLP, GPT-2)
SMALL_VOCAB = {"llama": {**CONFIGS["llama"], "vocab_size": 32, "intermediate_size": 512},
               "gpt2": {**CONFIGS["gpt2"], "vocab_size": 32}}


@pytest.fixture(scope="module")
def small_vocab_files(tmp_path_factory):
    return write_configs(tmp_path_factory.mktemp("small_vocab"), SMALL_VOCAB)


@pytest.mark.parametrize("finetune", ["full", "lora"])
@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("family", sorted(SMALL_VOCAB))
def test_peak_in_the_last_layers_backward(lib, small_vocab_files, family, recompute, finetune):
    # where the logits are small the step peaks when backward reaches the last layer: every
    # saved tensor still there (the output layer's freed) with that layer's activation gradients
    # (the MLP's product, activation and up gradients at once, its down projection's input
    # already freed).  Counting only the turn to backward and its end, these points were up to
    # 14 % low
    extra = dict(finetune="lora", lora_rank=8, lora_dtype="fp32") if finetune == "lora" else {}
    for b, s in ((4, 32), (8, 64)):
        m = run_measure(lib, small_vocab_files[family], peak=True, micro_batch=b, seq_len=s, precision="fp32",
                        recompute=recompute, **extra)
        assert abs(m.error("peak")) <= 0.025, (family, recompute, finetune, b, s, m.predicted["peak"],
                                               m.measured["peak"])


#: four-layer versions of three families, to checkpoint some layers or groups of them
FOUR_LAYERS = {"llama": {"num_hidden_layers": 4}, "mixtral": {"num_hidden_layers": 4}, "gpt2": {"n_layer": 4}}


@pytest.fixture(scope="module")
def four_layer_files(tmp_path_factory):
    return write_configs(tmp_path_factory.mktemp("four"),
                         {name: {**CONFIGS[name], **change} for name, change in FOUR_LAYERS.items()})


@pytest.mark.parametrize("method, layers", [("block", 1), ("block", 3), ("uniform", 2), ("uniform", 4)])
@pytest.mark.parametrize("precision", ["fp32", "bf16_mixed"])
@pytest.mark.parametrize("family", sorted(FOUR_LAYERS))
def test_partial_recomputation_against_checkpointing(lib, four_layer_files, family, precision, method, layers):
    # Megatron's --recompute-method: block checkpoints the first N layers (transformers' per-layer
    # flag), uniform groups of N layers (each group one torch.utils.checkpoint region); measured:
    # what the forward keeps and the step's peak.  With gradients freed every step (bf16_mixed,
    # the hf stack) a group's other layers have no gradient yet when its backward starts
    m = run_measure(lib, four_layer_files[family], peak=True, micro_batch=4, seq_len=32, precision=precision,
                    recompute="full", recompute_method=method, recompute_num_layers=layers)
    assert m.settings["recompute_num_layers"] == str(layers)
    assert abs(m.error("saved_for_backward")) <= 0.02, (m.predicted, m.measured)
    assert abs(m.error("peak")) <= 0.06, (m.predicted["peak"], m.measured["peak"])


def test_checkpointing_fewer_layers_keeps_more(lib, four_layer_files):
    # the measured forward keeps more with each layer left out of checkpointing, and memform
    # follows it step by step
    saved = [run_measure(lib, four_layer_files["llama"], micro_batch=4, seq_len=32, recompute="full",
                         recompute_method="block", recompute_num_layers=n) for n in (1, 2, 3, 4)]
    measured = [m.measured["saved_for_backward"] for m in saved]
    predicted = [m.predicted["saved_for_backward"] for m in saved]
    assert measured == sorted(measured, reverse=True) and len(set(measured)) == 4
    assert predicted == sorted(predicted, reverse=True) and len(set(predicted)) == 4


# ---------------------------------------------------------------- torch.compile
# measure --set torch_compile=blocks compiles each decoder layer with the partitioner Inductor
# splits training graphs with (backend aot_eager_decomp_partition, which runs the split graphs
# eagerly): what torch saves for backward is then Inductor's choice, measured, not derived.
#: (family, precision) -> bound where a gap is known, and why; every other pair is held to 0.5 %
COMPILED_GAPS = {
    # one hidden-size working-dtype tensor per layer more than memform counts in the shared-expert
    # MoE block under autocast (not identified)
    ("qwen2_moe", "bf16_mixed"): 0.035,
}


@pytest.fixture(scope="module")
def compiled_table(lib, config_files):
    rows = []
    for family in sorted(CONFIGS):
        for precision in ("bf16", "bf16_mixed"):
            eager = run_measure(lib, config_files[family], micro_batch=4, seq_len=64, precision=precision)
            compiled = run_measure(lib, config_files[family], micro_batch=4, seq_len=64, precision=precision,
                                   torch_compile="blocks")
            rows.append((family, precision, eager, compiled))
    return rows


def test_compiled_blocks_keep_what_inductors_partitioner_saves(compiled_table, capsys):
    """Compiled, a norm keeps its input and reciprocal RMS, a gated MLP its gate, up and product,
    autocast one cast per normalised input, a pre-norm MLP's input the attention projection's
    output: 21-50 % less than eager, held to 0.5 % (the final norm, outside the blocks, eager)."""
    with capsys.disabled():
        print("\ncompiled   precision    saved eager: measured   compiled: memform   measured   error")
        for family, precision, eager, compiled in compiled_table:
            print(f"{family:11} {precision:11} {eager.measured['saved_for_backward']:19,} "
                  f"{compiled.predicted['saved_for_backward']:18,} {compiled.measured['saved_for_backward']:10,} "
                  f"{100 * compiled.error('saved_for_backward'):+6.2f} %")
    for family, precision, eager, compiled in compiled_table:
        assert compiled.measured["saved_for_backward"] < 0.85 * eager.measured["saved_for_backward"]
        bound = COMPILED_GAPS.get((family, precision), 0.005)
        assert abs(compiled.error("saved_for_backward")) <= bound, (family, precision, compiled.predicted,
                                                                   compiled.measured)
        assert "peak" not in compiled.measured  # the eager backend's temporaries are not Inductor's


def test_compiled_eager_attention_keeps_scores_and_probabilities_in_bf16(lib, config_files):
    # the scores before the mask and the probabilities, both bf16, with the softmax's row maximum
    # and sum (eager: the fp32 softmax and its bf16 copy); what memform leaves out is the causal
    # mask the compiled graph also keeps, once per micro-batch (b s^2 in bf16: 2 % here)
    m = run_measure(lib, config_files["llama"], micro_batch=4, seq_len=64, precision="bf16", attention="eager",
                    torch_compile="blocks")
    assert abs(m.error("saved_for_backward")) <= 0.025, (m.predicted, m.measured)


def test_a_compiled_cross_entropy_keeps_the_bf16_logits(lib):
    # torch.compile'd F.cross_entropy over bf16 logits (torchtitan's compiled loss): what it saves
    # is measured; memform's logits with loss_kernel = compiled are the bf16 logits themselves
    import torch.nn.functional as F
    b, s, vocab = 2, 48, 1000

    def loss_fn(pred, labels):
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, backend="aot_eager_decomp_partition")
    pred = torch.randn(b, s, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (b, s))
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = compiled(pred, labels)
    loss.backward()
    assert pred.grad.dtype == torch.bfloat16
    scenario = Scenario.create(lib, "gpt2", values=dict(vocab_size=vocab, micro_batch=b, seq_len=s, precision="bf16",
                                                        loss_kernel="compiled"))
    predicted = int(scenario.evaluate("logits_tensor"))
    measured = sum(saved.values())  # the logits, the labels and two fp32 values per row
    assert predicted <= measured <= 1.02 * predicted, (predicted, measured)
    eager = Scenario.create(lib, "gpt2", values=dict(vocab_size=vocab, micro_batch=b, seq_len=s, precision="bf16"))
    assert int(eager.evaluate("logits_tensor")) == 2 * predicted  # eager: the fp32 log-probabilities


# ---------------------------------------------------------------- LoRA (PEFT)
# measure --set finetune=lora applies PEFT's get_peft_model to the model it builds: the base
# frozen (a frozen matmul keeps no input, a frozen norm no normalised output, the frozen
# embedding no ids and the first norm nothing), each adapter its input (PEFT's fp32 adapters a
# cast copy each) and A x.  Dense models; the first layer of a model whose k projection has no
# adapter and a norm of its own (Qwen3, Gemma 3 under qv) or whose MLP reads the normalised
# input directly (Cohere's parallel block under qv or attention) keeps less than memform counts.
# MoE blocks: the router and the routed experts (transformers 5's 3-D parameters, which PEFT's
# all-linear does not match) stay frozen, the shared experts and their gate get adapters; PEFT
# 0.21 maps Mixtral's experts through its transformers-4 conversion instead (ParamWrapper: a
# weight-sized delta kept for backward), so Mixtral is held under attention and qv only.
# qvo_mlp: torchtune's recipes (q, v, the output projection and the MLP; k frozen).
LORA_CASES = [(family, targets, dtype)
              for family in ("llama", "qwen3", "gemma3_text", "cohere", "gpt2", "qwen2_moe", "mixtral")
              for targets in ("all_linear", "attention", "qv", "qvo_mlp") for dtype in ("fp32", "working")
              if (targets == "all_linear" and family != "mixtral") or family in ("llama", "gpt2", "qwen2_moe")
              or (family in ("qwen3", "gemma3_text") and targets == "attention")
              or (family == "mixtral" and targets in ("attention", "qv"))]


@pytest.fixture(scope="module")
def lora_table(lib, config_files):
    pytest.importorskip("peft", reason="measuring LoRA needs peft (pip install 'memform[torch]')")
    rows = []
    for family, targets, dtype in LORA_CASES:
        m = run_measure(lib, config_files[family], peak=True, micro_batch=4, seq_len=64, precision="bf16", finetune="lora",
                        lora_rank=8, lora_targets=targets, lora_dtype=dtype)
        rows.append((family, targets, dtype, m))
    return rows


def test_lora_keeps_the_adapters_inputs_and_nothing_for_the_frozen_base(lib, config_files, lora_table, capsys):
    full = run_measure(lib, config_files["llama"], micro_batch=4, seq_len=64, precision="bf16")
    with capsys.disabled():
        print("\nLoRA (PEFT, bf16 base, r 8)   adapters   saved: memform   measured   error")
        for family, targets, dtype, m in lora_table:
            print(f"{family:11} {targets:11} {dtype:8} {m.predicted['saved_for_backward']:18,} "
                  f"{m.measured['saved_for_backward']:10,} {100 * m.error('saved_for_backward'):+6.2f} %"
                  f"   peak {100 * m.error('peak'):+6.2f} %")
    for family, targets, dtype, m in lora_table:
        assert abs(m.error("saved_for_backward")) <= 0.005, (family, targets, dtype, m.predicted, m.measured)
        # the adapters' model states in their dtype: fp32 adapters (PEFT's default) are their own
        # master copy with fp32 gradients and AdamW states, bf16 adapters keep bf16 ones
        for component in ("n_params", "weights", "grads", "optimizer_states"):
            assert m.measured[component] == m.predicted[component], (family, targets, dtype, component,
                                                                     m.predicted, m.measured)
        assert abs(m.error("peak")) <= 0.02, (family, targets, dtype, m.predicted["peak"], m.measured["peak"])
    llama = {(t, d): m.measured["saved_for_backward"] for f, t, d, m in lora_table if f == "llama"}
    # bf16 adapters on q and v keep less than full training; PEFT's fp32 casts of every input more
    assert llama["qv", "working"] < 0.75 * full.measured["saved_for_backward"] < llama["all_linear", "fp32"]


def test_adapted_experts_are_every_linear_module_of_a_transformers_4_moe_block(lib, config_files):
    """lora_experts=adapted: what PEFT's all-linear adapts in an MoE block built as transformers 4
    built Mixtral's (a router nn.Linear and, per expert, w1, w2, w3 nn.Linear), counted by PEFT."""
    pytest.importorskip("peft", reason="needs peft (pip install 'memform[torch]')")
    import torch.nn as nn
    from peft import LoraConfig, get_peft_model

    config = read_config(config_files["mixtral"], lib)
    h, inner, experts = (int(config.values[k]) for k in ("hidden_size", "intermediate_size", "num_experts"))

    class Expert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w2, self.w3 = nn.Linear(h, inner, bias=False), nn.Linear(inner, h, bias=False), nn.Linear(h, inner, bias=False)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(h, experts, bias=False)
            self.experts = nn.ModuleList(Expert() for _ in range(experts))

    class Blocks(nn.Module):  # no output layer: PEFT leaves out a PreTrainedModel's head only
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block()])

    peft = get_peft_model(Blocks(), LoraConfig(r=8, target_modules="all-linear"))
    adapters = [p for p in peft.parameters() if p.requires_grad]

    def scenario(targets):
        return Scenario.create(lib, None, values={**config.values, "finetune": "lora", "lora_rank": 8,
                                                  "lora_targets": targets, "lora_experts": "adapted"})
    layers = int(scenario("attention").evaluate("num_moe_layers"))
    for rule, peft_count in (("lora_params", sum(p.numel() for p in adapters)), ("trainable_tensors", len(adapters))):
        per_block = (scenario("all_linear").evaluate(rule) - scenario("attention").evaluate(rule)) / layers
        assert per_block == peft_count, (rule, per_block, peft_count)


def test_cli_measure_lora_needs_a_base_without_autocast_and_no_dropout(config_files):
    code, out, err = cli("measure", str(config_files["llama"]), "--set", "finetune=lora", "lora_dropout=0.1")
    assert code == 2 and "lora_dropout=0" in err and "Traceback" not in err
    code, out, err = cli("measure", str(config_files["llama"]), "--set", "finetune=lora", "precision=bf16_mixed")
    assert code == 2 and "no autocast" in err and "Traceback" not in err
