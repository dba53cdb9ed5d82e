"""What a new user tripped on (issue 12): layouts, names, units, scripting, output.

Expected figures are hand arithmetic on the model's published config (Llama-2-7B: 32 heads,
32 layers; Mixtral-8x7B: 8 experts), never memform's own output.
"""
import io
import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import engine
from engine.cli import main
from engine.answers.report import gb, json_number, scaled


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def estimate_json(*argv):
    code, out, err = run("estimate", *argv, "--json")
    assert code == 0, err or out
    return json.loads(out)


# ---------------------------------------------------------------- 3. one show
def test_the_api_show_is_the_cli_show():
    s = engine.Scenario.create(engine.load(), "llama2-7b")
    code, out, _ = run("show", "total", "llama2-7b")
    assert code == 0
    assert out.strip() == f"total = {engine.show(s, 'total')}"
    # every rule inlined: no top-level rule is left as a name
    assert not {"weights", "activations", "overhead"} & {str(x) for x in engine.show(s, "total").free_symbols}


def test_show_of_an_option_says_what_it_is():
    code, out, err = run("show", "finetune")
    assert code == 2
    assert "'finetune' is an option, not a rule" in err and "None" not in err


# ---------------------------------------------------------------- 5. impossible layouts
@pytest.mark.parametrize("argv, broken", [
    (("llama2-7b", "--set", "tp=3"), "tp=3 does not divide num_attention_heads (32)"),
    (("llama2-7b", "--set", "tp=64"), "tp=64 does not divide num_attention_heads (32)"),
    (("llama2-7b", "--set", "pp=5"), "pp=5 does not divide num_hidden_layers (32)"),
    (("mixtral-8x7b", "--set", "ep=3"), "ep=3 does not divide num_experts (8)"),
    (("llama2-7b", "--set", "ep=2"), "ep=2 needs num_experts > 0"),
])
def test_estimate_refuses_an_impossible_layout(argv, broken):
    for _ in range(2):  # the second run may take the fast path: it must refuse too
        code, out, err = run("estimate", *argv)
        assert code == 2 and out == ""
        assert broken in err and "--no-divisibility" in err


def test_no_divisibility_accepts_the_layout():
    data = estimate_json("llama2-7b", "--set", "tp=3", "--no-divisibility")
    assert data["inputs"]["tp"] == 3


def test_plan_refuses_an_impossible_expert_layout():
    code, _, err = run("plan", "mixtral-8x7b", "--gpu", "h100-80g", "--gpus", "8", "--set", "ep=3")
    assert code == 2 and "ep=3 does not divide num_experts (8)" in err


def test_a_valid_layout_is_accepted():
    assert estimate_json("llama2-7b", "--set", "tp=4", "--set", "pp=8")["inputs"]["pp"] == 8


# ---------------------------------------------------------------- 6. names
def test_names_lists_zero_stage_with_its_choices():
    code, out, _ = run("names", "zero")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("zero_stage "))
    assert "option" in row and "0 | 1 | 2 | 3" in row


def test_names_json_and_glob():
    code, out, _ = run("names", "*_bytes", "--json")
    rows = json.loads(out)
    assert code == 0 and rows and all(r["name"].endswith("_bytes") for r in rows)
    assert run("names", "no_such_thing_at_all")[0] == 1


@pytest.mark.parametrize("setting, names", [
    ("batch_size=4", "micro_batch"),
    ("qlora=1", "finetune=qlora"),
    ("world_size=8", "dp x tp x pp"),
    ("gradient_checkpointing=maybe", "recompute"),
    ("mixed_precision=bf16", "precision=bf16_mixed"),
    ("bf16=true", "precision=bf16_mixed"),  # also the name of a dtype
    ("fp16=true", "precision=fp16_mixed"),
])
def test_foreign_names_get_a_hint_naming_the_memform_setting(setting, names):
    code, _, err = run("estimate", "llama2-7b", "--set", setting)
    assert code == 2
    hint = err.split("hint:", 1)[1]
    assert names in hint


