"""A config.json's ``quantization_config`` as memform settings.

Each method's block is mapped to the weight layout a serving engine keeps after loading: the
dtype of the quantised projections (``weight_dtype``), where their scales sit
(``quant_scales``: per group of inputs, per output row, per tensor or per tile), the group or
tile size, and the bytes of metadata per scale (``quant_group_bytes``: the scale and, for
asymmetric integer formats, the packed zero point).  The rules that turn these into bytes are
in ``formulas/training.mem``; this module only reads fields.

Every field of the block must be known: one that changes the layout is read, one that does not
(calibration settings, kernel choices) is listed as such, and any other field, an unknown
method, a missing ``bits`` or a value out of range is one located error.
"""
from __future__ import annotations

from fractions import Fraction

import sympy

from ..errors import DomainError, SourceError, shown

#: bytes of one fp16 / bf16 scale (GPTQ, AWQ, compressed-tensors group scales) and of one fp32
#: scale (FP8, per-channel int8)
HALF, SINGLE = 2, 4

#: per method: fields that do not change what is stored (calibration, kernels, bookkeeping)
NO_LAYOUT_EFFECT = {
    "fp8": {"quant_method", "activation_scheme", "ignored_layers", "modules_to_not_convert", "fmt",
            "weight_block_size"},
    "gptq": {"quant_method", "bits", "group_size", "desc_act", "sym", "damp_percent", "true_sequential",
             "static_groups", "model_name_or_path", "model_file_base_name", "checkpoint_format", "meta",
             "lm_head", "is_marlin_format", "dataset", "tokenizer", "use_cuda_fp16", "use_exllama",
             "exllama_config", "max_input_length", "cache_block_outputs", "module_name_preceding_first_block",
             "batch_size", "pad_token_id", "modules_in_block_to_quantize", "backend", "block_name_to_quantize",
             "modules_to_not_convert", "format", "pack_dtype", "hyb_act", "mse", "v2", "v2_alpha",
             "act_group_aware", "damp_auto_increment", "quantize_config"},
    "awq": {"quant_method", "bits", "group_size", "zero_point", "version", "modules_to_not_convert",
            "backend", "do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config"},
    "bitsandbytes": {"quant_method", "load_in_4bit", "load_in_8bit", "_load_in_4bit", "_load_in_8bit",
                     "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype",
                     "bnb_4bit_quant_storage", "llm_int8_threshold", "llm_int8_skip_modules",
                     "llm_int8_has_fp16_weight", "llm_int8_enable_fp32_cpu_offload"},
    "mxfp4": {"quant_method", "modules_to_not_convert"},
    "compressed-tensors": {"quant_method", "config_groups", "format", "ignore", "kv_cache_scheme",
                           "quantization_status", "global_compression_ratio", "sparsity_config", "version",
                           "transform_config", "provider"},
}
#: fields of a compressed-tensors ``weights`` scheme
CT_WEIGHT_FIELDS = {"num_bits", "type", "strategy", "group_size", "block_structure", "symmetric", "dynamic",
                    "actorder", "observer", "observer_kwargs", "scale_dtype", "zp_dtype"}
CT_GROUP_FIELDS = {"targets", "weights", "input_activations", "output_activations", "format"}
#: methods people meet that memform does not model yet
NOT_MODELLED = ("modelopt", "fbgemm_fp8", "hqq", "eetq", "quanto", "torchao", "aqlm", "exl2",
                "gguf", "higgs", "vptq", "spqr", "bitnet", "fp_quant", "auto-round", "quark", "compressed_tensors")
#: module names an ignore list may give: what memform never quantises anyway (the last part of
#: the module path; norms by their suffix)
UNQUANTISED = ("lm_head", "embed_tokens", "wte", "embed_out", "gate", "router")


def read(src, block, values: dict) -> None:
    """Set ``values`` (library names -> values) from a ``quantization_config`` block; ``src``
    locates errors (hfconfig._Source)."""
    if not isinstance(block, dict):
        raise src.error(DomainError, "field 'quantization_config' must be an object", "quantization_config")
    method = block.get("quant_method")
    supported = ", ".join(sorted(NO_LAYOUT_EFFECT))
    if not isinstance(method, str):
        raise src.error(SourceError, "quantization_config has no 'quant_method'", "quantization_config",
                        hint=f"memform reads: {supported}")
    if method not in NO_LAYOUT_EFFECT:
        what = "is not modelled yet" if method in NOT_MODELLED else "is not a quantisation method memform knows"
        raise src.error(DomainError, f"quant_method '{shown(method)}' {what}", "quant_method",
                        hint=f"memform reads: {supported}")
    for key in block:
        if key not in NO_LAYOUT_EFFECT[method]:
            raise src.error(DomainError, f"quantization_config field '{shown(key)}' is not understood for "
                            f"quant_method '{method}'", key,
                            hint="known fields: " + ", ".join(sorted(NO_LAYOUT_EFFECT[method])))
    for key in ("ignored_layers", "modules_to_not_convert", "ignore", "llm_int8_skip_modules"):
        _check_ignored(src, block, key, experts_only=method == "mxfp4")
    if block.get("lm_head", False) is not False:
        raise src.error(DomainError, "a quantised output head (lm_head) is not modelled; memform keeps it in the "
                        "model dtype", "lm_head")
    read_method = {"fp8": _fp8, "gptq": _gptq, "awq": _awq, "bitsandbytes": _bnb,
                   "compressed-tensors": _compressed_tensors, "mxfp4": _mxfp4}[method]
    values.update(read_method(src, block))


