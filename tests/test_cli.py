"""The command line: output, JSON, exit codes and rendered errors (no tracebacks)."""
import io
import json
import subprocess
import sys

import pytest

from engine.cli import main

LLAMA2_7B_PARAMS = 6_738_415_616  # Hugging Face model card / Touvron et al. 2023b


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_estimate_json_shape_and_model_states():
    code, out, err = run("estimate", "llama2-7b", "--gpu", "h100-80g", "--json", "--set", "alloc_margin=0",
                         "--set", "cuda_context=0", "--set", "optimizer_step_bytes=0")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert set(data) >= {"total_bytes", "components", "rules", "inputs", "fits"}
    assert set(data["rules"]) == {"weights", "master", "grads", "optimizer_states", "model_states",
                                  "activations", "logits", "kv_cache", "overhead", "total", "peak_allocated", "peak_reserved", "peak"}
    # ZeRO paper: mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes per parameter
    assert data["rules"]["model_states"] == 16 * LLAMA2_7B_PARAMS
    assert data["rules"]["weights"] == 2 * LLAMA2_7B_PARAMS
    assert sum(data["components"].values()) == data["total_bytes"]
    assert data["capacity_bytes"] == 81559 * 2**20  # nvidia-smi's memory.total of an H100 80GB
    # what the process can use: CUDA's total, 79.19 GiB in vLLM's log (docs/research/cuda-total-memory.md)
    assert data["usable_bytes"] == (81559 - 469) * 2**20
    assert data["fits"] is (data["total_bytes"] <= (81559 - 469) * 2**20)
    assert data["inputs"]["precision"] == "bf16_mixed" and data["inputs"]["micro_batch"] == 1


def test_estimate_zero3_over_eight_ranks():
    code, out, _ = run("estimate", "llama2-70b", "--json", "--set", "n_params=70e9",
                       "--set", "zero_stage=3", "--set", "dp=8", "--set", "optimizer_step_bytes=0")
    assert code == 0
    assert json.loads(out)["rules"]["model_states"] == 16 * 70 * 10**9 // 8  # ZeRO: 16 P / N


