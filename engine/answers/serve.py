"""``memform serve``: the KV cache a serving engine gets, as the engine logs it at startup.

The rules are in ``formulas/serving.mem`` (vLLM's budget: gpu_memory_utilization x total
memory, minus the weights, the profile run's activation peak, non-torch memory and the CUDA
graph pool); this module evaluates them for a scenario and prints the breakdown, each
figure with its formula.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..compile.model import Scenario
from ..compile.outline import OPAQUE_RULES
from ..errors import EngineError, InfeasibleError, UsageError
from ..library.layout import check
from .estimate import formula, show_text
from .report import gb, gib, json_number, scaled, whole_bytes

@dataclass(frozen=True)
class Engine:
    """What one serving engine logs at startup, as rules: the memory breakdown and the counts
    that follow (each with the words of its log), the rules that give the token count and the
    concurrency, the settings its header line shows and the advice when a request does not fit."""

    breakdown: tuple
    counts: tuple
    tokens: str
    concurrency: str
    header: tuple  # (label, rule or input) shown in the first line
    extra: tuple  # further rules evaluated for the JSON form
    advice: str
    #: (budget, free at startup, the largest fraction): the engine refuses to start when its
    #: budget exceeds the free memory (vLLM); empty where it does not check
    startup: tuple = ()
    #: (memory, need): the engine's own check that one request of max_model_len fits, its KV
    #: memory against what one request needs (vLLM's sum over its layers); empty: the token
    #: count must reach the request's length
    serves_one: tuple = ()
    #: the rule of the longest request the pool takes, where it is not ``tokens`` (SGLang's
    #: hybrid sliding-window pool: the smaller of its two pools)
    longest: str = ""


#: the engines modelled, each as its log names things
ENGINES = {
    "vllm": Engine(
        breakdown=(("requested_memory", "budget (gpu_memory_utilization x total)"),
                   ("vllm_weights", "weights (as vLLM lays them out)"),
                   ("rope_cache_bytes", "rotary cos/sin table"),
                   ("vllm_allocator_slack", "allocator blocks (2 MiB segments)"),
                   ("model_memory", "model ('Model loading took')"),
                   ("activation_peak", "activation peak (profile run)"),
                   ("non_torch_memory", "non-torch memory"),
                   ("cudagraph_reserve", "CUDA graph estimate (in the budget)"),
                   ("kv_cache_memory", "KV cache ('Available KV cache memory')")),
        counts=(("kv_block_bytes", "bytes per block (all layers)"),
                ("num_gpu_blocks", "KV cache blocks (num_gpu_blocks)"),
                ("kv_cache_tokens", "GPU KV cache size (tokens)"),
                ("max_concurrency", "maximum concurrency at max_model_len")),
        tokens="kv_cache_tokens", concurrency="max_concurrency",
        header=(("max_model_len", "seq_len"), ("gpu_memory_utilization", "gpu_memory_utilization"),
                ("max_num_seqs", "max_num_seqs"), ("max_num_batched_tokens", "max_num_batched_tokens"),
                ("block_size", "block_size"), ("vllm_version", "vllm_version")),
        extra=("block_size", "total_gpu_memory", "vllm_compile_copies", "cudagraph_estimate", "profile_forward_peak",
               "profile_sampler_peak", "kv_layer_token_bytes", "startup_free_gpu_memory", "max_gpu_memory_utilization",
               "vllm_block_size", "stage_linear_layers", "linear_state_bytes", "state_page_padding",
               "kv_cache_groups", "kv_layers_per_stage", "one_request_kv_bytes", "draft_weights", "draft_cache_per_token"),
        advice="vLLM refuses to start (lower max_model_len, raise gpu_memory_utilization or tp)",
        startup=("requested_memory", "startup_free_gpu_memory", "max_gpu_memory_utilization"),
        serves_one=("kv_cache_memory", "one_request_kv_bytes")),
    # SGLang's "GB" is GiB
    "sglang": Engine(
        breakdown=(("startup_free_memory", "free at startup ('Load weight begin. avail mem', T0)"),
                   ("weights", "weights ('Load weight end ... mem usage')"),
                   ("sglang_kv_memory", "KV pool (mem_fraction_static x T0 - weights)")),
        counts=(("kv_cell_bytes", "bytes per token (all layers)"),
                ("max_total_num_tokens", "max_total_num_tokens ('#tokens')"),
                ("sglang_max_concurrency", "requests of context_len at once")),
        tokens="max_total_num_tokens", concurrency="sglang_max_concurrency",
        header=(("context_len", "seq_len"), ("mem_fraction_static", "mem_fraction_static"),
                ("page_size", "page_size"), ("sglang_version", "sglang_version")),
        extra=("page_size", "total_gpu_memory", "chunked_prefill_size", "cuda_graph_max_bs", "stage_linear_layers",
               "sglang_rest_memory", "sglang_state_per_request", "max_mamba_cache_size", "sglang_state_memory",
               "sglang_profiled_tokens", "sglang_hybrid_swa", "swa_max_total_num_tokens", "sglang_longest_request",
               "swa_full_tokens_ratio"),
        advice="lower context_len, raise mem_fraction_static or tp", longest="sglang_longest_request"),
    # TensorRT-LLM's PyTorch backend (trtllm-serve, LLM(...)); its logs print GiB
    "trtllm": Engine(
        breakdown=(("total_gpu_memory", "device total ('device total memory')"),
                   ("weights", "weights ('Use ... GB for model weights')"),
                   ("trtllm_cudagraph_memory", "CUDA graph pools (in the profile's peak)"),
                   ("trtllm_activation_peak", "activation peak ('dynamically allocated during inference')"),
                   ("non_torch_memory", "non-torch memory ('used outside torch')"),
                   ("trtllm_kv_memory", "KV cache ('Estimated max memory in KV cache')")),
        counts=(("kv_cache_per_token", "bytes per token ('kv size')"),
                ("trtllm_max_tokens", "estimated max tokens"),
                ("trtllm_num_blocks", "blocks in the primary pool"),
                ("trtllm_kv_tokens", "max tokens in paged KV cache"),
                ("trtllm_max_concurrency", "requests of max_seq_len at once")),
        tokens="trtllm_kv_tokens", concurrency="trtllm_max_concurrency",
        header=(("max_seq_len", "seq_len"), ("free_gpu_memory_fraction", "free_gpu_memory_fraction"),
                ("max_num_tokens", "max_num_tokens"), ("tokens_per_block", "tokens_per_block")),
        extra=("tokens_per_block", "total_gpu_memory", "trtllm_profile_peak"),
        advice="lower max_seq_len, raise free_gpu_memory_fraction or tp"),
}
#: rules that stay as names in the formula column
OPAQUE = OPAQUE_RULES + tuple(n for e in ENGINES.values() for n, _ in e.breakdown + e.counts) + (
    "total_gpu_memory", "profile_forward_peak", "profile_sampler_peak", "vllm_compile_copies",
    "gpu_memory_utilization", "max_num_seqs",
    "max_num_batched_tokens", "mem_fraction_static", "sglang_profiled_tokens", "sglang_full_pool_raw",
    "swa_max_total_num_tokens", "draft_weights", "sglang_draft_weights", "draft_cache_per_token")
#: rules read at another pipeline stage, written so (stage_gpu_blocks[pp_stage = first])
REBOUND = ("stage_gpu_blocks", "trtllm_stage_max_tokens")
#: engine inputs kept symbolic in the formula column
KEPT = ("gpu_memory_utilization", "block_size", "seq_len", "page_size", "free_gpu_memory_fraction",
        "tokens_per_block")


@dataclass
class Serving:
    """The evaluated serving budget of one scenario (exact numbers) and its formulas."""

    scenario: Scenario
    engine: str
    rules: dict
    formulas: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        values = self.scenario.values
        return {"engine": self.engine, "model": self.scenario.model, "gpu": self.scenario.gpu,
                "max_model_len": json_number(values["seq_len"]),
                "rules": {n: json_number(v) for n, v in self.rules.items()},
                "inputs": {n: (v if isinstance(v, str) else json_number(v)) for n, v in sorted(values.items())}}

    def print_table(self, out) -> None:
        console = Console(file=out, width=120, highlight=False, markup=False, emoji=False)
        v, r = self.scenario.values, self.rules
        engine = ENGINES[self.engine]
        shown = ", ".join(f"{label}={_setting(v[name] if name in v else r[name])}" for label, name in engine.header)
        stage = f" ({v.get('pp_stage', 'busiest')} stage shown)" if v["pp"] != 1 else ""
        console.print(Text(f"{self.scenario.model or 'model'} on {self.scenario.gpu or 'the GPU'}: {self.engine}, "
                           f"tp={v['tp']} pp={v['pp']}{stage}, {shown}"), soft_wrap=True)
        table = Table()
        for col, just in (("per GPU", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right"),
                          ("formula", "left")):
            table.add_column(col, justify=just, overflow="fold")
        for name, label in engine.breakdown:
            value = r[name]
            table.add_row(f"{label}", scaled(whole_bytes(value), 1, 0), gb(value), gib(value),
                          f"{name} = {self.formulas.get(name, '')}")
        table.add_section()
        for name, label in engine.counts:
            value = r[name]
            shown = f"{float(value):,.2f}x" if name == engine.concurrency else scaled(value, 1, 0)
            table.add_row(label, shown, "", "", f"{name} = {self.formulas.get(name, '')}")
        console.print(table)
        if r.get("stage_linear_layers") and self.engine == "sglang":
            console.print(f"linear-attention layers: {r['stage_linear_layers']}; their state pool ('Mamba Cache is "
                          f"allocated') holds {scaled(r['max_mamba_cache_size'], 1, 0)} requests' states of "
                          f"{scaled(r['sglang_state_per_request'], 1, 0)} bytes, {gib(r['sglang_state_memory'])} GiB "
                          f"of the {gib(r['sglang_rest_memory'])} GiB after the weights; at most "
                          f"{scaled(r['max_mamba_cache_size'] // 3, 1, 0)} running requests")
        elif r.get("sglang_hybrid_swa"):
            console.print(f"hybrid sliding-window pool ('Use sliding window memory pool'): full_layer_tokens="
                          f"{scaled(r['max_total_num_tokens'], 1, 0)}, swa_layer_tokens="
                          f"{scaled(r['swa_max_total_num_tokens'], 1, 0)} (swa_full_tokens_ratio "
                          f"{_setting(r['swa_full_tokens_ratio'])}, from {scaled(r['sglang_profiled_tokens'], 1, 0)} "
                          f"tokens over every layer); a request of at most "
                          f"{scaled(r['sglang_longest_request'], 1, 0)} tokens")
        elif r.get("stage_linear_layers"):  # a hybrid: the attention block holds one recurrent state
            state = (f"linear-attention layers: {r['stage_linear_layers']}, each keeping "
                     f"{scaled(r['linear_state_bytes'], 1, 0)} bytes of state per request; ")
            console.print(state + (f"attention block size {scaled(r['vllm_block_size'], 1, 0)} tokens, the state's "
                                   f"page padded by {100 * float(r['state_page_padding']):.2f}%; "
                                   if r["kv_layers_per_stage"] else "no attention layers: a block is one request's "
                                   "state; ") + f"{r['kv_cache_groups']} KV cache groups")
        console.print(f"GPU KV cache size: {scaled(r[engine.tokens], 1, 0)} tokens; maximum concurrency for "
                      f"{scaled(v['seq_len'], 1, 0)} tokens per request: {float(r[engine.concurrency]):.2f}x")
        if not self.starts:
            budget, free, most = engine.startup
            console.print(f"does not start: its budget {gib(r[budget])} GiB is more than the {gib(r[free])} GiB free "
                          f"at startup (other_process_memory {gib(v['other_process_memory'])} GiB); "
                          f"gpu_memory_utilization can be at most {float(r[most]):.3f}")
        elif not self.fits:
            console.print(f"does not serve one request of {scaled(v['seq_len'], 1, 0)} tokens: {engine.advice}")

    @property
    def starts(self) -> bool:
        """Whether the engine starts: its budget fits in the memory free at startup (vLLM)."""
        startup = ENGINES[self.engine].startup
        return not startup or self.rules[startup[0]] <= self.rules[startup[1]]

    @property
    def fits(self) -> bool:
        """Whether the engine starts and one request of max_model_len (context_len) tokens fits
        the KV cache, as the engine checks it (vLLM: the sum over its layers, which with local or
        linear-attention layers can hold although the token count is below max_model_len)."""
        engine = ENGINES[self.engine]
        if engine.serves_one:
            memory, need = (self.rules[n] for n in engine.serves_one)
            return self.starts and 0 < memory and need <= memory
        return self.starts and self.rules[engine.longest or engine.tokens] >= self.scenario.values["seq_len"]


def _setting(value) -> str:
    """A header value: a fraction as a short decimal (0.9), a whole number as it is."""
    return f"{float(value):g}" if getattr(value, "q", 1) != 1 else str(value)


@dataclass(frozen=True)
class Refused:
    """A model an engine is not modelled for: ``engine`` (None: any) refuses where rule
    ``rule`` compares with ``value`` by ``op`` ("==" or ">").  Data, so that the calculator page
    (``memform web``) refuses what ``memform serve`` refuses."""

    engine: str | None
    rule: str
    op: str
    value: int
    message: str
    hint: str

    def holds(self, value) -> bool:
        """Whether the rule's value refuses (for this engine: the caller picks the engine's)."""
        return value == self.value if self.op == "==" else value > self.value


REFUSED = (
    Refused("trtllm", "linear_attention_layers", ">", 0,
            "--engine {engine}: the recurrent state of linear-attention (Mamba2, gated DeltaNet) "
            "layers is modelled for vLLM and SGLang only so far", "memform serve MODEL --engine vllm|sglang"),
    # vllm-project/vllm PR 24907 (merged 2025-09-15) removed every encoder-decoder model but
    # Whisper, Mllama among them; SGLang's and TensorRT-LLM's cross-attention pools are not read
    Refused(None, "cross_attention_layers", ">", 0,
            "--engine {engine}: the pools of cross-attention layers (Llama 3.2 Vision) are not "
            "modelled (vLLM has served no Mllama since v0.11: PR 24907 removed it)",
            "memform estimate MODEL --set mode=infer sizes transformers' cache, image states "
            "included (images_per_sequence)"),
    # vllm 0.34.0 v1/worker/extensible_kv_cache.py: sized after warm-up steps (one with prompt
    # logprobs) and CUDA graph capture, with a margin; read in docs/research/vllm-versions.md sec. 4
    Refused("vllm", "vllm_extensible_kv_cache", "==", 1,
            "vLLM 0.34 sizes its KV cache as an extensible one by default (after its warm-up steps and "
            "CUDA graph capture, with a margin), which is not modelled",
            "--set extensible_kv_cache=false for a server started with --no-enable-extensible-kv-cache, "
            "or --engine-version 0.33"),
    Refused("sglang", "attention_layers", "==", 0,
            "--engine {engine}: a model without attention layers has no KV pool to size",
            "memform serve MODEL --engine vllm"),
)


def serving_scenario(scenario: Scenario, engine: str = "vllm", explicit=frozenset()) -> Scenario:
    """``scenario`` as the engine runs it: inference, and unless ``seq_len`` is among the
    ``explicit`` settings, the model's whole context as max_model_len (vLLM's default is the
    config's max_position_embeddings)."""
    if engine not in ENGINES:
        raise UsageError(f"engine '{engine}' is not modelled yet", hint="memform serve --engine vllm|sglang|trtllm")
    if scenario.values.get("mode") == "train" and "mode" in explicit:
        raise UsageError("memform serve models inference: mode=train does not apply",
                         hint="drop --set mode=train, or use 'memform estimate' for training")
    for refused in REFUSED:
        if refused.engine in (None, engine) and refused.holds(scenario.evaluate(refused.rule)):
            raise UsageError(refused.message.format(engine=engine), hint=refused.hint)
    values = {"mode": "infer", "serving_engine": engine}
    if "seq_len" not in explicit:
        values["seq_len"] = scenario.evaluate("max_position_embeddings")
    return scenario.with_values(**values)


