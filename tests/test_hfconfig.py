"""Hugging Face config.json files: one-to-one mapping, exact counts, clear errors."""
import io
import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import EngineError
from engine.hfconfig import read_config
from engine.model import Scenario

CONFIGS = Path(__file__).parent / "configs"  # copies of the models' public config.json files

PUBLISHED = {  # model cards / technical reports; the MoE figures counted by hand in test_params
    "llama-2-7b": 6_738_415_616,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "qwen1.5-moe-a2.7b": 14_315_784_192,  # model card: 14.3B total, 2.7B activated
    "gemma-7b": 8_537_680_896,
    "gpt2": 124_439_808,
    "deepseek-v3": 671_026_419_200,
}


def scenario(lib, name, **values):
    config = read_config(CONFIGS / f"{name}.json", lib)
    assert config.unknown == ()
    return Scenario.create(lib, None, values={**config.values, **values})


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_config_parameter_count(lib, name):
    assert scenario(lib, name).evaluate("n_params") == PUBLISHED[name]


@pytest.mark.parametrize("name, preset", [("llama-2-7b", "llama2-7b"), ("mixtral-8x7b", "mixtral-8x7b"),
                                          ("deepseek-v3", "deepseek-v3"), ("gpt2", "gpt2"),
                                          ("qwen2.5-7b", "qwen2.5-7b"), ("gemma-7b", "gemma-7b")])
def test_config_and_preset_agree(lib, name, preset):
    values = {"micro_batch": 2, "seq_len": 1024, "dropout": 0}
    from_config = scenario(lib, name, **values)
    from_preset = Scenario.create(lib, preset, values=values)
    for rule in ("total", "kv_cache", "activations"):
        assert from_config.evaluate(rule) == from_preset.evaluate(rule), rule


def test_qwen_moe_active_parameters(lib):
    # 24 x (16,783,360 attention + 4 x 8,650,752 experts + 34,605,056 shared + 122,880 router
    #       + 4,096 norms) + 622,329,856 embeddings + 2,048 final norm, counted by hand
    assert scenario(lib, "qwen1.5-moe-a2.7b").evaluate("n_params_active") == 2_689_173_504


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


def test_cli_estimates_a_config():
    code, out, err = run("estimate", str(CONFIGS / "deepseek-v3.json"), "--set", "mode=infer", "--json")
    assert code == 0 and err == ""
    assert json.loads(out)["rules"]["weights"] == 2 * 671_026_419_200


def write(tmp_path, data, text=None):
    path = tmp_path / "config.json"
    path.write_text(text if text is not None else json.dumps(data, indent=1))
    return path


LLAMA = json.loads((CONFIGS / "llama-2-7b.json").read_text())


def test_missing_field_names_field_and_file(tmp_path):
    path = write(tmp_path, {k: v for k, v in LLAMA.items() if k != "intermediate_size"})
    code, _, err = run("estimate", str(path))
    assert code == 2
    assert err.startswith(f"memform: error: {path}: missing field 'intermediate_size'")


def test_wrong_type_is_located(tmp_path):
    path = write(tmp_path, {**LLAMA, "hidden_size": "4096"})
    code, _, err = run("estimate", str(path))
    assert code == 2
    line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if '"hidden_size"' in l)
    assert err.startswith(f"{path}:{line}:2: field 'hidden_size' must be a number, not \"4096\"")


def test_out_of_domain_value_is_located(tmp_path):
    path = write(tmp_path, {**LLAMA, "num_hidden_layers": 0})
    code, _, err = run("estimate", str(path))
    assert code == 2 and "'num_hidden_layers' must be >= 1, not 0" in err


def test_unknown_architecture(tmp_path):
    path = write(tmp_path, {**LLAMA, "model_type": "lama"})
    code, _, err = run("estimate", str(path))
    assert code == 2 and "unsupported model_type \"lama\"" in err and "did you mean 'llama'?" in err


def test_invalid_json_points_at_the_character(tmp_path):
    path = write(tmp_path, None, text='{"model_type": "llama",\n "hidden_size": 4096,,\n}')
    code, _, err = run("estimate", str(path))
    assert code == 2 and err.startswith(f"{path}:2:22: not valid JSON")


def test_unknown_fields_are_reported_not_dropped(lib, tmp_path):
    config = read_config(write(tmp_path, {**LLAMA, "my_new_field": 3}), lib)
    assert config.unknown == ("my_new_field",)
    assert "rope_scaling" in config.ignored
    code, _, err = run("estimate", str(tmp_path / "config.json"))
    assert code == 0
