"""config.json's quantization_config (issue 14, item 4): each method's stored layout, with the
bytes derived here by hand from the format's documented tensors, and one located error for a
block memform does not understand."""
import io
import json
from fractions import Fraction
from pathlib import Path

import pytest

from engine.cli import main
from engine.library.hfconfig import read_config
from engine.compile.model import Scenario

LLAMA31_8B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "max_position_embeddings": 131072, "tie_word_embeddings": False}
P = 8_030_261_248  # Llama-3.1-8B, model card
# the projections, by hand: q and o 4096 x 4096, k and v 4096 x 1024, gate, up, down 4096 x 14336
LINEAR = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
ROWS = 32 * (4096 + 1024 + 1024 + 4096 + 2 * 14336 + 4096)  # output rows of those projections
REST = (P - LINEAR) * 2  # embeddings, lm_head and norms stay bf16


def weights(lib, tmp_path, block, **values):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA31_8B, "quantization_config": block}))
    config = read_config(path, lib)
    s = Scenario.create(lib, None, values={**config.values, "mode": "infer", **values})
    return s.evaluate("weights")


@pytest.mark.parametrize("block, per_weight, per_row", [
    # GPTQ, 4 bits, groups of 128, symmetric, as stored: packed int4, and per group and output
    # one fp16 scale and a packed 4-bit zero point (qzeros, present in symmetric checkpoints too)
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
      "damp_percent": 0.01}, Fraction(1, 2) + Fraction(5, 2) / 128, 0),
    # GPTQ asymmetric, 8 bits: the packed zero point (1 byte) beside each fp16 scale
    ({"quant_method": "gptq", "bits": 8, "group_size": 64, "sym": False}, 1 + Fraction(3, 64), 0),
    # GPTQ without groups (group_size -1): one fp16 scale and zero point per output row
    ({"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": True}, Fraction(1, 2), Fraction(5, 2)),
    # AWQ GEMM: int4, an fp16 scale and a 4-bit zero point per group of 128
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
     Fraction(1, 2) + Fraction(5, 2) / 128, 0),
    # FP8 with per-tensor scales (a few fp32 scalars per layer, left out)
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, 1, 0),
    # block FP8 (DeepSeek-V3 style): one fp32 scale per 128 x 128 tile
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]},
     1 + Fraction(4, 128 * 128), 0),
    # compressed-tensors W8A8 int8, per-channel: one fp32 scale per output row
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
          "num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True, "dynamic": False},
          "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}}}}, 1, 4),
    # compressed-tensors FP8-dynamic: FP8 weights, one fp32 scale per output row
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
          "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False}}}}, 1, 4),
    # compressed-tensors W4A16, groups of 128, asymmetric: a bf16 scale and a 4-bit zero point
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
          "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": False}}}},
     Fraction(1, 2) + Fraction(5, 2) / 128, 0),
    # bitsandbytes NF4 with double quantisation: an 8-bit absmax per 64 and an fp32 per 64 x 256
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
      "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"},
     Fraction(1, 2) + Fraction(1, 64) + Fraction(4, 64 * 256), 0),
    # bitsandbytes NF4 alone: an fp32 absmax per 64 weights
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
     Fraction(1, 2) + Fraction(4, 64), 0),
    # LLM.int8: int8 weights and one fp32 scale per row
    ({"quant_method": "bitsandbytes", "load_in_8bit": True, "llm_int8_threshold": 6.0}, 1, 4),
], ids=["gptq4", "gptq8-asym", "gptq-rows", "awq", "fp8", "fp8-block", "ct-int8", "ct-fp8", "ct-w4a16",
        "nf4-dq", "nf4", "int8"])
def test_quantised_checkpoint_bytes(lib, tmp_path, block, per_weight, per_row):
    assert weights(lib, tmp_path, block) == LINEAR * per_weight + ROWS * per_row + REST


