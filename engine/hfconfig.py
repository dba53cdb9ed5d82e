"""Hugging Face ``config.json`` files as memform inputs.

Each supported ``model_type`` maps its fields one-to-one (or by a documented rename) to
the library's inputs and options.  Fields with no effect on memory (``rope_theta``,
token ids ...) are listed as such; any other field is reported by name, never dropped
silently.  A missing or mistyped field is an error naming the field and the file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import EngineError, Span, did_you_mean

#: fields that change no memory figure (read, then reported as ignored)
NO_MEMORY_EFFECT = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "bos_token_id",
    "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps", "layer_norm_eps",
    "layer_norm_epsilon", "rope_theta", "rope_scaling", "use_cache", "pretraining_tp",
    "attention_dropout", "sliding_window", "use_sliding_window", "max_window_layers",
    "router_aux_loss_coef", "output_router_logits", "router_jitter_noise", "norm_topk_prob",
    "aux_loss_alpha", "seq_aux", "scoring_func", "routed_scaling_factor", "n_group", "topk_group",
    "ep_size", "hidden_act", "activation_function", "num_nextn_predict_layers", "rope_interleave",
    "quantization_config", "tie_encoder_decoder", "bos_token", "eos_token", "hidden_activation",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "qkv_bias",
    "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_ctx", "decoder_sparse_step",
    "mlp_only_layers", "moe_layer_freq", "topk_method", "_name_or_path", "auto_map", "head_dim_factor",
}

#: fields every family shares, under the library's own names
COMMON = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
          "tie_word_embeddings", "mlp_bias")
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class Family:
    """How one ``model_type`` maps to the library."""

    fixed: dict  # options every model of the family has
    renames: dict = field(default_factory=dict)  # config field -> library name
    required: tuple = ("intermediate_size",)
    defaults: dict = field(default_factory=dict)  # HF's defaults where a field is absent


FAMILIES = {
    "llama": Family({"mlp": "swiglu", "norm": "rmsnorm"}, defaults={"tie_word_embeddings": False}),
    "mistral": Family({"mlp": "swiglu", "norm": "rmsnorm"}, defaults={"tie_word_embeddings": False}),
    "qwen2": Family({"mlp": "swiglu", "norm": "rmsnorm", "attention_bias": "true"},
                    defaults={"tie_word_embeddings": False}),
    "gemma": Family({"mlp": "geglu", "norm": "rmsnorm"}, defaults={"tie_word_embeddings": True}),
    "mixtral": Family({"mlp": "swiglu", "norm": "rmsnorm"},
                      renames={"num_local_experts": "num_experts"},
                      defaults={"tie_word_embeddings": False}),
    "qwen2_moe": Family({"mlp": "swiglu", "norm": "rmsnorm", "attention_bias": "true",
                         "shared_expert_gate": "true"},
                        renames={"moe_intermediate_size": "moe_intermediate_size",
                                 "shared_expert_intermediate_size": "shared_expert_intermediate_size"},
                        defaults={"tie_word_embeddings": False}),
    "deepseek_v3": Family({"mlp": "swiglu", "norm": "rmsnorm", "attention_type": "mla", "router_bias": "true"},
                          renames={"n_routed_experts": "num_experts"},
                          defaults={"tie_word_embeddings": False}),
    "gpt2": Family({"mlp": "gelu", "norm": "layernorm", "position_embedding": "learned",
                    "attention_bias": "true", "o_proj_bias": "true", "mlp_bias": "true",
                    "tie_word_embeddings": "true", "qkv_fused": "true", "gelu_kernel": "composite",
                    "eager_softmax": "working"},
                   renames={"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
                            "n_positions": "max_position_embeddings", "n_inner": "intermediate_size",
                            "resid_pdrop": "dropout"},
                   required=()),
}
#: fields some families have, under the library's names
EXTRA = {"num_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
         "shared_expert_intermediate_size", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank",
         "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "attention_bias", "dropout"}


@dataclass(frozen=True)
class Config:
    """What a config.json sets (library names -> values) and what it did not use."""

    path: str
    values: dict
    ignored: tuple  # fields with no memory effect
    unknown: tuple  # fields memform does not understand


def _span(text: str, path: str, key: str) -> Span | None:
    needle = f'"{key}"'
    pos = text.find(needle)
    if pos < 0:
        return Span(path, 1, 1, 1, text.splitlines()[0] if text else "")
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return Span(path, line, col, len(needle), text.splitlines()[line - 1])


def read_config(path: str | Path, library) -> Config:
    """Read a Hugging Face config.json; every value is validated against the library.

    Examples
    --------
    >>> import engine, json, tempfile, os
    >>> d = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    ...      "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False); json.dump(d, f); f.close()
    >>> read_config(f.name, engine.load()).values["mlp"]
    'swiglu'
    >>> os.unlink(f.name)
    """
    path = Path(path)
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EngineError(f"cannot read config '{shown}': {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.splitlines() or [""]
        raise EngineError(f"not valid JSON: {exc.msg.lower()}",
                          Span(shown, exc.lineno, exc.colno, 1, lines[min(exc.lineno, len(lines)) - 1])) from None
    if not isinstance(data, dict):
        raise EngineError(f"{shown}: a config.json holds one JSON object")
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise EngineError(f"{shown}: unsupported model_type {json.dumps(model_type)}",
                          _span(text, shown, "model_type") if "model_type" in data else None,
                          hint=(did_you_mean(str(model_type), FAMILIES) or "") +
                          " supported: " + ", ".join(sorted(FAMILIES)))
    family = FAMILIES[model_type]
    values: dict = dict(family.fixed)
    ignored, unknown = [], []
    for key, raw in data.items():
        name = family.renames.get(key, key)
        if key in NO_MEMORY_EFFECT and key not in family.renames:
            ignored.append(key)
            continue
        if name not in COMMON and name not in EXTRA and key not in family.renames:
            unknown.append(key)
            continue
        if raw is None:  # HF writes null for "derive it" (GPT-2 n_inner, q_lora_rank)
            continue
        values[name] = _convert(raw, name, key, library, text, shown)
    for name, default in family.defaults.items():
        values.setdefault(name, "true" if default is True else "false" if default is False else default)
    if model_type == "gpt2":
        values.setdefault("intermediate_size", 4 * values.get("hidden_size", 0))
        values.setdefault("max_position_embeddings", 1024)
    if model_type == "deepseek_v3" and data.get("q_lora_rank") is None:
        values["q_lora_rank"] = 0
    if model_type in ("llama", "mistral") and data.get("attention_bias") is True:
        values["o_proj_bias"] = "true"  # Llama's attention_bias covers q, k, v and o
    if model_type == "mixtral" or (model_type in ("qwen2_moe", "deepseek_v3")):
        if "moe_intermediate_size" not in values and "intermediate_size" in values:
            values["moe_intermediate_size"] = values["intermediate_size"]
    if model_type == "qwen2_moe" and data.get("mlp_only_layers"):
        raise EngineError(f"{shown}: mlp_only_layers {data['mlp_only_layers']} (dense layers between "
                          "MoE layers) is not supported", _span(text, shown, "mlp_only_layers"))
    for key, step in (("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
        if data.get(key, step) != step:
            raise EngineError(f"{shown}: {key} = {data[key]} (MoE on every other layer) is not supported",
                              _span(text, shown, key))
    required = REQUIRED + family.required
    for name in required:
        if name not in values:
            key = next((k for k, v in family.renames.items() if v == name), name)
            raise EngineError(f"{shown}: missing field '{key}'", hint=f"a {model_type} config.json names it")
    # every value must be valid for the library (domains, choices)
    for name, value in values.items():
        key = next((k for k, v in family.renames.items() if v == name), name)
        library.check_value(name, value, _span(text, shown, key) if key in data else None)
    return Config(shown, values, tuple(ignored), tuple(unknown))


def _convert(raw, name, key, library, text, path):
    import sympy
    decl = library.decls.get(name)
    span = _span(text, path, key)
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if decl is not None and decl.kind == "option":
        raise EngineError(f"field '{key}' must be true or false, not {json.dumps(raw)}", span)
    if isinstance(raw, int):
        return sympy.Integer(raw)
    if isinstance(raw, float):
        from fractions import Fraction
        f = Fraction(repr(raw))
        return sympy.Rational(f.numerator, f.denominator)
    raise EngineError(f"field '{key}' must be a number, not {json.dumps(raw)}", span)
