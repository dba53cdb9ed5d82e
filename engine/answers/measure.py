"""Measure the memory of a real PyTorch / transformers model and set it beside memform's.

``measure(scenario)`` builds the Hugging Face model a scenario describes (GPT-2, Llama,
Mixtral or Qwen2-MoE) with random weights on the CPU, runs one training step (forward,
backward, optimizer step) and one inference forward with a KV cache, and records:

- parameter count and bytes, gradient bytes, optimizer-state bytes after one step;
- bytes saved for backward (``torch.autograd.graph.saved_tensors_hooks``, de-duplicated by
  storage, parameters left out), the logits tensor, the KV cache (``past_key_values``);
- the peak of a second training step: the most bytes of tensors alive at once, from the
  profiler's memory timeline (``torch.profiler`` with ``profile_memory``), compared with the
  rule ``peak_allocated`` (gradients kept between steps or freed, as ``grads_persist`` says).

Nothing here restates a memory formula: the prediction of every component is
``Scenario.evaluate`` of a library rule under the matching options.  torch and transformers
are optional (``pip install 'memform[torch]'``); without them ``measure`` is a clear error.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..library.hfconfig import read_json

#: memform precision -> (parameter dtype, autocast dtype or None); bf16_mixed and fp16_mixed
#: run as Trainer(bf16=True) / accelerate do: fp32 parameters, the forward under torch.autocast
PRECISIONS = {"fp32": ("float32", None), "bf16": ("bfloat16", None),
              "bf16_mixed": ("float32", "bfloat16"), "fp16_mixed": ("float32", "float16")}
#: the dtype of the logits transformers returns: the output layer's matmul's
LOGITS_DTYPE = {"fp32": "fp32", "bf16": "bf16", "bf16_mixed": "bf16", "fp16_mixed": "fp16"}
OPTIMIZERS = ("adamw", "sgd_momentum", "sgd", "adafactor", "none")
FAMILIES = ("gpt2", "llama", "mixtral", "qwen2_moe", "qwen3", "gemma3_text", "cohere", "deepseek_v3")

#: component -> (library rule, mode) it is compared with
COMPONENTS = {
    "n_params": ("n_params", "train"),
    "weights": ("weights", "train"),
    "grads": ("grads", "train"),
    "optimizer_states": ("optimizer_states", "train"),
    "saved_for_backward": (("activations", "logits"), "train"),
    "logits_tensor": ("logits_tensor", "train"),
    "kv_cache": ("kv_cache", "infer"),
    "peak": ("peak_allocated", "train"),
}


@dataclass
class Measurement:
    """Measured bytes (and parameter count) per component, and memform's prediction."""

    family: str
    settings: dict
    measured: dict = field(default_factory=dict)
    predicted: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def error(self, name: str) -> float | None:
        m, p = self.measured[name], self.predicted[name]
        if m == 0:
            return None if p == 0 else float("inf")
        return (p - m) / m

    def to_json(self) -> dict:
        return {"family": self.family, "settings": self.settings,
                "components": {n: {"measured": self.measured[n], "predicted": self.predicted[n],
                                   "relative_error": self.error(n)} for n in self.measured},
                "notes": self.notes}


def _require_torch():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"measuring needs torch and transformers ({exc.name} is not installed)",
                         hint="pip install 'memform[torch]'") from None


def family_of(scenario, config_path: str | None = None) -> str:
    """The transformers family a scenario's architecture is built as."""
    if config_path is not None:
        data = read_json(config_path)
        model_type = data.get("model_type")
        if model_type in ("llama", "mistral", "qwen2", "gemma"):
            model_type = "llama" if model_type in ("llama", "mistral") else model_type
        if model_type not in FAMILIES:
            raise UsageError(f"measure builds {', '.join(FAMILIES)} models, not model_type "
                             f"{json.dumps(model_type)}")
        return model_type
    opt = scenario.option
    if opt("attention_type") == "mla":
        return "deepseek_v3"
    if opt("position_embedding") == "learned":
        return "gpt2"
    if opt("norm_placement") == "parallel":
        return "cohere"
    if opt("norm_placement") == "sandwich":
        return "gemma3_text"
    if opt("qk_norm") == "head":
        return "qwen3"
    if int(scenario.evaluate("num_experts")) > 0:
        return "qwen2_moe" if (opt("shared_expert_gate") == "true"
                               or int(scenario.evaluate("shared_expert_intermediate_size")) > 0) else "mixtral"
    return "llama"