def _check_ignored(src, block: dict, key: str, experts_only: bool = False) -> None:
    """An ignore list may only name modules memform keeps unquantised anyway (with
    ``experts_only``, as MXFP4 quantises only the routed experts: anything but the experts)."""
    names = block.get(key)
    if names is None:
        return
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise src.error(DomainError, f"field '{key}' must be a list of module names", key)
    for name in names:
        last = name.removeprefix("re:").rstrip("$").split(".")[-1].strip("*")
        if experts_only:
            if "experts" in name:
                raise src.error(DomainError, f"'{shown(name)}' in '{key}' leaves the experts unquantised: MXFP4 "
                                "would then quantise nothing", key)
            continue
        if last not in UNQUANTISED and not last.endswith("norm"):
            raise src.error(DomainError, f"'{shown(name)}' in '{key}' leaves a projection unquantised, which "
                            "memform does not model (it quantises every projection and keeps the embeddings, "
                            "output head, norms and routers in the model dtype)", key)


def _whole(src, block: dict, key: str, allowed, default=None) -> int:
    raw = block.get(key, default)
    if raw is None:
        raise src.error(SourceError, f"quantization_config has no '{key}'", "quantization_config")
    if isinstance(raw, bool) or not isinstance(raw, (int, Fraction)) or raw != int(raw) or int(raw) not in allowed:
        raise src.error(DomainError, f"'{key}' must be one of {', '.join(map(str, allowed))}, not {shown(str(raw))}", key)
    return int(raw)


def _flag(src, block: dict, key: str, default: bool) -> bool:
    raw = block.get(key, default)
    if not isinstance(raw, bool):
        raise src.error(DomainError, f"'{key}' must be true or false, not {shown(str(raw))}", key)
    return raw


def _group(src, block: dict, key: str = "group_size") -> dict:
    """Group scales of ``group_size`` inputs, or per output row for -1 (GPTQ's 'no grouping')."""
    size = block.get(key, 128)
    if size == -1:
        return {"quant_scales": "channel"}
    if isinstance(size, bool) or not isinstance(size, (int, Fraction)) or size != int(size) or size < 1:
        raise src.error(DomainError, f"'{key}' must be a whole number >= 1 or -1, not {shown(str(size))}", key)
    return {"quant_scales": "group", "quant_group_size": sympy.Integer(int(size))}


def _bytes(n) -> sympy.Rational:
    return sympy.Rational(Fraction(n).numerator, Fraction(n).denominator)


def _fp8(src, block: dict) -> dict:
    """vLLM's Fp8LinearMethod: e4m3 weights, one fp32 scale per tensor, or per tile with
    weight_block_size (weight_scale_inv)."""
    fmt = block.get("fmt", "e4m3")
    if fmt not in ("e4m3", "e5m2"):
        raise src.error(DomainError, f"'fmt' must be e4m3 or e5m2, not {shown(str(fmt))}", "fmt")
    out = {"weight_dtype": f"fp8_{fmt}", "quant_group_bytes": _bytes(SINGLE), "quant_scales": "tensor"}
    tile = block.get("weight_block_size")
    if tile is not None:
        if (not isinstance(tile, list) or len(tile) != 2 or tile[0] != tile[1]
                or isinstance(tile[0], bool) or not isinstance(tile[0], int) or tile[0] < 1):
            raise src.error(DomainError, "'weight_block_size' must be two equal whole numbers, e.g. [128, 128]",
                            "weight_block_size")
        out.update(quant_scales="block", quant_block=sympy.Integer(tile[0]))
    return out


def _gptq(src, block: dict) -> dict:
    """GPTQ as stored: packed integers, one fp16 scale and one packed zero point (qzeros, kept for
    symmetric checkpoints too) per group and output.  vLLM v0.19 keeps qzeros on Hopper (the
    Machete kernel) and drops them for symmetric checkpoints under Marlin (Ampere, Ada): there the
    weights are bits/8 bytes per group and output smaller.  g_idx (int32 per input) is left out."""
    bits = _whole(src, block, "bits", (2, 3, 4, 8))
    _flag(src, block, "sym", True)
    return {"weight_dtype": f"int{bits}", "quant_group_bytes": _bytes(HALF + Fraction(bits, 8)), **_group(src, block)}


