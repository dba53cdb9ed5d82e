#!/usr/bin/env python
"""What a Hugging Face transformers training step keeps under torch.autocast(bf16) on the CPU.

Trainer(bf16=True) hands mixed precision to accelerate, which wraps model.forward (loss
included, since Trainer passes labels) in torch.autocast(dtype=bfloat16) and leaves the model's
parameters in fp32; backward runs outside autocast.  This script does the same by hand for tiny
Llama (GQA), GPT-2, Mixtral and Qwen2-MoE models, with SDPA and eager attention, and compares it
with (a) the same step with the model in pure bf16 (model.to(bfloat16), no autocast) and (b)
memform's prediction (precision=bf16_mixed, activation_model=architecture).

For every saved-for-backward tensor (torch.autograd.graph.saved_tensors_hooks, de-duplicated by
storage, parameters left out as engine/measure.py does) it records shape, dtype, storage bytes,
the module that was running when it was saved, and the autograd nodes that saved it (found by
walking the graph after the forward and reading every node's _saved_* attributes, which calls
our unpack hook).  A saved tensor whose grad_fn chain is views of ToCopyBackward0 <- AccumulateGrad
is an autocast cast of a parameter ("weight copy").  A second forward under a TorchDispatchMode
lists every aten._to_copy of a parameter inside autocast (the autocast weight-cast cache) and
checks, with weak references, which copies outlive the autocast region and the step.

Usage: python bench/hf_autocast_measure.py [--family llama ...] [--detail]
Writes the tiny config.json files under /tmp/hfcfg/ (memform reads them) and prints to stdout.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import re
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

MEMFORM = "/work/main/.venv/bin/memform"
CFGDIR = Path("/tmp/hfcfg")
#: (micro_batch, seq_len); the first two are the brief's, three more separate fixed, per-position,
#: per-token and per-token-per-position bytes (b >= 2: with b = 1 the loss's shifted labels are a view
#: of the padded labels, (s + 1) x 8 B, not a copy)
POINTS = [(2, 32), (4, 64), (2, 48), (3, 16), (4, 32)]

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
        "max_position_embeddings": 128}
#: the config.json memform reads (HF field names); the model is built from the same fields
CONFIGS = {
    "llama": {"model_type": "llama", **TINY, "num_key_value_heads": 2, "intermediate_size": 176,
              "tie_word_embeddings": False},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 128,
             "n_positions": 128, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
    "mixtral": {"model_type": "mixtral", **TINY, "num_key_value_heads": 2, "intermediate_size": 96,
                "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": False},
    "qwen2_moe": {"model_type": "qwen2_moe", **TINY, "num_key_value_heads": 2, "intermediate_size": 96,
                  "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "num_experts": 4,
                  "num_experts_per_tok": 2, "tie_word_embeddings": False},
}
#: HF-only fields for building (no dropout, no jitter, every layer sparse, no special tokens)
EXTRA = {
    "llama": dict(attention_dropout=0.0, bos_token_id=None, eos_token_id=None, pad_token_id=None),
    "gpt2": dict(bos_token_id=None, eos_token_id=None),
    "mixtral": dict(attention_dropout=0.0, router_jitter_noise=0.0, bos_token_id=None, eos_token_id=None,
                    pad_token_id=None),
    "qwen2_moe": dict(attention_dropout=0.0, decoder_sparse_step=1, mlp_only_layers=[], bos_token_id=None,
                      eos_token_id=None, pad_token_id=None),
}
LAYER_RE = re.compile(r"^(?:model\.layers|transformer\.h)\.(\d+)(?:\.(.*))?$")
REGIONS = {"model.embed_tokens": "embedding", "transformer.wte": "embedding", "transformer.wpe": "embedding",
           "model.norm": "final_norm", "transformer.ln_f": "final_norm", "lm_head": "head",
           "model.rotary_emb": "rotary", "model": "base_model", "transformer": "base_model"}
VIEW_NODES = {"TBackward0", "ViewBackward0", "UnsafeViewBackward0", "PermuteBackward0", "TransposeBackward0",
              "ExpandBackward0", "SliceBackward0", "SelectBackward0", "UnsqueezeBackward0", "SqueezeBackward0",
              "AsStridedBackward0", "ReshapeAliasBackward0", "AliasBackward0", "SplitBackward0",
              "SplitWithSizesBackward0", "UnbindBackward0"}
DT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
      torch.float16: "fp16", torch.uint8: "u8"}


def build(family: str, attn: str, dtype):
    fields = {k: v for k, v in CONFIGS[family].items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(CONFIGS[family]["model_type"], **fields, **EXTRA[family])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn).to(dtype)
    model.train()
    return model, config


class Recorder:
    """Saved-tensor census of one forward: storage -> info, with the saving module and nodes."""

    def __init__(self, model):
        self.model = model
        self.params = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters()}
        self.param_ids = {id(p): n for n, p in model.named_parameters()}
        self.stack: list[str] = []
        self.head_done = False
        self.tokens: dict[int, tuple] = {}
        self.unpacked: list[int] = []
        self.storages: dict[int, dict] = {}
        self.param_saves: dict[str, int] = {}
        self.handles = []

    # -- module context
    def _pre(self, name):
        def hook(mod, args):
            self.stack.append(name)
        return hook

    def _post(self, name):
        def hook(mod, args, out):
            self.stack.pop()
            if name == "lm_head":
                self.head_done = True
        return hook

    @contextlib.contextmanager
    def modules(self):
        for name, mod in self.model.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._pre(name)))
            self.handles.append(mod.register_forward_hook(self._post(name)))
        try:
            yield
        finally:
            for h in self.handles:
                h.remove()
            self.handles = []

    def where(self):
        name = self.stack[-1] if self.stack else ""
        m = LAYER_RE.match(name)
        if m:
            return f"layer{m.group(1)}", m.group(2) or "(block)"
        for prefix, region in REGIONS.items():
            if name == prefix or name.startswith(prefix + "."):
                return region, name
        if name == "":
            return ("loss" if self.head_done else "root"), "(root)"
        return "other", name

    def cast_of(self, t):
        """The parameter t is an autocast copy of (through views), else None."""
        node = t.grad_fn
        for _ in range(8):
            if node is None:
                return None
            if node.name() == "ToCopyBackward0":
                nxt = node.next_functions[0][0]
                if nxt is not None and nxt.name() == "torch::autograd::AccumulateGrad":
                    return self.param_ids.get(id(nxt.variable))
                return None
            if node.name() not in VIEW_NODES:
                return None
            node = node.next_functions[0][0]
        return None

    # -- saved tensor hooks
    def pack(self, t):
        tok = len(self.tokens)
        self.tokens[tok] = (t,)
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in self.params:
            self.param_saves[self.params[ptr]] = st.nbytes()
            return tok
        if st.nbytes() == 0:
            return tok
        info = self.storages.get(ptr)
        region, sub = self.where()
        if info is not None and info["region"] != region:
            info["regions"].add(region)
        if info is None:
            info = self.storages[ptr] = dict(region=region, sub=sub, shape=tuple(t.shape), dtype=DT.get(t.dtype, str(t.dtype)),
                                             nbytes=st.nbytes(), savers=set(), cast_of=self.cast_of(t), tokens=[],
                                             regions={region})
        info["nbytes"] = max(info["nbytes"], st.nbytes())
        info["tokens"].append(tok)
        return tok

    def unpack(self, tok):
        self.unpacked.append(tok)
        return self.tokens[tok][0]

    def attribute(self, roots):
        """Walk the graph; name the node and attribute that saved each token."""
        by_tok = {}
        seen, todo = set(), [r for r in roots if r is not None]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            for attr in dir(node):
                if not attr.startswith("_saved_"):
                    continue
                self.unpacked = []
                try:
                    getattr(node, attr)
                except Exception:  # noqa: BLE001 - freed or not a tensor
                    continue
                for tok in self.unpacked:
                    by_tok[tok] = f"{node.name()}.{attr[len('_saved_'):]}"
            if hasattr(node, "saved_tensors") and not any(a.startswith("_saved_") for a in dir(node)):
                self.unpacked = []
                try:
                    node.saved_tensors
                except Exception:  # noqa: BLE001
                    pass
                for tok in self.unpacked:
                    by_tok[tok] = f"{node.name()}.saved_tensors"
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    todo.append(nxt)
        for info in self.storages.values():
            info["savers"] = sorted({by_tok.get(t, "?") for t in info["tokens"]})
            if len(info["regions"]) > 1:  # one tensor saved by several layers (rotary cos / sin)
                info["region"] = "shared"
                info["sub"] = "saved by " + ",".join(sorted(info["regions"]))
        return seen


class CastCensus(TorchDispatchMode):
    """Every aten._to_copy whose input is a parameter (autocast's weight casts)."""

    def __init__(self, model):
        super().__init__()
        self.params = {p.untyped_storage().data_ptr(): (n, p) for n, p in model.named_parameters()}
        self.casts = []  # (param name, dtype, nbytes, weakref)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and torch.is_tensor(args[0]):
            hit = self.params.get(args[0].untyped_storage().data_ptr())
            if hit is not None and out.dtype != args[0].dtype:
                same_view = args[0].shape == hit[1].shape
                self.casts.append((hit[0] if same_view else hit[0] + f"[{tuple(args[0].shape)}]",
                                   DT[out.dtype], out.untyped_storage().nbytes(), weakref.ref(out),
                                   out.untyped_storage().data_ptr()))
        return out


def step(family, attn, mode, b, s, census=False):
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    model, config = build(family, attn, dtype)
    torch.manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (b, s))
    rec = Recorder(model)
    cc = CastCensus(model) if census else None
    res = {}
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else contextlib.nullcontext()
    with rec.modules(), torch.autograd.graph.saved_tensors_hooks(rec.pack, rec.unpack):
        with (cc if cc is not None else contextlib.nullcontext()):
            with ctx:
                out = model(input_ids=ids, labels=ids, use_cache=False)
                if cc is not None:  # forward end, still inside autocast: the cache's copies
                    res["cache_at_forward_end"] = [(n, d, nb) for n, d, nb, r, _ in cc.casts if r() is not None]
    if cc is not None:
        res["casts_alive_after_autocast_exit"] = [(n, d, nb) for n, d, nb, r, _ in cc.casts if r() is not None]
        res["n_cast_calls"] = len(cc.casts)
    rec.attribute([out.loss.grad_fn, out.logits.grad_fn])
    res["storages"] = list(rec.storages.values())
    res["param_saves"] = dict(rec.param_saves)
    res["logits"] = (DT[out.logits.dtype], out.logits.numel() * out.logits.element_size())
    # accelerate's convert_outputs_to_fp32: a 16-bit output is replaced by .float()
    res["logits_after_accelerate"] = (("fp32", out.logits.numel() * 4) if out.logits.dtype == torch.bfloat16
                                      else res["logits"])
    res["loss_dtype"] = DT[out.loss.dtype]
    res["n_params"] = sum(p.numel() for p in model.parameters())
    res["weights"] = sum(p.numel() * p.element_size() for p in model.parameters())
    res["param_dtypes"] = sorted({DT[p.dtype] for p in model.parameters()})
    out.loss.backward()
    res["grad_dtypes"] = sorted({DT[p.grad.dtype] for p in model.parameters() if p.grad is not None})
    res["grads"] = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    res["params_without_grad"] = [n for n, p in model.named_parameters() if p.grad is None]
    # what outlives the step: saved tensors and weight casts
    refs = [weakref.ref(t[0]) for t in rec.tokens.values() if torch.is_tensor(t[0])
            and t[0].untyped_storage().data_ptr() not in rec.params]
    rec.tokens.clear()
    del out
    gc.collect()
    alive = {id(r()): r() for r in refs if r() is not None}
    res["saved_alive_after_step"] = [("input_ids" if x is ids else f"{DT[x.dtype]}{tuple(x.shape)}") for x in alive.values()]
    if cc is not None:
        res["casts_alive_after_step"] = [(n, d, nb) for n, d, nb, r, _ in cc.casts if r() is not None]
    res["config"] = config
    return res