def serve(scenario: Scenario, engine: str = "vllm", formulas: bool = True, explicit=frozenset()) -> Serving:
    """Evaluate the engine's budget for ``scenario`` exactly (``explicit``: the names the
    user set, which keep their values).

    Examples
    --------
    >>> from engine import load
    >>> s = Scenario.create(load(), "llama3.1-8b", "h100-80g", values={"seq_len": 8192})
    >>> serve(s, formulas=False, explicit={"seq_len"}).rules["block_size"]
    16
    """
    scenario = serving_scenario(scenario, engine, explicit)
    spec = ENGINES[engine]
    listed = [n for n, _ in spec.breakdown + spec.counts]
    header_rules = [n for _, n in spec.header if n in scenario.library.rules]  # the inputs are in values
    names = dict.fromkeys(listed + header_rules + list(spec.extra))
    rules = {n: scenario.evaluate(n) for n in names}
    shown = {}
    if formulas:
        shown = {n: show_text(formula(scenario, n, keep=KEPT, opaque=OPAQUE, rebound=REBOUND)) for n in listed}
    return Serving(scenario, engine, rules, shown)


# ---------------------------------------------------------------- solving over serving
#: tensor-parallel sizes tried by --min-tp-for (the engines shard over powers of two)
TP_SIZES = (1, 2, 4, 8, 16, 32, 64)
#: the input whose multiples --max-len-for tries as max_model_len: the engine's block or page
LENGTH_STEP = {"vllm": "block_size", "sglang": "page_size", "trtllm": "tokens_per_block"}
#: the concurrency --min-tp-for and --max-len-for take
MAX_REQUESTS = 10**6