def test_estimate_table_shows_fit_and_formula():
    code, out, _ = run("estimate", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8")
    assert code == 0
    assert "optimizer_states" in out and "n_params" in out
    assert "fits h100-80g" in out


def test_capacity_flag():
    code, out, _ = run("estimate", "llama2-7b", "--capacity", "80GB", "--json")
    assert code == 0 and json.loads(out)["capacity_bytes"] == 80 * 10**9


def test_the_fit_is_against_what_cuda_hands_out():
    """A total between CUDA's total and nvidia-smi's does not fit: the driver keeps the
    difference (an A10: 23028 MiB in nvidia-smi, 429 MiB reserved)."""
    between = (23028 - 200) * 2**20
    code, out, _ = run("estimate", "llama2-7b", "--gpu", "a10", "--json", "--set", f"total={between}")
    assert code == 2  # total is derived, so it cannot be pinned: pin a component instead
    parts = ["--set", "weights=0", "--set", "master=0", "--set", "grads=0", "--set", "optimizer_states=0",
             "--set", "activations=0", "--set", "logits=0", "--set", "overhead=0",
             "--set", f"kv_cache={between}"]
    code, out, _ = run("estimate", "llama2-7b", "--gpu", "a10", "--json", *parts)
    data = json.loads(out)
    assert data["total_bytes"] == between and data["capacity_bytes"] == 23028 * 2**20
    assert data["usable_bytes"] == (23028 - 429) * 2**20 and data["fits"] is False
    code, out, _ = run("estimate", "llama2-7b", "--capacity", "23028MiB", "--json", *parts)
    assert json.loads(out)["fits"] is True  # a capacity given alone reserves nothing


def test_a_capacity_below_the_driver_reserve_is_an_error():
    code, _, err = run("estimate", "llama2-7b", "--gpu", "a10", "--set", "capacity=100MiB")
    assert code == 2 and "usable_memory" in err and "driver_reserved" in err


@pytest.mark.parametrize("argv, expected", [
    (["estimate", "llama2-7b", "--set", "micro_batch=-1"],
     "--set:1:13: 'micro_batch' must be >= 1, not -1\n"
     "    1 | micro_batch=-1\n"
     "      |             ^^\n"
     "hint: declared at formulas/activations.mem:9: sequences per GPU per step (b)\n"),
    (["estimate", "llama2-7b", "--set", "zero_stage=5"],
     "--set:1:12: '5' is not a choice of option 'zero_stage'\n"
     "    1 | zero_stage=5\n"
     "      |            ^\n"
     "hint: choices are 0, 1, 2, 3\n"),
    (["estimate", "llama2-7b", "--set", "micro_bach=4"],
     "--set:1:1: unknown name 'micro_bach'\n"
     "    1 | micro_bach=4\n"
     "      | ^^^^^^^^^^\n"
     "hint: did you mean 'micro_batch'?\n"),
    (["estimate", "llama2-7b", "--set", "dp=0"],
     "--set:1:4: 'dp' must be >= 1, not 0\n"
     "    1 | dp=0\n"
     "      |    ^\n"
     "hint: declared at formulas/parallel.mem:6: data-parallel ranks (N in the ZeRO paper)\n"),
    (["estimate", "llama2-7b", "--set", "micro_batch=2.5"],
     "--set:1:13: 'micro_batch' must be a whole number, not 2.5\n"
     "    1 | micro_batch=2.5\n"
     "      |             ^^^\n"),
    (["estimate", "llama2-7b", "--set", "seq_len=4 GB"],
     "--set:1:9: 'seq_len' is in tokens but the value is in bytes\n"
     "    1 | seq_len=4 GB\n"
     "      |         ^^^^\n"),
    (["estimate", "llama2-7x"],
     "memform: error: unknown model 'llama2-7x'\nhint: did you mean 'llama2-7b'?\n"),
    # a GPU named without its memory suffix: the presets it begins, not the closest spelling (h20)
    (["estimate", "llama2-7b", "--gpu", "h200"],
     "memform: error: unknown gpu 'h200'\nhint: did you mean 'h200-141g'?\n"),
    (["estimate"],
     "memform: error: the following arguments are required: MODEL\nhint: see 'memform estimate --help'\n"),
])
def test_usage_errors_exit_2_with_located_message(argv, expected):
    code, out, err = run(*argv)
    assert (code, out, err) == (2, "", expected)


def test_bad_user_rule_file_is_located(tmp_path):
    bad = tmp_path / "mine.mem"
    bad.write_text('override rule overhead : bytes =\n    cuda_context + alloc_margn * tensors "mine"\n')
    code, _, err = run("estimate", "llama2-7b", "--rules", str(bad))
    assert code == 2
    assert err == (f"{bad}:2:20: unknown name 'alloc_margn' in rule 'overhead'\n"
                   "    2 |     cuda_context + alloc_margn * tensors \"mine\"\n"
                   "      |                    ^^^^^^^^^^^\n"
                   "hint: did you mean 'alloc_margin'?\n")


def test_check_passes_on_the_library():
    code, out, _ = run("check", "--samples", "200")
    assert code == 0
    assert " 0 failed" in out


def test_check_catches_the_seed_zero1_formula(tmp_path):
    # seed document 001, sec. 5.1: "ZeRO-1 = 8P/N + 4P" leaves the fp32 master copy out
    seed = tmp_path / "seed.mem"
    seed.write_text('override rule model_states : bytes =\n'
                    '    weights + grads + optimizer_states + (if zero_stage >= 1 then 0 else master)\n'
                    '    "the seed document\'s ZeRO-1 accounting"\n')
    code, out, _ = run("check", str(seed), "--samples", "200")
    assert code == 1
    assert "FAIL  ZeRO-1 on one rank equals plain data parallel" in out


def test_python_m_engine_runs():
    proc = subprocess.run([sys.executable, "-m", "engine", "presets"], capture_output=True, text=True)
    assert proc.returncode == 0 and "llama2-70b" in proc.stdout and "h100-80g" in proc.stdout


def test_offload_reports_host_memory():
    # ZeRO-Offload (Ren et al. 2021, sec. 4.1): fp32 master, fp32 gradients and Adam's m, v
    # live in CPU memory (16 bytes per parameter), sharded over the dp ranks with ZeRO
    code, out, _ = run("estimate", "llama2-70b", "--json", "--set", "zero_stage=2", "--set", "dp=8",
                       "--set", "offload=optimizer", "--set", "optimizer_step_bytes=0")
    data = json.loads(out)
    assert code == 0
    assert data["rules"]["host_memory"] == 16 * 68_976_648_192 // 8
    assert data["rules"]["master"] == data["rules"]["optimizer_states"] == 0


def test_nvme_offload_moves_the_states_to_storage_and_keeps_pinned_buffers_in_cpu_memory():
    # ZeRO-Infinity with everything offloaded to NVMe: per rank 16 bytes of optimizer side and
    # 2 bytes of bf16 weights per parameter on NVMe; CPU memory holds DeepSpeed's default
    # offload_param staging buffers, 5 x 1e8 elements of 2 bytes
    code, out, _ = run("estimate", "llama2-70b", "--json", "--set", "zero_stage=3", "--set", "dp=8",
                       "--set", "offload=optimizer_and_params", "--set", "offload_device=nvme",
                       "--set", "optimizer_step_bytes=0")
    data = json.loads(out)
    assert code == 0
    assert data["rules"]["nvme_storage"] == 18 * 68_976_648_192 // 8
    assert data["rules"]["host_memory"] == 5 * 10**8 * 2
    assert data["rules"]["weights"] == data["rules"]["master"] == data["rules"]["optimizer_states"] == 0


@pytest.mark.parametrize("arg, column, hint", [
    ("capacity=80 GQ", 13, "a value is a number with an optional byte unit"),
    ("micro_batch= 2 +", 17, "expected '(', '-', a name, a number"),
])
def test_set_syntax_errors_point_into_the_whole_argument(arg, column, hint):
    code, out, err = run("estimate", "llama2-7b", "--set", arg)
    assert code == 2 and out == ""
    head, line, caret, hint_line = err.splitlines()
    assert head.startswith(f"--set:1:{column}: ")
    assert line.endswith(f"| {arg}")
    assert caret.index("^") - caret.index("|") - 2 == column - 1
    assert hint_line.startswith(f"hint: {hint}")