def hf_config(scenario, family: str):
    """The transformers config of the scenario's architecture (dropout 0, no downloads)."""
    import transformers
    ev = lambda name: int(scenario.evaluate(name))  # noqa: E731
    opt = scenario.option
    tied = opt("tie_word_embeddings") == "true"
    if family == "gpt2":
        if not (opt("mlp") == "gelu" and opt("norm") == "layernorm"):
            raise UsageError("a GPT-2 model has a GELU MLP and LayerNorm")
        return transformers.GPT2Config(
            n_embd=ev("hidden_size"), n_layer=ev("num_hidden_layers"), n_head=ev("num_attention_heads"),
            n_inner=ev("intermediate_size"), vocab_size=ev("vocab_size"),
            n_positions=ev("max_position_embeddings"), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            tie_word_embeddings=True, bos_token_id=None, eos_token_id=None)
    if family == "cohere":
        if not (opt("mlp") == "swiglu" and opt("norm") == "layernorm_nobias" and opt("norm_placement") == "parallel"):
            raise UsageError("a Cohere model has a SwiGLU MLP and one bias-free LayerNorm per layer, in parallel")
    elif family == "gemma3_text":
        if not (opt("mlp") == "geglu" and opt("norm") == "rmsnorm" and opt("norm_placement") == "sandwich"
                and opt("qk_norm") == "head"):
            raise UsageError("a Gemma 3 model has a GeGLU MLP, four RMSNorms per layer and q/k norms over head_dim")
    elif family == "deepseek_v3":
        if not (opt("mlp") == "swiglu" and opt("norm") == "rmsnorm" and opt("attention_type") == "mla"):
            raise UsageError("a DeepSeek-V3 model has MLA attention, SwiGLU MLPs and RMSNorm")
    elif opt("mlp") != "swiglu" or opt("norm") != "rmsnorm":
        raise UsageError(f"a {family} model has a SwiGLU MLP and RMSNorm")
    common = dict(hidden_size=ev("hidden_size"), num_hidden_layers=ev("num_hidden_layers"),
                  num_attention_heads=ev("num_attention_heads"),
                  num_key_value_heads=ev("num_key_value_heads"), head_dim=ev("head_dim"),
                  vocab_size=ev("vocab_size"), max_position_embeddings=ev("max_position_embeddings"),
                  tie_word_embeddings=tied, attention_dropout=0.0, bos_token_id=None,
                  eos_token_id=None, pad_token_id=None)
    if family == "deepseek_v3":
        experts = ev("num_experts")
        common.update(num_key_value_heads=ev("num_attention_heads"))
        common.pop("head_dim")
        return transformers.DeepseekV3Config(
            intermediate_size=ev("intermediate_size"), q_lora_rank=ev("q_lora_rank") or None,
            kv_lora_rank=ev("kv_lora_rank"), qk_nope_head_dim=ev("qk_nope_head_dim"),
            qk_rope_head_dim=ev("qk_rope_head_dim"), v_head_dim=ev("v_head_dim"),
            moe_intermediate_size=ev("moe_intermediate_size"), n_routed_experts=max(experts, 1),
            num_experts_per_tok=max(ev("num_experts_per_tok"), 1), n_shared_experts=ev("n_shared_experts"),
            n_group=1, topk_group=1, rope_scaling=None,
            first_k_dense_replace=ev("first_k_dense_replace") if experts > 0 else ev("num_hidden_layers"),
            attention_bias=opt("attention_bias") == "true", **common)
    if family == "llama":
        return transformers.LlamaConfig(intermediate_size=ev("intermediate_size"),
                                        attention_bias=opt("attention_bias") == "true",
                                        mlp_bias=opt("mlp_bias") == "true", **common)
    if family == "qwen3":
        if opt("qk_norm") != "head":
            raise UsageError("a Qwen3 model normalises queries and keys over head_dim (qk_norm=head)")
        return transformers.Qwen3Config(intermediate_size=ev("intermediate_size"),
                                        attention_bias=opt("attention_bias") == "true", **common)
    if family == "gemma3_text":
        # every layer global (memform's activations do not depend on the window below seq_len)
        return transformers.Gemma3TextConfig(intermediate_size=ev("intermediate_size"),
                                             attention_bias=opt("attention_bias") == "true",
                                             query_pre_attn_scalar=ev("head_dim"),
                                             sliding_window=ev("max_position_embeddings"),
                                             layer_types=["full_attention"] * ev("num_hidden_layers"), **common)
    if family == "cohere":
        if opt("qk_norm") not in ("none", "full"):
            raise UsageError("a Cohere model's query and key norms span the whole q and k widths (qk_norm=full)")
        return transformers.CohereConfig(intermediate_size=ev("intermediate_size"),
                                         attention_bias=opt("attention_bias") == "true",
                                         use_qk_norm=opt("qk_norm") == "full", **common)
    if family == "mixtral":
        return transformers.MixtralConfig(intermediate_size=ev("moe_intermediate_size"),
                                          num_local_experts=ev("num_experts"),
                                          num_experts_per_tok=ev("num_experts_per_tok"),
                                          router_jitter_noise=0.0, **common)
    if family == "qwen2_moe":
        common.pop("head_dim")
        return transformers.Qwen2MoeConfig(intermediate_size=ev("intermediate_size"),
                                           moe_intermediate_size=ev("moe_intermediate_size"),
                                           shared_expert_intermediate_size=ev("shared_expert_intermediate_size"),
                                           num_experts=ev("num_experts"),
                                           num_experts_per_tok=ev("num_experts_per_tok"),
                                           decoder_sparse_step=1, mlp_only_layers=[], **common)
    raise UsageError(f"unknown family {family!r}")


