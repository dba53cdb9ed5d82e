"""Megatron-LM's command-line arguments as memform settings.

A Megatron-LM run is described by the arguments of its launch command (``pretrain_gpt.py
--num-layers 32 --hidden-size 4096 ...``), not by a config.json.  :func:`read_args` reads them
from a launch script (``torchrun ... pretrain_gpt.py --flag value \\``, bash arrays of
arguments included) or from the ``MODEL_ARGS`` block of a Megatron-LM functional test's
``model_config.yaml`` (``--flag: value`` lines), applies Megatron-LM's own defaults (read in
Megatron-LM d98e8a64, ``megatron/training/arguments.py``: the FFN width, the padded
vocabulary, the micro-batches of a global batch, the virtual pipeline size) and returns the
settings under memform's names, with ``stack = megatron``.

Each value goes through the rule language's parser and the library's domains, as a ``--set``
value does.  What the arguments do not say (the world size, where no ``torchrun`` line gives
it; the vocabulary of a tokenizer file) is said in a note, and the arguments memform does not
model are listed in one.
"""
from __future__ import annotations

import functools
import math
import re
import shlex
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import lark
import sympy

from ..errors import DomainError, EngineError, SourceError, Span, UsageError, shown
from ..lang.parser import parse_value

#: arguments passed on as numbers: Megatron-LM's name -> memform's
NUMBERS = {
    "num-layers": "num_hidden_layers", "hidden-size": "hidden_size",
    "num-attention-heads": "num_attention_heads", "seq-length": "seq_len",
    "micro-batch-size": "micro_batch", "global-batch-size": "global_batch",
    "tensor-model-parallel-size": "tp", "pipeline-model-parallel-size": "pp",
    "context-parallel-size": "cp", "expert-model-parallel-size": "ep",
    "expert-tensor-parallel-size": "etp", "num-experts": "num_experts",
    "moe-router-topk": "num_experts_per_tok", "moe-shared-expert-intermediate-size": "shared_expert_intermediate_size",
    "q-lora-rank": "q_lora_rank", "kv-lora-rank": "kv_lora_rank", "qk-head-dim": "qk_nope_head_dim",
    "qk-pos-emb-head-dim": "qk_rope_head_dim", "v-head-dim": "v_head_dim", "mtp-num-layers": "mtp_layers",
    "hidden-dropout": "dropout", "recompute-num-layers": "recompute_num_layers",
    "decoder-first-pipeline-num-layers": "pp_first_stage_layers",
    "decoder-last-pipeline-num-layers": "pp_last_stage_layers",
    "microbatch-group-size-per-virtual-pipeline-stage": "pp_microbatch_group",
    "num-distributed-optimizer-instances": "zero_instances",
    "wgrad-deferral-limit": "wgrad_deferral_limit",
}
#: arguments that take no value: Megatron-LM's name -> the settings they make
SWITCHES = {
    "sequence-parallel": {"sequence_parallel": "true"},
    "use-distributed-optimizer": {"zero_stage": "1"},  # the distributed optimizer shards like ZeRO-1
    "qk-layernorm": {"qk_norm": "head"},
    "deterministic-mode": {"deterministic": "true"},
    "moe-permute-fusion": {"moe_permute_fusion": "true"},
    "account-for-embedding-in-pipeline-split": {"pp_split_embedding": 1},
    "account-for-loss-in-pipeline-split": {"pp_split_loss": 1},
    "overlap-moe-expert-parallel-comm": {"ep_comm_overlap": "true"},
    "untie-embeddings-and-output-weights": {"tie_word_embeddings": "false"},
    "swiglu": {"mlp": "swiglu"},
    "squared-relu": {"mlp": "relu2"},
    "disable-bias-linear": {"attention_bias": "false", "o_proj_bias": "false", "mlp_bias": "false"},
    "add-qkv-bias": {"attention_bias": "true"},
    "multi-latent-attention": {"attention_type": "mla"},
    "cross-entropy-loss-fusion": {"cross_entropy_fusion": "native"},
    "bf16": {"precision": "bf16_mixed"},
    "fp16": {"precision": "fp16_mixed"},
    "use-rotary-position-embeddings": {"position_embedding": "rope"},
    "no-position-embedding": {"position_embedding": "none"},
    "group-query-attention": {},  # read with --num-query-groups
    "moe-grouped-gemm": {"moe_grouped_gemm": "true"},
    "tp-comm-overlap": {"tp_comm_overlap": "true"},
    "defer-embedding-wgrad-compute": {"defer_embedding_wgrad": "true"},
}
#: arguments with a choice: Megatron-LM's name -> {its value: the settings it makes}
CHOICES = {
    "normalization": {"LayerNorm": {"norm": "layernorm"}, "RMSNorm": {"norm": "rmsnorm"}},
    "position-embedding-type": {"learned_absolute": {"position_embedding": "learned"},
                                "rope": {"position_embedding": "rope"}, "none": {"position_embedding": "none"}},
    "transformer-impl": {"transformer_engine": {}, "local": {"megatron_impl": "local", "attention": "eager"}},
    # the unfused DotProductAttention keeps the scores; flash, fused (cuDNN) and auto do not
    "attention-backend": {"auto": {}, "flash": {}, "fused": {}, "unfused": {"attention": "eager"},
                          "local": {"attention": "eager"}},
    "recompute-granularity": {"full": {"recompute": "full"}, "selective": {"recompute": "selective"}},
    "recompute-method": {"uniform": {"recompute_method": "uniform"}, "block": {"recompute_method": "block"}},
    "moe-token-dispatcher-type": {"allgather": {"moe_dispatcher": "allgather"},
                                  "alltoall": {"moe_dispatcher": "alltoall"}},
    "cross-entropy-fusion-impl": {"native": {}},
    "optimizer": {"adam": {"optimizer": "adamw"}, "sgd": {"optimizer": "sgd_momentum"}},
    "fp8-format": {"hybrid": {"precision": "fp8_mixed"}, "e4m3": {"precision": "fp8_mixed"}},
    "tokenizer-type": {"GPT2BPETokenizer": {}, "NullTokenizer": {}, "HuggingFaceTokenizer": {},
                       "SentencePieceTokenizer": {}, "GPTSentencePieceTokenizer": {}, "Llama2Tokenizer": {},
                       "TikTokenizer": {}, "MultimodalTokenizer": {}},
}
#: Megatron's --recompute-modules, each the option that models it (core_attn is recompute=selective)
RECOMPUTE_MODULES = {"layernorm": "recompute_layernorm", "mla_up_proj": "recompute_mla_up_proj",
                     "mlp": "recompute_mlp", "moe_act": "recompute_moe_act", "moe": "recompute_moe",
                     "shared_experts": "recompute_shared_experts"}