# ----------------------------------------------------------------------------- memform
def write_configs():
    CFGDIR.mkdir(parents=True, exist_ok=True)
    for fam, data in CONFIGS.items():
        (CFGDIR / f"{fam}.json").write_text(json.dumps(data, indent=1) + "\n")


def memform_cli(family, attn, b, s, precision="bf16_mixed"):
    cmd = [MEMFORM, "estimate", str(CFGDIR / f"{family}.json"), "--set", "activation_model=architecture",
           "--set", f"precision={precision}", "--set", f"micro_batch={b}", "--set", f"seq_len={s}", "--json"]
    if attn == "eager":
        cmd += ["--set", "attention=eager"]
    data = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {k: data["rules"][k] for k in ("activations", "logits", "weights", "master", "grads")}


def memform_rules(family, attn, b, s, precision="bf16_mixed"):
    """Sub-rules through the engine's Python API (the same library the CLI loads)."""
    sys.path.insert(0, "/work/main")
    import engine
    from engine.library.hfconfig import read_config
    from engine.compile.model import Scenario
    lib = memform_rules.lib = getattr(memform_rules, "lib", None) or engine.load()
    cfg = read_config(CFGDIR / f"{family}.json", lib)
    vals = {**cfg.values, "activation_model": "architecture", "precision": precision, "micro_batch": b,
            "seq_len": s, "attention": "eager" if attn == "eager" else "flash"}
    sc = Scenario.create(lib, None, values=vals)
    moe = family in ("mixtral", "qwen2_moe")
    names = ["architecture_norm", "architecture_attention", "architecture_moe_mlp" if moe else "architecture_dense_mlp",
             "layer_activations", "output_layer_inputs", "logits_tensor", "logits", "activations"]
    return {n: float(sc.evaluate(n)) for n in names}