def _check_options(scenario):
    opt = scenario.option
    if opt("precision") not in PRECISIONS:
        raise UsageError(f"measure runs precision fp32, bf16 (pure) or bf16_mixed / fp16_mixed (autocast), "
                         f"not {opt('precision')}", hint="--set precision=fp32, bf16 or bf16_mixed")
    if opt("optimizer") not in OPTIMIZERS:
        raise UsageError(f"measure runs optimizer {', '.join(OPTIMIZERS)}, not {opt('optimizer')}")
    if opt("recompute") == "selective":
        raise UsageError("measure maps recompute=full to gradient checkpointing; selective has no "
                         "transformers counterpart", hint="--set recompute=none or recompute=full")
    if opt("finetune") == "qlora" or opt("offload") != "none":
        raise UsageError("measure trains on the GPU every parameter or LoRA adapters on a base in the working "
                         "dtype (finetune=full or lora, offload=none)")
    if opt("finetune") == "lora" and opt("precision") not in ("fp32", "bf16"):
        raise UsageError("measure runs LoRA on a base in fp32 or bf16 (no autocast)", hint="--set precision=bf16")
    if opt("finetune") == "lora" and scenario.evaluate("lora_dropout") != 0:
        raise UsageError("measure runs LoRA without dropout (on the CPU PyTorch's dropout keeps an fp32 mask, "
                         "on a GPU one byte)", hint="--set lora_dropout=0")
    if opt("torch_compile") == "model":
        raise UsageError("measure compiles each decoder layer (torch_compile=blocks), not the whole model",
                         hint="--set torch_compile=blocks")
    for name in ("dp", "tp", "pp", "cp", "ep", "etp"):
        if int(scenario.evaluate(name)) != 1:
            raise UsageError(f"measure runs one process: {name} must be 1")