#: arguments read for Megatron-LM's derived defaults, not passed on as they are
DERIVED = {"recompute-modules", "ffn-hidden-size", "num-query-groups", "kv-channels", "vocab-size", "make-vocab-size-divisible-by",
           "max-position-embeddings", "moe-ffn-hidden-size", "moe-layer-freq",
           "num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank", "sgd-momentum",
           "pipeline-model-parallel-layout"}
#: arguments with no effect on memory (training schedule, data, logging, checkpoints, kernels'
#: speed), read and dropped: whole names, and prefixes ending in '-'
NO_EFFECT = {
    "lr", "min-lr", "lr-", "weight-decay", "clip-grad", "adam-", "init-method-std", "seed", "train-iters",
    "train-samples", "log-", "eval-", "save", "save-", "load", "no-load-", "data-", "split", "tokenizer-model",
    "vocab-file", "merge-file", "tensorboard-", "wandb-", "exit-", "distributed-backend",
    "distributed-timeout-minutes", "ckpt-", "dist-ckpt-", "use-mcore-models", "timing-log-", "mock-data",
    "use-checkpoint-", "async-save", "use-persistent-ckpt-worker", "overlap-grad-reduce", "overlap-param-gather",
    "no-gradient-accumulation-fusion", "no-bias-gelu-fusion", "no-bias-dropout-fusion", "no-masked-softmax-fusion",
    "no-rope-fusion", "attention-dropout", "attention-softmax-in-fp32", "rotary-", "manual-gc", "no-ckpt-",
    "micro-batch-size-", "num-workers", "no-mmap-", "use-flash-attn", "no-create-attention-mask-in-dataloader",
    "bias-swiglu-fusion", "apply-layernorm-1p", "norm-epsilon", "ffn-", "moe-router-load-balancing-type",
    "moe-aux-loss-coeff", "moe-z-loss-coeff", "moe-router-", "moe-input-jitter-eps", "moe-expert-capacity-factor",
    "moe-pad-expert-input-to-capacity", "moe-token-drop-policy", "test-mode", "calculate-per-token-loss",
    "untie-", "tp-comm-overlap-", "fp8-recipe", "fp8-param-gather", "fp8-amax-",
    "ddp-", "accumulate-allreduce-grads-in-fp32", "bf16-", "no-check-for-nan-in-loss-and-grad", "check-for-",
    "use-tp-pp-dp-mapping", "empty-unused-memory-level", "rerun-mode", "result-rejected-tracker-filename",
    "full-validation", "multi-latent-attention-", "mscale", "mscale-all-dim", "beta-fast", "beta-slow",
    "original-max-position-embeddings", "rope-", "seq-length-", "position-embedding-", "use-legacy-models",
    "object-storage-", "heterogeneous-layers-config-", "dataloader-type", "recompute-activations",
    "manual-gc-", "mtp-loss-scaling-factor", "logging-level", "exit-duration-in-mins",
    # forces the softmax into fp32 inside FusedScaleMaskSoftmax, whose saved output stays in the working dtype
    "apply-query-key-layer-scaling",
}
#: a tokenizer whose vocabulary the arguments give: GPT-2's BPE files hold 50,257 tokens
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}
#: torchrun's arguments (python -m torch.distributed.run), of which --nproc_per_node and --nnodes
#: give the world size
TORCHRUN = {"nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port", "rdzv_backend", "rdzv_endpoint",
            "rdzv_id", "rdzv_conf", "standalone", "max_restarts", "monitor_interval", "start_method", "role",
            "log_dir", "redirects", "tee", "local_addr", "logs_specs", "run_path", "module", "no_python",
            "local_ranks_filter"}