# ----------------------------------------------------------------------------- reporting
def layered(res, n_layers):
    """(region, label, dtype) -> bytes; layer regions summed over layers as 'layer'."""
    agg = collections.defaultdict(int)
    per_layer = collections.defaultdict(int)
    for info in res["storages"]:
        region = info["region"]
        label = ("W:" + info["cast_of"]) if info["cast_of"] else f"{info['sub']} | {'+'.join(info['savers'])}"
        if info["cast_of"]:
            label = "weight copy " + re.sub(r"^(model\.layers|transformer\.h)\.\d+\.", "", info["cast_of"])
        key = ("layer" if region.startswith("layer") else region, label, info["dtype"])
        agg[key] += info["nbytes"]
        if region.startswith("layer"):
            per_layer[region] += info["nbytes"]
    return agg, per_layer


def fit(rows):
    """rows: (b, s, bytes) -> (fixed, per position s, per token b s, per token x s, max abs residual)."""
    A = np.array([[1.0, s, b * s, b * s * s] for b, s, _ in rows])
    y = np.array([v for _, _, v in rows], dtype=float)
    c, *_ = np.linalg.lstsq(A, y, rcond=None)
    c = np.where(np.abs(c) < 1e-6, 0.0, c)
    return c[0], c[1], c[2], c[3], float(np.max(np.abs(A @ c - y)))