def prediction_scenario(scenario, family: str):
    """The scenario memform predicts with: what measure runs, nothing else on top."""
    dtype = scenario.option("precision")
    autocast = PRECISIONS[dtype][1] is not None
    values = dict(dropout=0, alloc_margin=0, cuda_context=0, activation_model="architecture",
                  kv_paging="none", kv_dtype="fp32" if autocast else dtype, shared_prefix=0, zero_stage=0)
    if autocast:  # the forward under torch.autocast over fp32 parameters: Hugging Face's stack
        values["stack"] = "hf"
        values["optimizer_impl"] = "fused"  # on the CPU torch.optim runs its per-tensor loop, not foreach
    if family == "gpt2":
        values["qkv_fused"] = "true"  # GPT-2: c_attn holds q, k and v in one tensor
        values["gelu_kernel"] = "composite"  # GPT-2: gelu_new is pow, tanh and mul
        values["eager_softmax"] = "working"  # GPT-2's eager softmax runs in the working dtype
    lib = scenario.library
    if "comm_buffers" in lib.decls and "comm_buffers" in lib.inputs:
        values["comm_buffers"] = 0
    return scenario.with_values(**values)


def autocast_region(torch, precision: str, device_type: str):
    """The forward's context for ``precision``: torch.autocast in the lower dtype for
    bf16_mixed / fp16_mixed (as accelerate wraps the forward), nothing otherwise."""
    cast_dtype = PRECISIONS[precision][1]
    if cast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=getattr(torch, cast_dtype))


def _checkpoint(torch, model, scenario) -> None:
    """Gradient checkpointing as recompute_method says: reentrant checkpointing (it saves each
    checkpointed input through the autograd function, so the outer saved_tensors_hooks see it;
    the non-reentrant kind installs hooks of its own) of the first ``checkpointed_layers``
    layers (block; transformers' per-layer flag), or of groups of ``recompute_group``
    consecutive layers (uniform, as Megatron-Core's chunks of recompute_num_layers)."""
    from transformers.modeling_layers import GradientCheckpointingLayer
    group = int(scenario.evaluate("recompute_group"))
    if group == 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers 5 renames it; the old name still works
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        checkpointed = int(scenario.evaluate("checkpointed_layers"))
        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        for i, layer in enumerate(layers):
            layer.gradient_checkpointing = i < checkpointed
        return
    from torch.utils.checkpoint import checkpoint

    class Group(torch.nn.Module):
        """Consecutive layers checkpointed as one: only the group's input is saved."""
        def __init__(self, members):
            super().__init__()
            self.members = torch.nn.ModuleList(members)

        def forward(self, hidden, *args, **kwargs):
            def run(h):
                for layer in self.members:
                    h = layer(h, *args, **kwargs)
                return h
            if not (self.training and torch.is_grad_enabled()):
                return run(hidden)
            return checkpoint(run, hidden, use_reentrant=True)

    stacks = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList)
              and len(m) and all(isinstance(x, GradientCheckpointingLayer) for x in m)]
    name, layers = stacks[0]
    parent = model.get_submodule(name.rpartition(".")[0])
    setattr(parent, name.rpartition(".")[2],
            torch.nn.ModuleList(Group(list(layers)[i:i + group]) for i in range(0, len(layers), group)))


def _compile_layers(torch, model) -> list:
    """torch.compile each decoder layer, as torchtitan, torchtune and accelerate's regional
    compilation do (the embedding, final norm, head and loss stay eager), with the partitioner
    Inductor splits training graphs with.  The backend runs the split graphs eagerly (no C++
    compiler needed): what is saved for backward is Inductor's, the temporaries of a step are
    not, so no peak is profiled.  Returns what puts the eager layers back."""
    from transformers.modeling_layers import GradientCheckpointingLayer
    torch._dynamo.reset()  # a fresh compile per model (dynamo's recompile limit counts per code object)
    undo = []
    for module in list(model.modules()):
        if isinstance(module, torch.nn.ModuleList) and len(module) and \
                all(isinstance(x, GradientCheckpointingLayer) for x in module):
            for i, layer in enumerate(module):
                module[i] = torch.compile(layer, backend="aot_eager_decomp_partition", dynamic=False)
                undo.append((module, i, layer))
    return undo