@dataclass
class ServingSolve:
    """The answer of a serving question: the value found, the serving budget there, and the
    concurrency at the values tried (what the answer rests on)."""

    question: str
    value: int
    result: Serving
    tried: list  # (value, concurrency)


def _concurrency(result: Serving):
    return result.rules[ENGINES[result.engine].concurrency]


def _valid_tp(scenario: Scenario, tp: int) -> bool:
    """Whether the engine can shard the model over ``tp`` GPUs (heads divide, or tp is a multiple
    of the key/value heads, which the engines replicate; layout.check)."""
    try:
        check(scenario.with_values(tp=tp, mode="infer"))
    except EngineError:
        return False
    return True


def min_tp_for(scenario: Scenario, engine: str, explicit, requests: int) -> ServingSolve:
    """The smallest tensor-parallel size at which ``requests`` requests of max_model_len tokens
    fit the engine's KV cache at once; an InfeasibleError naming the best one tried if none does."""
    tried, best = [], None
    for tp in TP_SIZES:
        if not _valid_tp(scenario, tp):
            continue
        result = serve(scenario.with_values(tp=tp), engine, formulas=False, explicit=set(explicit) | {"tp"})
        tried.append((tp, _concurrency(result)))
        best = result
        if result.starts and _concurrency(result) >= requests:
            return ServingSolve(f"smallest tp for {requests:,} requests", tp, result, tried)
    at = ", ".join(f"tp={t}: {float(c):,.2f}x" for t, c in tried) or "no tp divides the model's heads"
    length = int(serving_scenario(scenario, engine, explicit).values["seq_len"])
    raise InfeasibleError(f"{requests:,} requests of {length:,} tokens do "
                          f"not fit at any tp up to {TP_SIZES[-1]} ({at})",
                          hint="lower max_model_len or the concurrency, or add pipeline stages (--pp)")


