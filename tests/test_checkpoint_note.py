"""A safetensors checkpoint beside a config.json (issue 15, item 4): what it stores is read from
its headers and set against what the config describes."""
import io
import json
import struct

import numpy as np

from engine.cli import main

H, FFN, V, LAYERS = 64, 160, 100, 2
CONFIG = {"model_type": "llama", "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
          "intermediate_size": FFN, "vocab_size": V, "max_position_embeddings": 128, "tie_word_embeddings": False}


def st_file(arrays: dict) -> bytes:
    """A safetensors file by hand (8-byte header length, JSON header, the data)."""
    header, data = {}, b""
    for name, a in arrays.items():
        blob = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def llama_tensors(extra=()) -> dict:
    """Every tensor of LlamaForCausalLM for CONFIG, shapes as transformers names them."""
    t = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (H, H),
                  p + "self_attn.v_proj.weight": (H, H), p + "self_attn.o_proj.weight": (H, H),
                  p + "mlp.gate_proj.weight": (FFN, H), p + "mlp.up_proj.weight": (FFN, H),
                  p + "mlp.down_proj.weight": (H, FFN), p + "input_layernorm.weight": (H,),
                  p + "post_attention_layernorm.weight": (H,)})
    t.update(dict(extra))
    return {name: np.zeros(shape, np.float16) for name, shape in t.items()}


def run(capsys, *argv):
    """Exit code, stdout and stderr (notes go to sys.stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue() + capsys.readouterr().err


def test_a_checkpoint_that_agrees_with_its_config(tmp_path, capsys):
    arrays = llama_tensors()
    params = sum(a.size for a in arrays.values())  # counted from the arrays themselves
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(st_file(arrays))
    code, out, err = run(capsys, "estimate", str(tmp_path / "config.json"), "--json")
    assert code == 0 and json.loads(out)
    assert (f"checkpoint beside the config: 1 file(s), {len(arrays)} tensors, {2 * params:,} bytes as stored "
            f"(F16 {2 * params:,} B): {params:,} parameters, as the config gives") in err


def test_a_checkpoint_with_a_layer_the_config_does_not_count(tmp_path, capsys):
    # a multi-token-prediction style extra projection, 64 x 64
    arrays = llama_tensors(extra={"model.mtp.0.proj.weight": (H, H)})
    params = sum(a.size for a in arrays.values())
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(st_file(arrays))
    code, _, err = run(capsys, "estimate", str(tmp_path / "config.json"))
    assert code == 0
    assert (f"config and checkpoint disagree: the config gives {params - H * H:,} parameters, the "
            f"checkpoint stores {params:,} (+{H * H:,}:") in err


def test_a_checkpoint_that_cannot_be_read_is_a_note(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 4)
    code, out, err = run(capsys, "estimate", str(tmp_path / "config.json"), "--json")
    assert code == 0 and json.loads(out)
    assert "memform: note: the checkpoint beside the config was not read:" in err