_FLAG = re.compile(r"--([A-Za-z0-9][A-Za-z0-9_-]*)")
_YAML_ARG = re.compile(r"^\s*--([A-Za-z0-9][A-Za-z0-9_-]*)\s*:\s*(.*?)\s*$")
_SHELL = re.compile(r"^[()]$|^\$|^\"?\$\{|^[A-Za-z_][A-Za-z0-9_]*=\($")


@dataclass(frozen=True)
class _Arg:
    """One argument as written: its name, its values (text), and where it stands."""

    name: str
    values: tuple
    span: Span


@dataclass(frozen=True)
class MegatronArgs:
    """The settings Megatron-LM's arguments give (memform names -> validated values), and notes."""

    path: str
    values: dict
    notes: tuple
    unknown: tuple  # arguments memform does not model, as written


def is_args_file(path: str | Path) -> bool:
    """Whether the file reads as Megatron-LM arguments rather than a config.json: it is not a
    JSON object and it gives ``--num-layers``."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return False
    if head.lstrip().startswith("{"):
        return False
    return re.search(r"(^|\s)--num-layers(\s|:|=|$)", head, re.M) is not None


def _is_no_effect(name: str) -> bool:
    return name in NO_EFFECT or any(p.endswith("-") and name.startswith(p) for p in NO_EFFECT)


def _tokens(text: str, path: str):
    """(word, Span, fresh) of each shell word of a launch script, comments and continuations
    dropped; ``fresh``: the word begins a command (the first of a line not continued)."""
    out = []
    continued = False
    for number, line in enumerate(text.splitlines(), 1):
        body = line.rstrip()
        fresh, continued = not continued, body.endswith("\\")
        if continued:
            body = body[:-1]
        try:
            words = shlex.split(body, comments=True)
        except ValueError as exc:  # an unclosed quote
            raise SourceError(f"{exc}".lower(), Span(path, number, 1, max(1, len(line)), line[:200]),
                              hint="a launch script's arguments, one or more to a line") from None
        at = 0
        for word in words:
            column = line.find(word, at)
            column = column if column >= 0 else at
            at = column + len(word)
            out.append((word, Span(path, number, column + 1, max(1, len(word)), line[:200]), fresh))
            fresh = False
    return out


def _script_args(text: str, path: str):
    """The arguments of a launch script, and torchrun's: those before the script's ``.py`` file
    that torchrun takes (a bash array of Megatron-LM's arguments may stand before it too)."""
    words = _tokens(text, path)
    script = next((i for i, (w, _, _) in enumerate(words) if w.endswith(".py")), len(words))
    before, after = _grouped(words[:script]), _grouped(words[script + 1:])
    launcher = [a for a in before if a.name.replace("-", "_") in TORCHRUN]
    return launcher, [a for a in before if a.name.replace("-", "_") not in TORCHRUN] + after


def _grouped(words) -> list[_Arg]:
    """``--flag value ...`` words grouped by flag; ``--flag=value`` split; shell syntax and the
    words that begin a command (``torchrun``, ``export``, ``ARGS=(``) dropped."""
    out: list[_Arg] = []
    closed = True  # no flag takes the next word as its value
    for word, span, fresh in words:
        flag = _FLAG.fullmatch(word.split("=", 1)[0])
        if flag:
            values = (word.split("=", 1)[1],) if "=" in word else ()
            out.append(_Arg(flag.group(1), values, span))
            closed = False
        elif fresh or word == ")":
            closed = True
        elif _SHELL.search(word) and not (out and not out[-1].values and word.startswith("$")):
            continue  # "(", ARGS=( and "${ARGS[@]}" between arguments
        elif out and not closed:
            last = out[-1]
            out[-1] = _Arg(last.name, last.values + (word,), last.span if last.values else span)
    return out


def _yaml_args(text: str, path: str) -> list[_Arg]:
    """The ``--flag: value`` lines of a functional test's MODEL_ARGS (``true`` is a switch given,
    ``false`` one left out), and its ENV_VARS' ``CUBLAS_WORKSPACE_CONFIG``."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        m = _YAML_ARG.match(line.split(" #", 1)[0])
        if not m:
            continue
        name, value = m.group(1), m.group(2).strip().strip("'\"")
        span = Span(path, number, m.start(2) + 1 if value else m.start(1) - 1, max(1, len(value) or len(name) + 2),
                    line[:200])
        if value == "false" or value in ("null", "~", ""):
            continue
        out.append(_Arg(name, () if value == "true" else (value,), span))
    return out


#: Megatron-LM's pipeline layout: stages split by '|', 'E' the embedding, 't' a transformer layer,
#: 'm' a multi-token-prediction layer, 'L' the loss; 'x*n' and '(...)*n' repeat, commas are
#: cosmetic (megatron/core/transformer/pipeline_parallel_layer_layout.py, parse_str_to_list)
_LAYOUT_GRAMMAR = r"""
    seq: item*
    item: unit ("*" INT)?
    unit: LAYER -> layer
        | "|" -> cut
        | "(" seq ")" -> group
    LAYER: /[EtmL]/
    INT: /[0-9]+/
    %ignore /[,\s]+/
"""
#: the most layer letters an expanded layout may hold
MAX_LAYOUT = 100_000


@functools.cache
def _layout_parser() -> lark.Lark:
    return lark.Lark(_LAYOUT_GRAMMAR, start="seq", parser="lalr")


def pipeline_layout(arg: _Arg, layers: int) -> list[str]:
    """The stages of ``--pipeline-model-parallel-layout``, each as its layer letters."""
    text = " ".join(arg.values)
    try:
        tree = _layout_parser().parse(text)
    except lark.exceptions.LarkError:
        raise DomainError(f"--pipeline-model-parallel-layout '{shown(text)}' is not a layout", arg.span,
                          hint="stages of E (embedding), t (layer), m (MTP layer) and L (loss) split by '|', "
                               "with x*n and (...)*n repeats, e.g. 'Et*3|(tt|)*6tmL'") from None

    def expand(node) -> str:
        if node.data == "seq":
            out = "".join(expand(child) for child in node.children)
        elif node.data == "item":
            unit, *count = node.children
            out = expand(unit) * (int(count[0]) if count else 1)
        elif node.data == "layer":
            out = str(node.children[0])
        elif node.data == "cut":
            out = "|"
        else:  # group
            out = expand(node.children[0])
        if len(out) > MAX_LAYOUT:
            raise DomainError(f"--pipeline-model-parallel-layout expands to more than {MAX_LAYOUT:,} layers",
                              arg.span)
        return out

    stages = expand(tree).split("|")
    found = sum(stage.count("t") for stage in stages)
    if found != layers:
        raise DomainError(f"--pipeline-model-parallel-layout places {found} transformer layers, not --num-layers "
                          f"{layers}", arg.span)
    return stages


def _env(text: str, name: str) -> str | None:
    """A variable's value as a script exports it or model_config.yaml's ENV_VARS sets it."""
    m = re.search(rf"(?:^|\s){name}\s*[=:]\s*['\"]?([^\s'\"]+)", text, re.M)
    return m.group(1) if m else None


class _Reader:
    def __init__(self, lib, path: str):
        self.lib, self.path = lib, path
        self.values: dict = {}
        self.notes: list[str] = []

    def number(self, arg: _Arg, name: str | None = None) -> int | Fraction:
        """The argument's one value as an exact number, parsed by the rule language."""
        if len(arg.values) != 1:
            raise DomainError(f"--{arg.name} takes one value, not {len(arg.values)}", arg.span)
        text = arg.values[0]
        if text.startswith("$"):
            raise UsageError(f"--{arg.name} {shown(text)}: a shell variable, whose value is not in the file",
                             arg.span, hint="write the value itself")
        try:
            value = parse_value(text, self.path, constant=True)
        except EngineError:
            raise DomainError(f"--{arg.name} needs a number, not '{shown(text)}'", arg.span) from None
        if not isinstance(value, sympy.Number):
            raise DomainError(f"--{arg.name} needs a number, not '{shown(text)}'", arg.span)
        if name is not None:
            self.lib.check_value(name, value, arg.span)
        v = Fraction(int(value.p), int(value.q))
        return int(v) if v.denominator == 1 else v

    def whole(self, arg: _Arg) -> int:
        """The argument's one value as a whole number of at least 1 (a size, a count, a factor)."""
        value = self.number(arg)
        if not isinstance(value, int) or value < 1:
            raise DomainError(f"--{arg.name} needs a whole number of at least 1, not {value}", arg.span)
        return value

    def set(self, name: str, value, arg: _Arg | None = None) -> None:
        span = arg.span if arg is not None else None
        if isinstance(value, (int, Fraction)):
            value = sympy.Rational(value.numerator, value.denominator)
        try:
            self.values[name] = self.lib.check_value(name, value, span)
        except EngineError as exc:
            if span is not None:
                raise
            raise type(exc)(f"{self.path}: {exc.message}", None, exc.hint) from None


def read_args(path: str | Path, lib) -> MegatronArgs:
    """Read Megatron-LM's arguments from a launch script or a functional test's model_config.yaml.

    Examples
    --------
    >>> import engine, tempfile, os
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False)
    >>> _ = f.write("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 \\\\\\n"
    ...             "  --num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 \\\\\\n"
    ...             "  --micro-batch-size 2 --global-batch-size 64 --tensor-model-parallel-size 2 --swiglu --bf16\\n")
    >>> f.close()
    >>> a = read_args(f.name, engine.load())
    >>> a.values["intermediate_size"], "vocab_size" in a.values, a.values["dp"], a.values["num_experts"] if "num_experts" in a.values else 0
    (5440, False, 4, 0)
    >>> os.unlink(f.name)
    """
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read '{shown(path, 255)}': {exc.strerror or exc}") from None
    return read_text(text, lib, path)


def read_text(text: str, lib, path: str = "<arguments>", gpus: int | None = None) -> MegatronArgs:
    """:func:`read_args` of a text (a launch script's, or model_config.yaml's); ``path`` names it
    in errors, ``gpus`` is the world size where no torchrun line gives it (a functional test's
    recipe: one node of 8)."""
    yaml = "MODEL_ARGS:" in text or re.search(r"^\s*--[A-Za-z0-9-]+\s*:", text, re.M) is not None
    launcher, args = ([], _yaml_args(text, path)) if yaml else _script_args(text, path)
    r = _Reader(lib, path)
    given = {arg.name: arg for arg in args}  # argparse keeps the last of an argument given twice
    unknown: list[str] = []

    def num(name: str, default=None):
        return r.number(given[name]) if name in given else default

    def whole(name: str, default=None):
        return r.whole(given[name]) if name in given else default

    # what is passed on as it is
    for name, arg in given.items():
        if name in NUMBERS:
            r.set(NUMBERS[name], r.number(arg, NUMBERS[name]), arg)
        elif name in SWITCHES:
            extra = [v for v in arg.values if not _SHELL.search(v)]
            if extra:
                raise DomainError(f"--{name} takes no value ('{shown(extra[0])}')", arg.span)
            for key, value in SWITCHES[name].items():
                r.set(key, value, arg)
        elif name in CHOICES:
            if len(arg.values) < 1:
                raise DomainError(f"--{name} needs a value", arg.span,
                                  hint="one of: " + ", ".join(CHOICES[name]))
            for value in arg.values:
                if value not in CHOICES[name]:
                    unknown.append(f"--{name} {shown(value)}")
                    continue
                for key, setting in CHOICES[name][value].items():
                    r.set(key, setting, arg)
        elif name not in DERIVED and not _is_no_effect(name):
            unknown.append(f"--{name}")
    for name in ("num-layers", "hidden-size", "num-attention-heads"):
        if name not in given:
            raise SourceError(f"{path}: Megatron-LM's arguments give no --{name}",
                              hint="a launch script's pretrain_gpt.py arguments, or a model_config.yaml's MODEL_ARGS")

    if "global-batch-size" in given:
        whole("global-batch-size")  # Megatron refuses an empty step
    # Megatron-LM's defaults (megatron/training/arguments.py, d98e8a64)
    layers, hidden, heads = num("num-layers"), num("hidden-size"), num("num-attention-heads")
    tp, pp, cp = (whole(n, 1) for n in ("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size"))
    r.set("stack", "megatron")
    for key, default in (("norm", "layernorm"), ("position_embedding", "learned"), ("mlp", "gelu"),
                         ("tie_word_embeddings", "true"), ("precision", "fp32"), ("attention", "flash"),
                         ("attention_bias", "true"), ("o_proj_bias", "true"), ("mlp_bias", "true")):
        if key not in r.values:
            r.set(key, default)
    if "hidden-dropout" not in given:
        r.set("dropout", Fraction(1, 10))
    # Transformer Engine's layers fuse q, k and v in one GEMM; bias + GELU is one kernel; the
    # unfused attention's FusedScaleMaskSoftmax keeps its output in the working dtype
    r.set("qkv_fused", "true")
    r.set("gelu_kernel", "fused")
    r.set("eager_softmax", "working")
    if r.values.get("attention_type") == "mla" and "qk_norm" in r.values:
        # with MLA, --qk-layernorm is the query and KV latents' norms, which memform's MLA counts
        del r.values["qk_norm"]
    if "ffn-hidden-size" in given:
        ffn = num("ffn-hidden-size")
    elif r.values["mlp"] == "swiglu":
        ffn = int((4 * hidden * 2 / 3) / 64) * 64  # arguments.py, as Megatron computes it (in floats)
    else:
        ffn = 4 * hidden
    r.set("intermediate_size", ffn, given.get("ffn-hidden-size"))
    groups = num("num-query-groups", heads) if "group-query-attention" in given else heads
    r.set("num_key_value_heads", groups, given.get("num-query-groups"))
    if "kv-channels" in given and num("kv-channels") * heads != hidden:
        r.set("head_dim", num("kv-channels"), given["kv-channels"])
    if "max-position-embeddings" in given:
        r.set("max_position_embeddings", num("max-position-embeddings"), given["max-position-embeddings"])
    elif "seq-length" in given:
        r.set("max_position_embeddings", num("seq-length"))
    # the vocabulary: --vocab-size (NullTokenizer) or the tokenizer's, padded to a multiple of
    # make-vocab-size-divisible-by x tp (megatron/core/tokenizers/utils/build_tokenizer.py)
    tokenizer = given["tokenizer-type"].values[0] if "tokenizer-type" in given and given["tokenizer-type"].values else None
    if tokenizer is None and "vocab-file" in given and "vocab-size" not in given:
        tokenizer = "GPT2BPETokenizer"  # pretrain_gpt.py's tokenizer for a --vocab-file and --merge-file
        r.notes.append("no --tokenizer-type: GPT-2's BPE vocabulary (50,257 tokens) is assumed for --vocab-file")
    vocab = whole("vocab-size") if "vocab-size" in given else TOKENIZER_VOCAB.get(tokenizer)
    if vocab is not None:
        multiple = whole("make-vocab-size-divisible-by", 128) * tp
        r.set("vocab_size", math.ceil(Fraction(vocab) / multiple) * multiple, given.get("vocab-size"))
    else:
        r.notes.append(f"the vocabulary of {'tokenizer ' + tokenizer if tokenizer else 'the tokenizer'} is not in the "
                       "arguments: give --set vocab_size=N (the padded size: a multiple of "
                       "make-vocab-size-divisible-by x tp)")
    if "num-experts" in given:
        r.set("moe_intermediate_size", num("moe-ffn-hidden-size", ffn), given.get("moe-ffn-hidden-size"))
        if "moe-grouped-gemm" not in given:
            r.set("moe_grouped_gemm", "false")  # Megatron's default: SequentialMLP
        if "moe-router-topk" not in given:
            r.set("num_experts_per_tok", 2)
        if "moe-layer-freq" in given:
            freq = given["moe-layer-freq"]
            if not freq.values:
                raise DomainError("--moe-layer-freq needs a value", freq.span)
            text = "".join(freq.values)
            m = re.fullmatch(r"\(?\[0\]\*(\d+)\+\[1\]\*(\d+)\)?", text.replace(" ", ""))
            if m and int(m.group(1)) + int(m.group(2)) == layers:
                r.set("first_k_dense_replace", int(m.group(1)), freq)
            elif text != "1":
                raise DomainError(f"--moe-layer-freq {shown(text)} is not modelled", freq.span,
                                  hint="memform counts MoE layers as every layer, or '([0]*N+[1]*M)': "
                                       "N dense layers, then M MoE layers")
    # --recompute-modules replaces selective recomputation's default list, ["core_attn"]
    # (megatron/core/transformer/transformer_config.py): memform's selective is core_attn, the
    # other modules options of their own (formulas/activations.mem)
    if "recompute-modules" in given and r.values.get("recompute") == "selective":
        arg = given["recompute-modules"]
        modules = " ".join(arg.values).replace(",", " ").strip("[]'\" ").split()
        modules = [m.strip("[]'\"") for m in modules]
        if "core_attn" not in modules:
            r.set("recompute", "none")
        for module in modules:
            if module in RECOMPUTE_MODULES:
                r.set(RECOMPUTE_MODULES[module], "true", arg)
        other = [m for m in modules if m != "core_attn" and m not in RECOMPUTE_MODULES]
        if other:
            unknown.append("--recompute-modules " + " ".join(other)
                           + " (modelled: core_attn, " + ", ".join(RECOMPUTE_MODULES) + ")")
    if "sgd-momentum" in given and r.values.get("optimizer") == "sgd_momentum" and num("sgd-momentum") == 0:
        r.set("optimizer", "sgd")
    # the interleaved schedule's model chunks (arguments.py: --num-layers-per-virtual-pipeline-stage
    # counts the embedding and the loss where the split does)
    vp = None
    if "num-virtual-stages-per-pipeline-rank" in given:
        vp = whole("num-virtual-stages-per-pipeline-rank")
    elif "num-layers-per-virtual-pipeline-stage" in given:
        arg = given["num-layers-per-virtual-pipeline-stage"]
        units = layers + ("account-for-embedding-in-pipeline-split" in given) + ("account-for-loss-in-pipeline-split" in given)
        per_chunk = r.whole(arg)
        if units % pp or (units // pp) % per_chunk:
            raise DomainError(f"--num-layers-per-virtual-pipeline-stage {per_chunk} does not divide the "
                              f"{Fraction(units, pp)} layers of a pipeline stage", arg.span)
        vp = units // pp // per_chunk
    if "pipeline-model-parallel-layout" in given and pp > 1:
        arg = given["pipeline-model-parallel-layout"]
        stages = pipeline_layout(arg, layers)
        if len(stages) % pp:
            raise DomainError(f"--pipeline-model-parallel-layout has {len(stages)} stages, not a multiple of "
                              f"--pipeline-model-parallel-size {pp}", arg.span)
        vp = len(stages) // pp
        # each rank holds the stages r, r + pp, ...; memform takes the first and the last rank's
        # layers as given and the ranks between an even share of the rest
        r.set("pp_first_stage_layers", max(1, sum(st.count("t") for st in stages[0::pp])), arg)
        r.set("pp_last_stage_layers", max(1, sum(st.count("t") for st in stages[pp - 1::pp])), arg)
        r.notes.append("--pipeline-model-parallel-layout: its virtual stages and the first and last ranks' layers "
                       "are used; the ranks between take an even share of the rest, and a rank's model chunks "
                       "are taken as equal")
    if vp is not None and vp > 1 and pp > 1:
        r.set("pp_schedule", "interleaved")
        r.set("pp_virtual_stages", vp)

    # the world size: torchrun's --nproc_per_node x --nnodes; dp = world / (tp pp cp)
    world = gpus
    if launcher:
        found = {a.name.replace("-", "_"): a for a in launcher}
        if "nproc_per_node" in found:
            world = r.whole(found["nproc_per_node"]) * (r.whole(found["nnodes"]) if "nnodes" in found else 1)
    if world is not None:
        if world % (tp * pp * cp):
            where = found["nproc_per_node"].span if launcher and "nproc_per_node" in found else None
            raise DomainError(f"{'' if where else path + ': '}{world} GPUs are not a multiple of tp x pp x cp = "
                              f"{tp * pp * cp}", where)
        r.set("dp", world // (tp * pp * cp))
    else:
        r.notes.append("the world size is not in the arguments (no torchrun --nproc_per_node): dp = 1; give "
                       "--set dp=N for N data-parallel ranks (tp x pp x cp x dp GPUs)")
    workspace = _env(text, "CUBLAS_WORKSPACE_CONFIG")
    if workspace:
        pairs = re.findall(r":(\d+):(\d+)", workspace)
        if pairs:  # PyTorch's per-handle cuBLAS workspace: size KiB x count, summed
            r.set("cublas_workspace_config", sum(int(a) * int(b) for a, b in pairs) * 1024)
    return MegatronArgs(path, r.values, tuple(r.notes), tuple(unknown))