@pytest.mark.parametrize("foreign, own", [
    ("gradient_checkpointing=true", "recompute=full"),
    ("per_device_train_batch_size=4", "micro_batch=4"),
    ("max_seq_length=4096", "seq_len=4096"),
    ("tensor_model_parallel_size=2", "tp=2"),
    ("sequence_length=1024", "seq_len=1024"),
])
def test_foreign_names_that_map_one_to_one_are_applied(foreign, own, capsys):
    assert estimate_json("llama2-7b", "--set", foreign) == estimate_json("llama2-7b", "--set", own)
    # and the user is told what was understood
    code, _, _ = run("estimate", "llama2-7b", "--set", foreign)
    assert f"is memform's --set {own}" in capsys.readouterr().err


def test_a_choice_given_as_a_name_points_at_its_option():
    code, _, err = run("estimate", "llama2-7b", "--set", "selective=1")
    assert code == 2 and "--set recompute=selective" in err


# ---------------------------------------------------------------- 7. units
def test_capacity_needs_a_unit():
    code, _, err = run("estimate", "llama2-7b", "--capacity", "24")
    assert code == 2 and "no unit" in err and "24GiB" in err


def test_capacity_just_short_in_gb_says_a_card_has_gib():
    # Llama-2-7B inference in bf16 with a 16k context: 2 x 6,738,415,616 bytes of weights
    # + 512 KiB of KV cache per token x 16,384 tokens = 22.07 GB: above 21 GB, below 21 GiB
    code, out, _ = run("estimate", "llama2-7b", "--capacity", "21GB", "--set", "mode=infer",
                       "--set", "seq_len=16384", "--set", "activations=0", "--set", "overhead=0")
    assert code == 0
    assert "does not fit" in out and "has 21 GiB" in out


# ---------------------------------------------------------------- 8. scripting
def test_check_exits_1_when_the_job_does_not_fit():
    # Llama-2-70B's bf16 weights alone are 2 x 68,976,648,192 bytes = 138 GB > 80 GB
    assert run("estimate", "llama2-70b", "--gpu", "h100-80g", "--set", "mode=infer", "--check")[0] == 1
    assert run("estimate", "gpt2", "--gpu", "h100-80g", "--check")[0] == 0
    assert run("estimate", "gpt2", "--check")[0] == 2  # nothing to check against


def test_json_errors_are_json_on_stdout():
    code, out, err = run("estimate", "llama2-7b", "--set", "tp=3", "--json")
    assert code == 2 and err == ""
    error = json.loads(out)["error"]
    assert error["type"] == "DomainError" and "tp=3" in error["message"] and error["exit_code"] == 2
    code, out, _ = run("estimate", "llama2-7b", "--set", "micro_batch=0", "--json")
    located = json.loads(out)["error"]["location"]
    assert code == 2 and located["file"] == "--set" and located["column"] == 13


def test_json_infeasible_solve_is_json_with_exit_1():
    code, out, _ = run("solve", "min", "dp", "llama2-70b", "--gpu", "h100-80g", "--set", "zero_stage=2", "--json")
    assert code == 1 and json.loads(out)["error"]["type"] == "InfeasibleError"