#: memform lora_targets -> PEFT target_modules of the transformers models measure builds (a
#: string is a regular expression over module names; GPT-2's fused c_attn holds q, k and v)
LORA_TARGETS = {"qv": ["q_proj", "v_proj"], "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "qvo_mlp": r".*\.(self_attn\.(q_proj|v_proj|o_proj)|mlp\.((shared_expert\.)?(gate_proj|up_proj|down_proj)"
                           r"|shared_expert_gate))",
                "all_linear": "all-linear"}
GPT2_LORA_TARGETS = {"qv": ["c_attn"], "attention": r".*\.attn\.(c_attn|c_proj)",
                     "qvo_mlp": r".*\.(attn\.(c_attn|c_proj)|mlp\.(c_fc|c_proj))", "all_linear": "all-linear"}


def _apply_lora(scenario, model, family: str):
    """PEFT's LoRA as get_peft_model applies it: adapters of rank lora_rank on the projections
    lora_targets names, in fp32 (PEFT's autocast_adapter_dtype, lora_dtype auto or fp32) or in the
    model's dtype, the base frozen."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise UsageError(f"measuring LoRA needs peft ({exc.name} is not installed)",
                         hint="pip install 'memform[torch]'") from None
    rank = int(scenario.evaluate("lora_rank"))
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                        target_modules=(GPT2_LORA_TARGETS if family == "gpt2" else LORA_TARGETS)[
                            scenario.option("lora_targets")])
    upcast = int(scenario.evaluate("lora_adapter_working")) == 0
    with warnings.catch_warnings():  # transformers' is_gradient_checkpointing rename, GPT-2's Conv1D fan-in notice
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return get_peft_model(model, config, autocast_adapter_dtype=upcast)


def _run(scenario, family: str, peak: bool = True) -> dict:
    import torch
    import transformers

    micro_batch, seq_len = int(scenario.evaluate("micro_batch")), int(scenario.evaluate("seq_len"))
    dtype = getattr(torch, PRECISIONS[scenario.option("precision")][0])

    def autocast():
        return autocast_region(torch, scenario.option("precision"), "cpu")
    attn = "eager" if scenario.option("attention") == "eager" else "sdpa"
    config = hf_config(scenario, family)
    config._attn_implementation = attn
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn).to(dtype)
    if scenario.option("finetune") == "lora":
        model = _apply_lora(scenario, model, family)
    model.train()
    if scenario.option("recompute") == "full":
        _checkpoint(torch, model, scenario)
    compiled = scenario.option("torch_compile") == "blocks"
    undo = _compile_layers(torch, model) if compiled else []
    params = list(model.parameters())
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    out = {"n_params": sum(p.numel() for p in params),
           "weights": sum(p.numel() * p.element_size() for p in params)}

    ids = torch.randint(0, config.vocab_size, (micro_batch, seq_len))
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in param_storages:
            saved[ptr] = max(saved.get(ptr, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast():
        result = model(input_ids=ids, labels=ids, use_cache=False)
    out["saved_for_backward"] = sum(saved.values())
    out["logits_tensor"] = result.logits.numel() * result.logits.element_size()
    result.loss.backward()
    out["grads"] = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    name = scenario.option("optimizer")
    if name == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-4)
    elif name == "sgd_momentum":
        opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    elif name == "sgd":
        opt = torch.optim.SGD(params, lr=1e-4)
    elif name == "adafactor":  # transformers' own, as Trainer(optim="adafactor") builds it
        opt = transformers.optimization.Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False)
    else:
        opt = None
    out["optimizer_states"] = 0
    if opt is not None:
        opt.step()
        out["optimizer_states"] = sum(v.numel() * v.element_size() for state in opt.state.values()
                                      for v in state.values() if torch.is_tensor(v))
    del result
    # the peak of a second step, every state in place; the gradients kept between steps
    # (zero_grad(set_to_none=False)) or, where memform's grads_persist is 0 (grad_lifetime =
    # step, the default of stack = hf), freed as transformers' Trainer frees them
    model.zero_grad(set_to_none=int(scenario.evaluate("grads_persist")) == 0)

    def step():
        with autocast():  # as accelerate wraps the forward; backward runs outside the region
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        if opt is not None:
            opt.step()

    if peak and not compiled:
        out["peak"] = _peak_bytes(torch, step)
    del opt
    for module, i, layer in undo:  # the KV cache with the eager layers
        module[i] = layer
    model.zero_grad(set_to_none=True)
    model.eval()  # noqa: eval-ok (torch.nn.Module.eval: inference mode, not Python eval)
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    out["kv_cache"] = sum(t.numel() * t.element_size() for layer in cache.layers
                          for t in (layer.keys, layer.values))
    return out


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the C++ profiler's start and stop lines (written to file descriptor 2, past
    Python); exceptions still propagate."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _peak_bytes(torch, step) -> int:
    """The most bytes of CPU tensors alive at once while ``step()`` runs, from the profiler's
    memory timeline (every allocation and free, with the tensors alive before it started).
    On a GPU, torch.cuda.max_memory_allocated says the same (bench/gpu_peak.py)."""
    from torch.profiler import ProfilerActivity, profile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # export_memory_timeline is deprecated in favour of CUDA tools
        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                                      record_shapes=True, with_stack=True) as prof:
            step()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "timeline.json"
            prof.export_memory_timeline(str(path), device="cpu")
            _, sizes = json.loads(path.read_text())
    return int(max(sum(row) for row in sizes))


#: the largest model measure builds on the CPU (a training step needs about 16 bytes per parameter)
MAX_PARAMS = 200_000_000


def measure(scenario, config_path: str | None = None, max_params: int = MAX_PARAMS,
            peak: bool = True) -> Measurement:
    """Measure the scenario's model and predict every component with memform; ``peak``
    also profiles a second training step for its peak (about half a second more)."""
    _require_torch()
    _check_options(scenario)
    n_params = int(scenario.evaluate("n_params"))
    if n_params > max_params:
        raise UsageError(f"measure builds the model on the CPU: {n_params:,} parameters is more than "
                         f"{max_params:,}", hint="shrink it, e.g. --set hidden_size=64 num_hidden_layers=2 "
                         "intermediate_size=256 vocab_size=128 (and num_attention_heads / num_key_value_heads)")
    family = family_of(scenario, config_path)
    pred = prediction_scenario(scenario, family)
    try:
        measured = _run(pred, family, peak)
    except (RuntimeError, ValueError, TypeError, MemoryError) as exc:  # torch / transformers refused
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"building or running the {family} model failed: {first}",
                         hint="measure is meant for tiny configs on the CPU "
                              "(e.g. hidden_size 64, 2 layers, vocab 128)") from None
    settings = {n: str(pred.values[n]) for n in ("micro_batch", "seq_len", "precision", "attention",
                                                 "recompute", "optimizer")}
    if pred.option("recompute") == "full":
        settings["recompute_method"] = pred.option("recompute_method")
        settings["recompute_num_layers"] = str(int(pred.evaluate("recompute_num_layers")))
    lora = pred.option("finetune") == "lora"
    m = Measurement(family, settings, measured)
    for component, (rules, mode) in COMPONENTS.items():
        if component not in measured:
            continue
        s = pred.with_values(mode=mode)
        if component == "logits_tensor":  # transformers returns the logits in the dtype of the head's matmul
            s = s.with_values(logits_dtype=LOGITS_DTYPE[pred.option("precision")])
        rules = rules if isinstance(rules, tuple) else (rules,)
        if component == "n_params" and lora:  # model.parameters() holds the adapters too
            rules = ("n_params", "lora_params")
        if component == "saved_for_backward" and pred.option("recompute") == "full":
            # the forward keeps the layers' inputs; the layer recomputed in backward comes later
            rules = ("stage_layer_activations", "logits", "autocast_copies")
        m.predicted[component] = int(sum(s.evaluate(r) for r in rules))
    if pred.option("recompute") == "full":
        m.notes.append("with checkpointing saved_for_backward is what the forward pass keeps, compared with "
                       "memform's stage_layer_activations + logits; its activations add the one layer "
                       "recomputed during backward, which no forward hook sees")
    return m


def format_table(m: Measurement) -> str:
    rows = [f"{m.family}: " + ", ".join(f"{k}={v}" for k, v in m.settings.items()),
            f"{'component':20} {'measured':>14} {'memform':>14} {'error':>9}"]
    for name in m.measured:
        err = m.error(name)
        shown = "-" if err is None else f"{100 * err:+.2f} %"
        rows.append(f"{name:20} {m.measured[name]:>14,} {m.predicted[name]:>14,} {shown:>9}")
    rows.extend(f"note: {n}" for n in m.notes)
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------- calibration
#: (micro_batch, seq_len) points calibrate measures by default
CALIBRATION_POINTS = ((1, 16), (2, 16), (1, 32), (2, 32), (1, 64), (4, 32), (2, 64), (1, 128))


@dataclass
class Calibration:
    """Least-squares per-layer activation coefficients: bytes per token and per token x s."""

    family: str
    per_token: float
    per_token_seq: float
    points: list  # (b, s, measured, fitted) of every measurement
    settings: dict

    def rule_file(self) -> str:
        """A user rule file (``--rules``) replacing the per-layer activation rules."""
        c1, c2 = _literal(self.per_token), _literal(self.per_token_seq)
        where = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        lines = [f"# memform calibrate: {self.family} ({where}), fitted by least squares to "
                 f"{len(self.points)} measurements",
                 "# of the bytes PyTorch saves for backward, less memform's logits, per layer:",
                 f"# per layer = {c1} B per token + {c2} B per token per position of the sequence"]
        lines += [f"#   b={b} s={s}: measured {m:,} B, fitted {f:,.0f} B" for b, s, m, f in self.points]
        for rule in ("dense_layer_activations", "moe_layer_activations"):
            lines.append(f"override rule {rule} : bytes =\n"
                         f"    tokens_per_gpu * {c1} B + tokens_per_gpu * seq_len * {c2} B\n"
                         f"    \"calibrated on {self.family} ({where}): bytes per token and per token x s\"")
        return "\n".join(lines) + "\n"


def _literal(x: float) -> str:
    text = f"{x:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def calibrate(scenario, config_path: str | None = None, points=CALIBRATION_POINTS) -> Calibration:
    """Measure the model at several (b, s) and fit the per-layer activation coefficients."""
    _require_torch()
    _check_options(scenario)
    if scenario.option("recompute") != "none":
        raise UsageError("calibrate fits the activations of recompute=none")
    family = family_of(scenario, config_path)
    layers = int(scenario.evaluate("num_hidden_layers"))
    rows, ys, used = [], [], []
    for b, s in points:
        m = measure(scenario.with_values(micro_batch=b, seq_len=s), config_path, peak=False)
        logits = int(prediction_scenario(scenario.with_values(micro_batch=b, seq_len=s), family)
                     .with_values(mode="train").evaluate("logits"))
        per_layer = (m.measured["saved_for_backward"] - logits) / layers
        rows.append([b * s, b * s * s])
        ys.append(per_layer)
        used.append((b, s, m.measured["saved_for_backward"]))
    if len({s for _, s in points}) < 2:
        raise UsageError("calibrate needs at least two sequence lengths")
    (c1, c2), *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array(ys), rcond=None)
    fitted = [(b, s, meas, (c1 * b * s + c2 * b * s * s) * layers + (meas - ys[i] * layers))
              for i, (b, s, meas) in enumerate(used)]
    settings = {n: str(scenario.values[n]) for n in ("precision", "attention")}
    return Calibration(family, float(c1), float(c2), fitted, settings)