def max_len_for(scenario: Scenario, engine: str, explicit, requests: int) -> ServingSolve:
    """The longest max_model_len (a multiple of the engine's block or page size, at most the
    model's max_position_embeddings) at which ``requests`` requests fit at once: concurrency
    falls as the length grows, so a bisection over whole blocks."""
    step = int(scenario.evaluate(LENGTH_STEP[engine]))
    top = int(scenario.evaluate("max_position_embeddings")) // step
    names = set(explicit) | {"seq_len"}

    def at(blocks: int) -> Serving:
        return serve(scenario.with_values(seq_len=blocks * step), engine, formulas=False, explicit=names)

    tried = []
    low = at(1)
    tried.append((step, _concurrency(low)))
    if not low.starts:
        raise InfeasibleError("the engine does not start: its budget is more than the memory free at startup",
                              hint="lower gpu_memory_utilization (see max_gpu_memory_utilization)")
    if _concurrency(low) < requests:
        raise InfeasibleError(f"fewer than {requests:,} requests fit even at max_model_len={step} "
                              f"({float(_concurrency(low)):,.2f}x)",
                              hint="raise gpu_memory_utilization or tp, or lower the concurrency")
    lo, hi, best = 1, top, low  # at(lo) holds; find the last blocks count that holds
    while lo < hi:
        mid = (lo + hi + 1) // 2
        result = at(mid)
        tried.append((mid * step, _concurrency(result)))
        if _concurrency(result) >= requests:
            lo, best = mid, result
        else:
            hi = mid - 1
    return ServingSolve(f"longest max_model_len for {requests:,} requests", lo * step, best, sorted(tried))