def test_version():
    proc = subprocess.run([sys.executable, "-m", "engine", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and re.match(r"memform \S+", proc.stdout)


# ---------------------------------------------------------------- 9. output
def test_header_of_inference_shows_dtypes_not_training_fields():
    code, out, _ = run("estimate", "llama2-7b", "--set", "mode=infer", "--set", "weight_dtype=int4",
                       "--set", "kv_dtype=fp8_e4m3")
    header = out.splitlines()[0]
    assert "weights int4" in header and "KV cache fp8_e4m3" in header
    assert "optimizer" not in header and "ZeRO" not in header and "bf16_mixed" not in header


def test_header_of_training_shows_what_changes_the_answer():
    code, out, _ = run("estimate", "llama2-7b", "--set", "finetune=qlora", "--set", "recompute=full",
                       "--set", "attention=eager")
    header = out.splitlines()[0]
    assert "qlora" in header and "recompute full" in header and "attention eager" in header


def test_quantised_weights_keep_the_named_share():
    code, out, _ = run("estimate", "llama2-7b", "--set", "mode=infer", "--set", "weight_dtype=int4")
    row = next(line for line in out.splitlines() if line.startswith("│ weights"))
    assert "quantised_params" in row
    assert not re.search(r"\d{5,}\*n_params/\d{5,}", out)
    assert re.search(r"^quantised_params = [\d,]+$", out, re.M)


def test_huge_values_print_without_a_traceback():
    code, out, err = run("estimate", "llama2-7b", "--set", "micro_batch=1e20")
    assert code == 0 and "e+" in out and "inf" not in out
    code, out, err = run("estimate", "llama2-7b", "--set", "micro_batch=1e400")
    assert code == 2 and "Traceback" not in err


@settings(max_examples=300, deadline=None)
@given(st.fractions(), st.integers(min_value=-5000, max_value=5000))
def test_the_formatter_takes_any_exact_number(x, exponent):
    value = x * Fraction(10) ** exponent
    for text in (scaled(value), gb(value), scaled(value, 1, 0)):
        assert "inf" not in text and "nan" not in text
    number = json_number(value)
    assert json.loads(json.dumps(number, allow_nan=False)) == number


def test_the_repr_of_an_estimate_is_short():
    est = engine.estimate(engine.Scenario.create(engine.load(), "llama2-7b", "h100-80g"))
    assert len(repr(est)) < 120 and "llama2-7b" in repr(est)


# ---------------------------------------------------------------- pins, models, paths (issue 18)
def test_pinning_the_total_is_refused():
    code, _, err = run("estimate", "deepseek-v3", "--gpu", "h100-80g", "--set", "total=91")
    assert code == 2 and "'total' is computed from the components" in err
    assert run("estimate", "gpt2", "--set", "model_states=1GB")[0] == 2


def test_pinning_a_component_moves_the_total():
    free = estimate_json("gpt2")
    pinned = estimate_json("gpt2", "--set", "weights=5GB")
    assert pinned["rules"]["weights"] == 5 * 10**9
    assert pinned["total_bytes"] - free["total_bytes"] >= 5 * 10**9 - free["rules"]["weights"]


def test_a_file_named_like_a_preset_does_not_replace_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama2-7b").write_text('{"model_type": "gpt2", "n_embd": 64}')
    preset = estimate_json("llama2-7b")
    assert preset["rules"]["weights"] == 2 * 6_738_415_616
    assert "./llama2-7b" in capsys.readouterr().err


def test_paths_too_long_or_with_markup_are_usage_errors(tmp_path):
    code, _, err = run("estimate", "x" * 300 + ".json")
    assert code == 2 and "Traceback" not in err
    code, _, err = run("estimate", "gpt2", "--rules", "y" * 300)
    assert code == 2
    code, _, err = run("estimate", str(tmp_path / "[/b]config.json"))
    assert code == 2 and "[/b]" in err


def test_a_hugging_face_id_not_cached_offline_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run("estimate", "meta-llama/Llama-2-7b-hf")
    assert code == 2 and "config.json" in err and "hf download meta-llama/Llama-2-7b-hf" in err
    assert "Traceback" not in err


def test_a_hugging_face_id_from_the_local_cache_answers_as_its_config_file(tmp_path, monkeypatch):
    # the cache as the Hub lays it out: refs/main -> a commit, snapshots/<commit>/config.json a
    # link into blobs/ (huggingface_hub's file_download.py)
    import os
    config = Path(__file__).parent / "configs" / "qwen2.5-7b.json"
    repo = tmp_path / "models--Qwen--Qwen2.5-7B"
    commit = "a" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    (repo / "blobs" / "0123abcd").write_bytes(config.read_bytes())
    (repo / "snapshots" / commit).mkdir(parents=True)
    os.symlink("../../blobs/0123abcd", repo / "snapshots" / commit / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    by_id = run("estimate", "Qwen/Qwen2.5-7B", "--gpu", "h100-80g", "--json")
    by_path = run("estimate", str(config), "--gpu", "h100-80g", "--json")
    assert by_id[0] == by_path[0] == 0, by_id[2]
    assert json.loads(by_id[1])["rules"] == json.loads(by_path[1])["rules"]


def test_json_errors_follow_the_parsed_flag():
    # after '--' the word is a pattern, not the flag: the answer is a table, not JSON
    code, out, _ = run("names", "--", "--json")
    assert code == 1 and "no name matches '--json'" in out
    code, out, _ = run("estimate", "gpt2", "--no-such-flag", "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "UsageError"