def _awq(src, block: dict) -> dict:
    """AWQ: packed integers, an fp16 scale and a packed zero point per group and output."""
    bits = _whole(src, block, "bits", (4,))
    zero = Fraction(bits, 8) if _flag(src, block, "zero_point", True) else 0
    return {"weight_dtype": f"int{bits}", "quant_group_bytes": _bytes(HALF + zero), **_group(src, block)}


def _bnb(src, block: dict) -> dict:
    """bitsandbytes: 4-bit NF4/FP4 with absmax per 64 weights (double quantisation optional), or
    LLM.int8 with one fp32 scale per output row."""
    four = _flag(src, block, "load_in_4bit", False) or _flag(src, block, "_load_in_4bit", False)
    eight = _flag(src, block, "load_in_8bit", False) or _flag(src, block, "_load_in_8bit", False)
    if four == eight:
        raise src.error(DomainError, "set exactly one of 'load_in_4bit' and 'load_in_8bit'", "quantization_config")
    if eight:
        return {"weight_dtype": "int8", "quant_scales": "channel", "quant_group_bytes": _bytes(SINGLE)}
    kind = block.get("bnb_4bit_quant_type", "fp4")
    if kind not in ("nf4", "fp4"):
        raise src.error(DomainError, f"'bnb_4bit_quant_type' must be nf4 or fp4, not {shown(str(kind))}",
                        "bnb_4bit_quant_type")
    double = _flag(src, block, "bnb_4bit_use_double_quant", False)
    return {"weight_dtype": "nf4", "double_quant": "true" if double else "false"}  # fp4 packs the same


def _mxfp4(src, block: dict) -> dict:
    """MXFP4 (gpt-oss): transformers' Mxfp4HfQuantizer quantises only the routed experts'
    matrices, 4-bit E2M1 values two per byte and one E8M0 scale per 32 (the *_blocks and
    *_scales tensors); attention, router, embeddings, head and the experts' biases stay bf16."""
    return {"weight_dtype": "mxfp4", "quant_scope": "experts"}


def _compressed_tensors(src, block: dict) -> dict:
    """llm-compressor's format: one config group over the Linear layers, its ``weights`` scheme
    giving bits, type and scale strategy.  FP8 and int8 scales are fp32; group scales of packed
    4-bit weights are in the model dtype, with a packed zero point when not symmetric."""
    groups = block.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise src.error(DomainError, "memform reads compressed-tensors checkpoints with one entry in "
                        "'config_groups'", "config_groups")
    (name, group), = groups.items()
    if not isinstance(group, dict):
        raise src.error(DomainError, f"config group '{shown(name)}' must be an object", "config_groups")
    for key in group:
        if key not in CT_GROUP_FIELDS:
            raise src.error(DomainError, f"config group field '{shown(key)}' is not understood", key)
    scheme = group.get("weights")
    if not isinstance(scheme, dict):
        raise src.error(SourceError, f"config group '{shown(name)}' has no 'weights' scheme", "config_groups")
    for key in scheme:
        if key not in CT_WEIGHT_FIELDS:
            raise src.error(DomainError, f"weights field '{shown(key)}' is not understood", key,
                            hint="known fields: " + ", ".join(sorted(CT_WEIGHT_FIELDS)))
    bits = _whole(src, scheme, "num_bits", (4, 8))
    kind = scheme.get("type", "int")
    if kind not in ("int", "float") or (kind, bits) == ("float", 4):
        what = "FP4 (NVFP4/MXFP4) weights are not modelled yet" if kind == "float" else \
            f"'type' must be int or float, not {shown(str(kind))}"
        raise src.error(DomainError, what, "type")
    dtype = "fp8_e4m3" if kind == "float" else f"int{bits}"
    strategy = scheme.get("strategy", "tensor")
    if strategy == "group":
        zero = 0 if _flag(src, scheme, "symmetric", True) else Fraction(bits, 8)
        return {"weight_dtype": dtype, "quant_group_bytes": _bytes(HALF + zero), **_group(src, scheme)}
    if strategy in ("tensor", "channel"):
        return {"weight_dtype": dtype, "quant_scales": strategy, "quant_group_bytes": _bytes(SINGLE)}
    if strategy == "block":
        tile = scheme.get("block_structure")
        if (not isinstance(tile, list) or len(tile) != 2 or tile[0] != tile[1]
                or isinstance(tile[0], bool) or not isinstance(tile[0], int) or tile[0] < 1):
            raise src.error(DomainError, "'block_structure' must be two equal whole numbers, e.g. [128, 128]",
                            "block_structure")
        return {"weight_dtype": dtype, "quant_scales": "block", "quant_block": sympy.Integer(tile[0]),
                "quant_group_bytes": _bytes(SINGLE)}
    raise src.error(DomainError, f"'strategy' {shown(str(strategy))} is not one of tensor, channel, group, block",
                    "strategy")
