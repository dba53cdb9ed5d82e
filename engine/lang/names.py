"""Finding names: the settings people bring from other tools, and ``memform names``.

People come with the names of Hugging Face ``TrainingArguments``, DeepSpeed's config,
Megatron-LM's flags or vLLM's engine arguments.  :data:`ALIASES` maps each to memform's
setting: a plain rename is applied (``--set tensor_model_parallel_size=4`` is ``tp=4``),
a name whose values differ (``gradient_checkpointing=true``) is translated where the
translation is unambiguous, and anything else is refused with a hint that names the
memform setting to use.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import sympy

from ..errors import did_you_mean
from .rules import BYTE, DtypeDecl, InputDecl, OptionDecl, RuleDecl


@dataclass(frozen=True)
class Alias:
    """A foreign setting: memform's ``name``, a translation of its values (None: the
    same value), and a hint shown where it cannot be applied."""

    name: str | None
    values: tuple[tuple[str, str], ...] | None = None
    hint: str | None = None


_MICRO = "the batch per GPU per step is micro_batch (the global batch is micro_batch x dp x accumulation steps)"
_WORLD = ("memform has no world size: the GPUs are dp x tp x pp x cp; set those, or let "
          "'memform plan MODEL --gpus N' choose the layout")
_CHECKPOINTING = (("true", "full"), ("false", "none"), ("1", "full"), ("0", "none"))

#: foreign name -> memform's setting (by source: HF TrainingArguments / PEFT / config.json,
#: DeepSpeed, Megatron-LM, vLLM, common prose)
ALIASES: dict[str, Alias] = {
    # batch and sequence
    "per_device_train_batch_size": Alias("micro_batch"),
    "per_device_eval_batch_size": Alias("micro_batch"),
    "train_micro_batch_size_per_gpu": Alias("micro_batch"),
    "micro_batch_size": Alias("micro_batch"),
    "batch_size": Alias(None, hint=_MICRO),
    "global_batch_size": Alias(None, hint=_MICRO),
    "train_batch_size": Alias(None, hint=_MICRO),
    "max_seq_length": Alias("seq_len"),
    "max_seq_len": Alias("seq_len"),
    "seq_length": Alias("seq_len"),
    "sequence_length": Alias("seq_len"),
    "max_length": Alias("seq_len"),
    "context_length": Alias("seq_len"),
    "max_model_len": Alias("seq_len"),
    # recomputation
    "gradient_checkpointing": Alias("recompute", _CHECKPOINTING),
    "activation_checkpointing": Alias("recompute", _CHECKPOINTING),
    "recompute_activations": Alias("recompute", (("true", "selective"), ("false", "none"))),
    "recompute_granularity": Alias("recompute"),
    # parallel degrees
    "tensor_model_parallel_size": Alias("tp"),
    "tensor_parallel_size": Alias("tp"),
    "tp_size": Alias("tp"),
    "pipeline_model_parallel_size": Alias("pp"),
    "pipeline_parallel_size": Alias("pp"),
    "pp_size": Alias("pp"),
    "data_parallel_size": Alias("dp"),
    "dp_size": Alias("dp"),
    "context_parallel_size": Alias("cp"),
    "expert_model_parallel_size": Alias("ep"),
    "expert_parallel_size": Alias("ep"),
    "expert_tensor_parallel_size": Alias("etp"),
    "virtual_pipeline_model_parallel_size": Alias("pp_virtual_stages"),
    "world_size": Alias(None, hint=_WORLD),
    "num_gpus": Alias(None, hint=_WORLD),
    "gpus": Alias(None, hint=_WORLD),
    "n_gpus": Alias(None, hint=_WORLD),
    # ZeRO, optimizer, precision
    "stage": Alias("zero_stage"),
    "zero": Alias("zero_stage"),
    "zero_optimization": Alias("zero_stage"),
    "use_distributed_optimizer": Alias(None, hint="Megatron's distributed optimizer shards the optimizer "
                                       "states like ZeRO-1: --set zero_stage=1"),
    "optim": Alias("optimizer"),
    "bf16": Alias(None, hint="mixed precision in bf16 is precision=bf16_mixed (pure bf16: precision=bf16)"),
    "fp16": Alias(None, hint="mixed precision in fp16 is precision=fp16_mixed"),
    "mixed_precision": Alias(None, hint="precision=bf16_mixed or precision=fp16_mixed"),
    "torch_dtype": Alias(None, hint="the weights' dtype is weight_dtype (inference) or precision (training)"),
    "dtype": Alias(None, hint="the weights' dtype is weight_dtype (inference) or precision (training)"),
    # vLLM's --kv-cache-dtype (fp8 is fp8_e4m3)
    "kv_cache_dtype": Alias("kv_dtype", values=tuple((k, k) for k in ("auto", "fp32", "bf16", "fp16", "fp8_e4m3",
                                                                       "fp8_e5m2", "int8", "int4"))
                            + (("fp8", "fp8_e4m3"), ("bfloat16", "bf16"), ("float16", "fp16"), ("half", "fp16"),
                               ("float32", "fp32"), ("float", "fp32")),
                            hint="vLLM's kv_cache_dtype is kv_dtype (auto, fp8 -> fp8_e4m3, bfloat16 -> bf16, "
                                 "float16 -> fp16, fp8_e5m2, int8)"),
    "kv_cache_free_gpu_mem_fraction": Alias("free_gpu_memory_fraction"),  # TensorRT-LLM's Triton backend name
    # fine-tuning
    "lora_r": Alias("lora_rank"),
    "r": Alias("lora_rank"),
    "lora": Alias(None, hint="LoRA is finetune=lora (rank: lora_rank)"),
    "qlora": Alias(None, hint="QLoRA is finetune=qlora (rank: lora_rank)"),
    "load_in_4bit": Alias(None, hint="a 4-bit base with adapters is finetune=qlora; a 4-bit model served is "
                          "weight_dtype=int4 (or nf4)"),
    "load_in_8bit": Alias(None, hint="8-bit weights are weight_dtype=int8"),
    "use_peft": Alias(None, hint="finetune=lora or finetune=qlora"),
    "target_modules": Alias("lora_targets", values=(("all-linear", "all_linear"),),
                            hint="PEFT's target_modules is lora_targets: qv (q_proj, v_proj), attention, "
                                 "qvo_mlp (q, v, o and the MLP), all_linear ('all-linear')"),
    "lora_attn_modules": Alias(None, hint="torchtune's q_proj, v_proj, output_proj with apply_lora_to_mlp is "
                               "lora_targets=qvo_mlp (choices: qv, attention, qvo_mlp, all_linear)"),
    "apply_lora_to_mlp": Alias(None, hint="torchtune's q_proj, v_proj, output_proj with apply_lora_to_mlp is "
                               "lora_targets=qvo_mlp (choices: qv, attention, qvo_mlp, all_linear)"),
    # model sizes under other tools' names (HF config.json of GPT-2 / Falcon, Megatron flags)
    "n_embd": Alias("hidden_size"),
    "d_model": Alias("hidden_size"),
    "hidden_dim": Alias("hidden_size"),
    "n_layer": Alias("num_hidden_layers"),
    "num_layers": Alias("num_hidden_layers"),
    "n_head": Alias("num_attention_heads"),
    "num_heads": Alias("num_attention_heads"),
    "num_query_groups": Alias("num_key_value_heads"),
    "n_kv_heads": Alias("num_key_value_heads"),
    "ffn_hidden_size": Alias("intermediate_size"),
    "n_inner": Alias("intermediate_size"),
    "num_local_experts": Alias("num_experts"),
    "n_routed_experts": Alias("num_experts"),
    "moe_router_topk": Alias("num_experts_per_tok"),
    "padded_vocab_size": Alias("vocab_size"),
    # the GPU
    "gpu_memory": Alias("capacity"),
    "memory": Alias("capacity"),
    "vram": Alias("capacity"),
}


def resolve(lib, name: str, raw: str) -> tuple[str, str] | None:
    """``(memform name, value text)`` for a foreign ``name`` that can be applied, else None.

    A name the library declares is never an alias.
    """
    alias = ALIASES.get(name)
    if name in lib.decls or alias is None or alias.name is None or alias.name not in lib.decls:
        return None
    if alias.values is None:
        return alias.name, raw
    table = dict(alias.values)
    key = raw.strip().lower()
    return (alias.name, table[key]) if key in table else None


def hint(lib, name: str) -> str | None:
    """Why ``name`` is not known and what to write instead: an alias's memform setting, an
    option whose choice it is, or the nearest known name."""
    alias = ALIASES.get(name)
    if alias is not None:
        if alias.name is None:
            return alias.hint
        decl = lib.decls.get(alias.name)
        if decl is not None and alias.hint:
            return alias.hint
        if decl is not None:
            choices = getattr(decl, "choices", None)
            if alias.values:
                said = ", ".join(f"{k} -> {v}" for k, v in alias.values if not k.isdigit())
                return f"'{name}' is memform's '{alias.name}' ({said})"
            return f"'{name}' is memform's '{alias.name}'" + (
                f" (choices: {', '.join(choices)})" if choices else "")
    owners = [n for n, d in lib.options.items() if name in d.choices]
    if owners:
        return " or ".join(f"--set {o}={name}" for o in owners) + f" ('{name}' is a choice, not a setting)"
    settable = [n for n, d in lib.decls.items() if _settable(d)]
    return did_you_mean(name, settable)


def _settable(decl) -> bool:
    return not isinstance(decl, DtypeDecl)


# ---------------------------------------------------------------- memform names
@dataclass(frozen=True)
class Entry:
    """One row of ``memform names``."""

    name: str
    kind: str  # input | option | rule | dtype | alias
    unit: str  # unit, or the choices of an option
    default: str
    doc: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


def entries(lib, pattern: str | None = None) -> list[Entry]:
    """Inputs, options, rules, dtypes and aliases whose name matches ``pattern`` (a substring,
    or a glob with ``*``/``?``), in the order: inputs, options, rules, dtypes, aliases."""

    def match(name: str) -> bool:
        if not pattern:
            return True
        if any(c in pattern for c in "*?["):
            return fnmatch.fnmatchcase(name, pattern)
        return pattern in name

    out = []
    for kind, cls in (("input", InputDecl), ("option", OptionDecl), ("rule", RuleDecl), ("dtype", DtypeDecl)):
        for name, d in lib.decls.items():
            if not isinstance(d, cls) or not match(name):
                continue
            if isinstance(d, InputDecl):
                unit = d.unit + (f" {d.domain_text()}" if d.domain_text() else "")
                default = "" if d.default is None else _text(d.default)
            elif isinstance(d, OptionDecl):
                unit, default = " | ".join(d.choices), d.default
            elif isinstance(d, RuleDecl):
                unit, default = d.unit, ""
            else:
                unit, default = "bytes", _text(d.size)
            out.append(Entry(name, kind, unit, default, d.doc))
    for name, alias in ALIASES.items():
        if match(name) and name not in lib.decls:
            target = alias.name if alias.name in lib.decls else ""
            doc = f"= {target}" if target and not alias.values else (hint(lib, name) or "")
            out.append(Entry(name, "alias", target, "", doc))
    return out


def _text(value) -> str:
    """A declared default as written: a byte quantity stays in bytes."""
    if hasattr(value, "xreplace"):
        value = value.xreplace({BYTE: sympy.Integer(1)})
    return str(value)