def test_ignore_lists_of_what_stays_unquantised_anyway_are_accepted(lib, tmp_path):
    block = {"quant_method": "fp8", "activation_scheme": "dynamic",
             "modules_to_not_convert": ["lm_head", "model.embed_tokens", "model.layers.0.mlp.gate",
                                        "re:.*input_layernorm$"]}
    assert weights(lib, tmp_path, block) == LINEAR + REST


def test_fp8_on_a_bf16_checkpoint_keeps_embeddings_in_bf16(lib):
    # vLLM's --quantization fp8 is weight_dtype=fp8_e4m3 (per-tensor scales by default)
    s = Scenario.create(lib, "llama3.1-8b", values={"mode": "infer", "weight_dtype": "fp8_e4m3"})
    assert s.evaluate("weights") == LINEAR + REST


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("block, message", [
    ({"quant_method": "gptq", "group_size": 128}, "quantization_config has no 'bits'"),
    ({"quant_method": "gptq", "bits": 5}, "'bits' must be one of 2, 3, 4, 8, not 5"),
    ({"quant_method": "awq", "bits": 4, "zero_pont": True}, "field 'zero_pont' is not understood"),
    ({"quant_method": "modelopt"}, "quant_method 'modelopt' is not modelled yet"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.mlp.experts"]},
     "leaves the experts unquantised"),
    ({"quant_method": "squeeze"}, "quant_method 'squeeze' is not a quantisation method memform knows"),
    ({"bits": 4}, "quantization_config has no 'quant_method'"),
    ({"quant_method": "gptq", "bits": 4, "lm_head": True}, "a quantised output head (lm_head) is not modelled"),
    ({"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.mlp.down_proj"]},
     "leaves a projection unquantised"),
    ({"quant_method": "fp8", "modules_to_not_convert": ["lm_head", "model.layers.3.mlp.gate_proj"]},
     "'model.layers.3.mlp.gate_proj' in 'modules_to_not_convert' leaves a projection unquantised"),
    ({"quant_method": "fp8", "weight_block_size": [128, 64]}, "'weight_block_size' must be two equal whole numbers"),
    ({"quant_method": "bitsandbytes"}, "set exactly one of 'load_in_4bit' and 'load_in_8bit'"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "one entry in 'config_groups'"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}},
     "FP4 (NVFP4/MXFP4) weights are not modelled yet"),
    ("fp8", "field 'quantization_config' must be an object"),
])
def test_a_bad_quantization_config_is_one_located_error(tmp_path, block, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA31_8B, "quantization_config": block}, indent=1))
    code, out, err = run("estimate", str(path), "--set", "mode=infer")
    assert code == 2 and out == "" and "Traceback" not in err
    assert message in err
    assert str(path) in err.splitlines()[0]


def test_gpt_oss_mxfp4_quantises_only_the_experts(lib):
    # openai/gpt-oss-20b's checkpoint: the experts' gate_up and down matrices in MXFP4 (half a
    # byte per value, one E8M0 byte per 32 values), everything else bf16.  Its safetensors index
    # gives total_size 13,761,264,768 bytes (public files quote the on-disk 13,761,316,904 with
    # the shards' JSON headers, index id 62503969168); by hand: 24 x 32 x 3 x 2880 x 2880
    # = 19,110,297,600 expert values x 17/32 B + the other 1,804,459,584 parameters x 2 B
    config = read_config(Path(__file__).parent / "configs" / "gpt-oss-20b.json", lib)
    assert (config.values["weight_dtype"], config.values["quant_scope"]) == ("mxfp4", "experts")
    s = Scenario.create(lib, None, values={**config.values, "mode": "infer"})
    experts = 24 * 32 * 3 * 2880 * 2880
    assert experts == 19_110_297_600
    assert s.evaluate("weights") == experts * Fraction(17, 32) + (20_914_757_184 - experts) * 2 == 13_761_264_768