def block_of(family, label):
    """attention or mlp half of a layer, from the module path of a per-layer tensor."""
    sub = label.replace("weight copy ", "")
    return "attn" if sub.startswith(("input_layernorm", "self_attn", "ln_1", "attn")) else "mlp"


def fmt(x):
    return f"{x:.4f}".rstrip("0").rstrip(".") if abs(x - round(x)) > 1e-6 else f"{int(round(x))}"


def report(family, detail):
    L = CONFIGS[family].get("num_hidden_layers", CONFIGS[family].get("n_layer"))
    print(f"\n{'=' * 100}\n{family}: {json.dumps(CONFIGS[family])}  (+ {EXTRA[family]})")
    for attn in ("sdpa", "eager"):
        runs = {}
        for mode in ("autocast", "bf16"):
            for b, s in POINTS:
                runs[mode, b, s] = step(family, attn, mode, b, s, census=(mode == "autocast" and (b, s) == POINTS[0]))
        first = runs["autocast", *POINTS[0]]
        print(f"\n--- {family} attn={attn}  n_params={first['n_params']:,}")
        # per tensor per layer, both modes
        tables = {}
        for mode in ("autocast", "bf16"):
            keys = set()
            aggs = {}
            for b, s in POINTS:
                aggs[b, s], per_layer = layered(runs[mode, b, s], L)
                if len(set(per_layer.values())) > 1:
                    print(f"  NOTE {mode} b={b} s={s}: layers differ: {dict(per_layer)}")
                keys |= set(aggs[b, s])
            rows = {}
            for key in sorted(keys):
                c0, cs, c1, c2, r = fit([(b, s, aggs[b, s].get(key, 0)) for b, s in POINTS])
                div = L if key[0] == "layer" else 1
                rows[key] = (c0 / div, cs / div, c1 / div, c2 / div, r)
            tables[mode] = rows
        for mode in ("autocast", "bf16"):
            print(f"  [{mode}] saved for backward: per layer (region 'layer' = sum over layers / {L}) and outside the layers")
            print(f"    {'region':11} {'dtype':5} {'fixed':>7} {'B/pos':>6} {'B/tok':>7} {'B/tok/pos':>9} {'resid':>5}  module | saving node.attribute")
            for (region, label, dt), (c0, cs, c1, c2, r) in sorted(tables[mode].items(), key=lambda kv: (kv[0][0] != "layer", kv[0][0], kv[0][1])):
                print(f"    {region:11} {dt:5} {fmt(c0):>7} {fmt(cs):>6} {fmt(c1):>7} {fmt(c2):>9} {fmt(r):>5}  {label}")
            tot = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
            for (region, label, dt), v in tables[mode].items():
                k = (region if region in ("layer", "loss") else "other", dt)
                for i in range(4):
                    tot[k][i] += v[i]
            print("    totals by dtype: " + "; ".join(f"{reg}/{dt}: fixed {fmt(v[0])}, {fmt(v[1])} B/pos, {fmt(v[2])} B/tok, {fmt(v[3])} B/tok/pos"
                                                for (reg, dt), v in sorted(tot.items())))
            blocks = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
            for (region, label, dt), v in tables[mode].items():
                if region == "layer":
                    for i in range(4):
                        blocks[block_of(family, label), dt][i] += v[i]
            print("    per layer by block: " + "; ".join(f"{blk}/{dt}: fixed {fmt(v[0])}, {fmt(v[2])} B/tok, {fmt(v[3])} B/tok/pos"
                                                   for (blk, dt), v in sorted(blocks.items())))
            lay = [sum(v[i] for (reg, _), v in tot.items() if reg == "layer") for i in range(4)]
            print(f"    per layer total: fixed {fmt(lay[0])} B, {fmt(lay[1])} B/pos, {fmt(lay[2])} B/token, {fmt(lay[3])} B/token/position")
        # totals per point vs memform
        print("  per point: saved-for-backward bytes (params excluded), split layers / outside; memform bf16_mixed")
        print(f"    {'b':>2} {'s':>3} {'autocast':>10} {'bf16':>10} {'ac layers':>10} {'ac other':>9} "
              f"{'mf act':>9} {'mf logits':>9} {'mf a+l':>9} {'ac/mf':>7} {'bf16/mf':>7}")
        for b, s in POINTS:
            tots = {}
            for mode in ("autocast", "bf16"):
                st = runs[mode, b, s]["storages"]
                tots[mode] = (sum(i["nbytes"] for i in st),
                              sum(i["nbytes"] for i in st if i["region"].startswith("layer")))
            mf = memform_cli(family, attn, b, s)
            mfs = mf["activations"] + mf["logits"]
            print(f"    {b:>2} {s:>3} {tots['autocast'][0]:>10,} {tots['bf16'][0]:>10,} {tots['autocast'][1]:>10,} "
                  f"{tots['autocast'][0] - tots['autocast'][1]:>9,} {mf['activations']:>9,} {mf['logits']:>9,} {mfs:>9,} "
                  f"{tots['autocast'][0] / mfs:>7.3f} {tots['bf16'][0] / mfs:>7.3f}")
        # memform per layer per token and per-rule
        mrows = [(b, s, memform_rules(family, attn, b, s)) for b, s in POINTS]
        for name in mrows[0][2]:
            if name in ("architecture_norm", "output_layer_inputs"):  # already per token
                print(f"    memform {name:24} {fmt(mrows[0][2][name])} B per token")
                continue
            c0, cs, c1, c2, r = fit([(b, s, v[name]) for b, s, v in mrows])
            per = L if name == "activations" else 1
            print(f"    memform {name:24} fixed {fmt(c0 / per)} B, {fmt(cs / per)} B/pos, {fmt(c1 / per)} B/token, "
                  f"{fmt(c2 / per)} B/token/pos" + (" (per layer)" if per > 1 else ""))
        mf = memform_cli(family, attn, *POINTS[0])
        ac, bf = runs["autocast", *POINTS[0]], runs["bf16", *POINTS[0]]
        print(f"    memform weights {mf['weights']:,} master {mf['master']:,} grads {mf['grads']:,} (b={POINTS[0][0]} s={POINTS[0][1]})")
        for mode, r in (("autocast", ac), ("bf16", bf)):
            print(f"    [{mode}] params {r['param_dtypes']} weights {r['weights']:,} B; grads {r['grad_dtypes']} {r['grads']:,} B; "
                  f"params without grad {r['params_without_grad']}; logits {r['logits'][0]} {r['logits'][1]:,} B "
                  f"(after accelerate's convert_outputs_to_fp32: {r['logits_after_accelerate'][0]} {r['logits_after_accelerate'][1]:,} B); "
                  f"loss {r['loss_dtype']}; saved params (not counted) {len(r['param_saves'])}; "
                  f"saved tensors alive after backward+del: {r['saved_alive_after_step']}")
        # the autocast cast census
        cache = ac["cache_at_forward_end"]
        print(f"  autocast weight casts (b={POINTS[0][0]} s={POINTS[0][1]}): {ac['n_cast_calls']} aten._to_copy of parameters; "
              f"alive at forward end {len(cache)} = {sum(x[2] for x in cache):,} B; after autocast exit "
              f"{len(ac['casts_alive_after_autocast_exit'])} = {sum(x[2] for x in ac['casts_alive_after_autocast_exit']):,} B; "
              f"after backward {len(ac['casts_alive_after_step'])}")
        saved_w = [i for i in ac["storages"] if i["cast_of"]]
        print(f"    weight copies among saved tensors: {len(saved_w)} = {sum(i['nbytes'] for i in saved_w):,} B")
        names = collections.Counter(re.sub(r"\.\d+\.", ".N.", n) for n, _, _ in cache)
        print("    cast at forward end: " + ", ".join(f"{n} x{c}" for n, c in sorted(names.items())))
        cast_names = {n.split("[")[0] for n, _, _ in cache}
        model, _ = build(family, attn, torch.float32)
        not_cast = [(n, p.numel()) for n, p in model.named_parameters() if n not in cast_names]
        cast_numel = sum(p.numel() for n, p in model.named_parameters() if n in cast_names)
        print(f"    params cast (whole tensors): {cast_numel:,} of {first['n_params']:,} elements -> 2 B each = {2 * cast_numel:,} B; "
              f"not cast: " + ", ".join(f"{n}({c})" for n, c in not_cast))
        if detail:
            print(f"  every saved storage at b={POINTS[0][0]} s={POINTS[0][1]} (region, module, saving nodes, shape of the first saved view, dtype, storage bytes)")
            for mode in ("autocast", "bf16"):
                for i in runs[mode, *POINTS[0]]["storages"]:
                    print(f"    [{mode}] {i['region']:10} {i['sub']:40} {'+'.join(i['savers']):60} {str(i['shape']):18} "
                          f"{i['dtype']:4} {i['nbytes']:>7}" + (f"  (cast of {i['cast_of']})" if i["cast_of"] else ""))
            for n, d, nb in cache:
                print(f"    cast at forward end: {n} {d} {nb}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", action="append", choices=sorted(CONFIGS))
    ap.add_argument("--detail", action="store_true")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    write_configs()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; points (b, s) = {POINTS}")
    for family in args.family or ["llama", "gpt2", "mixtral", "qwen2_moe"]:
        report(family, args.detail)


if __name__ == "__main__":
    main()
