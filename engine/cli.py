"""The ``memform`` command line (argparse).

Every error a user can cause is printed as one located message (no traceback) and
sets the exit code: 2 for usage errors, 1 for failed checks or infeasible queries.
"""
from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .answers import quick
from .answers.report import gb, gib, json_number
from .errors import (EngineError, ErrorGroup, ResourceLimitError, UnknownNameError, UsageError, did_you_mean,
                     shown)
from .lang.constants import MAX_BITS
from .library import layout
from .lazy import lazy
from .paths import DOC_FILES

# What only some commands need (sympy above all: an estimate the cache answers never imports
# it) is bound here and executed on first use (engine.lazy).
cache = lazy("engine.compile.cache")
scenarios = lazy("engine.compile.model")
hfconfig = lazy("engine.library.hfconfig")
megatron = lazy("engine.library.megatron")
hub = lazy("engine.library.hub")
names = lazy("engine.lang.names")
estimates = lazy("engine.answers.estimate")
serving = lazy("engine.answers.serve")
solving = lazy("engine.answers.solve")
planning = lazy("engine.answers.plan")
checks = lazy("engine.answers.checks")
exact = lazy("engine.compile.exact")
webpage = lazy("engine.present.web")
measuring = lazy("engine.answers.measure")
display = lazy("engine.present.display")
docs = lazy("engine.present.docs")
plots = lazy("engine.present.plot")
rich_progress = lazy("rich.progress")
metadata = lazy("importlib.metadata")  # --version only

USAGE_EXAMPLES = """examples:
  memform estimate llama2-7b --gpu h100-80g --set micro_batch=4 --set seq_len=4096
  memform estimate llama2-70b --set n_params=70e9 --set zero_stage=3 --set dp=8 --json
  memform serve llama3.1-8b --engine vllm --gpu h100-80g --set max_model_len=8192
  memform check
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit 2 itself
        raise UsageError(message, hint=f"see '{self.prog} --help'")


class _SetOption(argparse.Action):
    """``--stack X`` is ``--set stack=X``: appended to the same list, in command-line order."""

    def __init__(self, option_strings, dest, const, **kwargs):
        super().__init__(option_strings, dest, const=const, **kwargs)

    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), f"{self.const}={value}"])


class _Unbuilt:
    """The parser of a command this command line does not name (:func:`build_parser`'s
    ``only``): what is added to it is dropped."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``only`` (the command a command line names) the other
    commands' parsers are not built (a twentieth of an answer's time)."""
    parser = _Parser(prog="memform", description="GPU memory of LLM training and serving, "
                     "with the formula behind every number.", epilog=USAGE_EXAMPLES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def command(name, **kwargs):
        return commands.add_parser(name, **kwargs) if only in (None, name) else _Unbuilt()

    common = _Parser(add_help=False)
    common.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                        help="set an input, option or rule (repeatable): --set zero_stage=3")
    common.add_argument("--stack", dest="sets", action=_SetOption, const="stack", metavar="STACK",
                        help="training framework whose allocations the figures follow: generic (default), "
                             "megatron, hf (Trainer / accelerate under autocast), deepspeed (ZeRO) or fsdp2 (PyTorch fully_shard); "
                             "the same as --set stack=STACK")
    common.add_argument("--rules", action="append", default=[], metavar="FILE",
                        help="a rule file of your own, loaded beside the library (may 'override rule')")

    est = command("estimate", parents=[common], help="per-GPU memory breakdown of a model")
    est.add_argument("model", metavar="MODEL",
                     help="a model preset name (see 'memform presets'), a Hugging Face id (org/name, from "
                          "the local cache or the Hub) or a Hugging Face config.json")
    est.add_argument("--gpu", help="a GPU preset: shows whether the total fits")
    est.add_argument("--capacity", metavar="BYTES", help="GPU capacity instead of --gpu, e.g. 80GB")
    est.add_argument("--json", action="store_true", help="print JSON (errors too, as {\"error\": ...})")
    est.add_argument("--check", action="store_true",
                     help="exit 1 when the job does not fit the GPU (the total or the step's peak)")
    est.add_argument("--no-divisibility", action="store_true",
                     help="accept layouts where tp does not divide the heads, pp the layers or ep the experts")

    slv = command("solve", parents=[common], help="best whole value of an unknown that fits")
    slv.add_argument("direction", choices=["max", "min"], metavar="max|min")
    slv.add_argument("unknown", metavar="UNKNOWN", help="an input: micro_batch, seq_len, dp, tp, pp ...")
    slv.add_argument("model", metavar="MODEL")
    slv.add_argument("--gpu")
    slv.add_argument("--capacity", metavar="BYTES")
    slv.add_argument("--target", default="total", help="the rule that must fit (default: total)")
    slv.add_argument("--step", default="1", choices=["1", "pow2"], help="candidate values: every whole value or powers of two")
    slv.add_argument("--multiple-of", type=int, default=1, metavar="K", help="only multiples of K")
    slv.add_argument("--no-divisibility", action="store_true",
                     help="drop the default constraints (tp divides the heads, pp divides the layers)")
    slv.add_argument("--json", action="store_true")

    srv = command("serve", parents=[common],
                         help="the KV cache a serving engine gets: budget, reserves, blocks, tokens, concurrency")
    srv.add_argument("model", metavar="MODEL", help="a model preset or a Hugging Face config.json")
    srv.add_argument("--engine", default="vllm", choices=["vllm", "sglang", "trtllm"],
                     help="serving engine (default: vllm; trtllm: TensorRT-LLM's PyTorch backend)")
    srv.add_argument("--engine-version", metavar="X.Y",
                     help="the engine's release, e.g. 0.29.0: the defaults and terms that changed between releases "
                          "follow it (vLLM 0.10 to 0.34, default 0.19: --set vllm_version=29; SGLang 0.4.1 to 0.5.23, "
                          "default 0.5.23: --set sglang_version=508 for 0.5.8)")
    srv.add_argument("--gpu", help="a GPU preset (its total memory)")
    srv.add_argument("--capacity", metavar="BYTES", help="total device memory instead of --gpu, e.g. 80GB")
    srv.add_argument("--tp", type=int, metavar="N", help="tensor-parallel size (vLLM's --tensor-parallel-size)")
    srv.add_argument("--pp", type=int, metavar="N", help="pipeline-parallel size (vLLM's --pipeline-parallel-size)")
    srv.add_argument("--json", action="store_true", help="print JSON (errors too, as {\"error\": ...})")
    want = srv.add_mutually_exclusive_group()
    want.add_argument("--min-tp-for", type=int, metavar="C",
                      help="the smallest tp at which C requests of max_model_len tokens fit at once")
    want.add_argument("--max-len-for", type=int, metavar="C",
                      help="the longest max_model_len at which C requests fit at once")

    shw = command("show", parents=[common], help="the simplified symbolic expression of a rule")
    shw.add_argument("rule", metavar="RULE")
    shw.add_argument("model", metavar="MODEL", nargs="?")
    shw.add_argument("--keep", action="append", default=[], metavar="NAME",
                     help="keep this input symbolic too (micro_batch and seq_len are kept unless set)")
    shw.add_argument("--latex", action="store_true")

    pln = command("plan", parents=[common], help="parallel layouts that fit on N GPUs, ranked")
    pln.add_argument("model", metavar="MODEL")
    pln.add_argument("--gpu")
    pln.add_argument("--capacity", metavar="BYTES")
    pln.add_argument("--gpus", type=int, required=True, metavar="N")
    pln.add_argument("--sort", default="model_parallel", choices=["model_parallel", "micro_batch", "memory"])
    pln.add_argument("--top", type=int, default=10)
    pln.add_argument("--max-micro-batch", type=int, default=256)
    pln.add_argument("--json", action="store_true")
    pln.add_argument("--no-divisibility", action="store_true",
                     help="accept uneven layouts: tp not dividing the heads, pp the layers, ep the experts")

    nms = command("names", help="inputs, options, rules and the aliases of other tools' names")
    nms.add_argument("pattern", metavar="PATTERN", nargs="?",
                     help="part of a name, or a glob (zero, '*_bytes'); default: all")
    nms.add_argument("--rules", action="append", default=[], metavar="FILE")
    nms.add_argument("--json", action="store_true", help="print JSON")

    chk = command("check", help="parse the library (and FILEs) and test every check")
    chk.add_argument("files", nargs="*", metavar="FILE", help="rule files loaded beside the library")
    chk.add_argument("--samples", type=int, default=2000, help="scenarios per model preset per check")

    pre = command("presets", help="list the model and GPU presets")
    pre.add_argument("--kind", choices=["model", "gpu"], help="only model or only GPU presets")
    pre.add_argument("--family", metavar="TEXT",
                     help="only presets whose name or description contains TEXT (any case), e.g. h100, amd, apple")
    pre.add_argument("--min-memory", metavar="SIZE",
                     help="only GPUs with at least SIZE of memory, e.g. 24GB or 80GiB (a unit is required)")

    doc = command("docs", help="the formula reference, generated from the rules")
    doc.add_argument("--format", default="md", choices=["md", "latex", "html"],
                     help="Markdown (default), a standalone LaTeX document or one HTML page with MathML")
    doc.add_argument("--out", metavar="DIR", help="write DIR/reference.{md,tex,html} (default: print it)")
    doc.add_argument("--check", action="store_true",
                     help="exit 1 if the reference in --out (default: the repository's docs/) is stale")

    plt = command("plot", parents=[common], help="memory breakdown against seq_len or micro_batch (PNG)")
    plt.add_argument("model", metavar="MODEL")
    plt.add_argument("--x", required=True, choices=["seq_len", "micro_batch"], help="the variable on the x axis")
    plt.add_argument("--range", required=True, metavar="LOW:HIGH", help="its values, e.g. 512:131072")
    plt.add_argument("--gpu", help="a GPU preset: draws its capacity and the largest value that fits")
    plt.add_argument("--capacity", metavar="BYTES")
    plt.add_argument("--out", metavar="FILE", help="image file (default: MODEL-X.png; .svg and .pdf work too)")
    cmp = command("compile", parents=[common],
                         help="rules as a program of the names that vary: Python (exact), numpy or JavaScript source")
    cmp.add_argument("model", metavar="MODEL")
    cmp.add_argument("--gpu")
    cmp.add_argument("--capacity", metavar="BYTES")
    cmp.add_argument("--vary", required=True, metavar="NAMES",
                     help="the inputs, options or rules the program takes, comma-separated: micro_batch,seq_len")
    cmp.add_argument("--rule", dest="rule_names", action="append", metavar="RULE",
                     help="a rule the program gives (repeatable; default: total)")
    cmp.add_argument("--target", default="python", choices=["python", "numpy", "js"],
                     help="python: exact ints and fractions; numpy: float64 over arrays; js: exact rationals (BigInt)")
    cmp.add_argument("--out", metavar="FILE", help="write the program here (default: print it)")
    web = command("web", help="the calculator as a static web page (HTML, script, style), generated from the rules")
    web.add_argument("--out", required=True, metavar="DIR", help="write DIR/index.html (and, with --separate, "
                     "DIR/memform.js and DIR/memform.css)")
    web.add_argument("--rules", action="append", default=[], metavar="FILE",
                     help="a rule file of your own, compiled into the page beside the library (may 'override rule')")
    web.add_argument("--title", default="memform", help="the page's title (default: memform)")
    web.add_argument("--separate", action="store_true",
                     help="the script and style as files of their own (memform.js, memform.css) beside index.html, "
                          "for a host whose content security policy refuses inline scripts; by default they are "
                          "inside index.html (one file, and a sooner first render)")
    web.add_argument("--config", dest="configs", action="append", default=[], metavar="CONFIG",
                     help="a Hugging Face config.json (a path or an org/name id), a model of the page beside the "
                          "presets, read as 'memform estimate CONFIG' reads it (repeatable)")
    msr = command("measure", help="measure a real PyTorch model (needs torch) beside memform's prediction")
    msr.add_argument("model", metavar="MODEL_OR_CONFIG", help="a model preset or a Hugging Face config.json")
    msr.add_argument("--set", dest="sets", action="extend", nargs="+", default=[], metavar="NAME=VALUE",
                     help="inputs and options: micro_batch, seq_len, precision (fp32, bf16; bf16_mixed runs the forward under torch.autocast), attention "
                          "(eager, flash = sdpa), recompute (none, full = gradient checkpointing; recompute_method=block "
                          "checkpoints the first recompute_num_layers layers, uniform groups of that many), optimizer")
    msr.add_argument("--rules", action="append", default=[], metavar="FILE")
    msr.add_argument("--json", action="store_true", help="print JSON")
    cal = command("calibrate", help="fit the per-layer activation coefficients to measurements (needs torch)")
    cal.add_argument("model", metavar="MODEL_OR_CONFIG", help="a model preset or a Hugging Face config.json")
    cal.add_argument("--set", dest="sets", action="extend", nargs="+", default=[], metavar="NAME=VALUE",
                     help="precision (fp32, bf16; bf16_mixed runs the forward under torch.autocast), attention (eager, flash = sdpa) and the architecture")
    cal.add_argument("--rules", action="append", default=[], metavar="FILE")
    cal.add_argument("--out", metavar="FILE", help="write the rule file here (default: print it)")
    return parser


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, read only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(f"memform {_version()}\n")
        parser.exit()


def _version() -> str:
    try:
        return metadata.version("memform")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "(source tree)"


#: the notes of the command running, while its answer is being kept (see :func:`_answered`)
_NOTES: list[str] | None = None


def _note(text: str) -> None:
    if _NOTES is not None:
        _NOTES.append(text)
    sys.stderr.write(f"memform: note: {text}\n")


def _is_file(path: str) -> bool:
    """Whether ``path`` names a file; a name the OS refuses (too long ...) is a usage error."""
    try:
        return Path(path).is_file()
    except OSError as exc:
        raise UsageError(f"cannot use '{shown(path, 255)}' as a path: {exc.strerror}") from None
    except ValueError:  # an embedded NUL
        raise UsageError(f"'{shown(path, 255)}' is not a valid path") from None




def _library(files):
    for f in files:
        if not _is_file(f):
            raise UsageError(f"no such rule file: '{shown(f, 255)}'")
    return cache.load(extra=files)


def is_config_path(lib, model: str) -> bool:
    """Whether MODEL names a config.json rather than a preset: it looks like a path (a
    folder separator, a ``.json`` ending), or it is a file and no preset has its name."""
    if "/" in model or model.endswith(".json") or (Path(model).suffix and _is_file(model)):
        return True
    if lib is not None and ("model", model) in lib.presets:
        if _is_file(model):
            _note(f"'{shown(model, 255)}' is a model preset; for the file of that name write ./{shown(model, 255)}")
        return False
    return _is_file(model)


def _capacity(lib, text: str):
    """``--capacity`` needs a byte unit: a bare number is refused, with what it could mean."""
    name, value = scenarios.parse_setting(lib, f"capacity={text}")
    if not any(c.isalpha() for c in text):
        n = shown(text.strip())
        raise UsageError(f"--capacity {n} has no unit",
                         hint=f"write {n}GB (10^9 bytes) or {n}GiB (2^30 bytes; a card sold as '{n} GB' has "
                              f"{n} GiB), or choose --gpu (see 'memform presets')")
    return value


def _scenario(lib, args, model):
    notes: list[str] = []
    values = dict(scenarios.parse_setting(lib, text, notes) for text in args.sets)
    for text in notes:
        _note(text)
    gpu = getattr(args, "gpu", None)
    capacity = getattr(args, "capacity", None)
    if gpu and capacity:
        raise UsageError("give --gpu or --capacity, not both")
    if capacity:
        values["capacity"] = _capacity(lib, capacity)
    config_values, checkpoint = {}, None
    if model is not None and is_config_path(lib, model):
        path = model
        if not _is_file(model):
            if not hub.looks_like_hub_id(model):
                raise UsageError(f"no such file: '{shown(model, 255)}'",
                                 hint="MODEL is a preset (see 'memform presets'), a Hugging Face id (org/name) "
                                      "or the path of a Hugging Face config.json")
            path = str(hub.resolve_config(model))  # the local Hugging Face cache first, then the Hub
        if megatron.is_args_file(path):
            margs = megatron.read_args(path, lib)
            for text in margs.notes:
                _note(f"{shown(model, 255)}: {text}")
            if margs.unknown:
                _note(f"{shown(model, 255)}: arguments not modelled (not used): " + ", ".join(margs.unknown))
            config_values, model = margs.values, None
        else:
            config = hfconfig.read_config(path, lib)
            if config.unknown:
                _note(f"{shown(model, 255)}: fields not understood (not used): " + ", ".join(config.unknown))
            config_values, model = config.values, None
            checkpoint = _checkpoint(Path(path).parent)
    elif model is not None:
        _model_preset(lib, model)
    if gpu is not None:
        lib.preset("gpu", gpu)
    scenario = scenarios.Scenario.create(lib, model, gpu, values=config_values)
    if model is None and config_values:
        scenario = scenarios.Scenario(lib, scenario.values, getattr(args, "model", None), gpu)
    scenario = scenario.with_values(**values) if values else scenario
    if config_values and checkpoint is not None:
        _note(_checkpoint_note(scenario, checkpoint))
    if not getattr(args, "no_divisibility", True):
        layout.check(scenario)
    return scenario


def _checkpoint(folder: Path):
    """The safetensors checkpoint beside a config.json, read from its headers, or None (none
    there, or one that cannot be read: said in a note, the estimate goes on from the config)."""
    try:
        return hub.checkpoint_summary(folder, allow_partial=True) if hub.has_checkpoint(folder) else None
    except EngineError as exc:
        _note(f"the checkpoint beside the config was not read: {exc.message}")
        return None


def _checkpoint_note(scenario, ckpt) -> str:
    """What the checkpoint stores, against what the config describes: the parameter count for
    a checkpoint in its model dtype, the weights' bytes for a quantised one (whose packed words
    and scales make its element count meaningless as parameters)."""
    dtypes = ", ".join(f"{d} {n:,} B" for d, n in sorted(ckpt.bytes_by_dtype.items()))
    head = (f"checkpoint beside the config: {len(ckpt.files)} file(s), {ckpt.tensors:,} tensors, "
            f"{ckpt.total_bytes:,} bytes as stored ({dtypes})")
    if ckpt.missing:
        head += f"; {len(ckpt.missing)} of its {len(ckpt.files)} files are not here, the counts cover the others"
        return head
    if scenario.values.get("weight_dtype") not in ("fp32", "bf16", "fp16", None):
        whole = scenario.with_values(mode="infer", tp=1, pp=1, ep=1, finetune="full")
        predicted = int(whole.evaluate("weights"))
        diff = ckpt.total_bytes - predicted
        return (f"{head}; quantised: memform's weights of the config are {predicted:,} bytes"
                + (" (the same)" if diff == 0 else f" ({diff / predicted:+.2%} stored)"))
    n = int(scenario.evaluate("n_params"))
    if ckpt.params == n:
        return f"{head}: {ckpt.params:,} parameters, as the config gives"
    return (f"{head}: config and checkpoint disagree: the config gives {n:,} parameters, the checkpoint "
            f"stores {ckpt.params:,} ({ckpt.params - n:+,}: layers the model type does not count, such as "
            "a multi-token-prediction layer or a vision encoder, or weights stored twice)")


def _model_preset(lib, model: str) -> None:
    """Refuse an unknown MODEL with the nearest preset and what else MODEL may be."""
    if ("model", model) in lib.presets:
        return
    known = sorted(n for k, n in lib.presets if k == "model")
    near = did_you_mean(model.lower(), known)
    raise UnknownNameError(f"unknown model '{shown(model)}'",
                           hint=near or "MODEL is a preset (see 'memform presets') or the path of a Hugging "
                           "Face config.json")


def cmd_estimate(args, out) -> int:
    if args.check and not (args.gpu or args.capacity or any(t.split("=", 1)[0].strip() == "capacity"
                                                             for t in args.sets)):
        raise UsageError("--check needs a capacity", hint="give --gpu GPU or --capacity 80GB")
    report = quick.report(args)  # exact numbers without sympy, when the cache can answer
    if report is None:
        lib = _library(args.rules)
        report = estimates.estimate(_scenario(lib, args, args.model)).report(formulas=not args.json)
        if not args.rules:
            quick.remember(report)  # the formula column, for the next estimate of this setup
    if args.json:
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        report.print_table(out)
    if args.check and report.capacity is not None:  # (a capacity pinned with --set counts too)
        verdict = report.to_json()
        if not (verdict["fits"] and verdict["fits_at_peak"] is not False):
            return 1
    return 0


def cmd_serve(args, out) -> int:
    lib = _library(args.rules)
    if not (args.gpu or args.capacity):
        raise UsageError("serve needs the device's memory", hint="give --gpu GPU or --capacity 80GiB")
    for flag in ("tp", "pp"):
        value = getattr(args, flag)
        if value is not None:
            args.sets.append(f"{flag}={value}")
    if args.engine_version is not None:
        args.sets.append(_engine_version(lib, args.engine, args.engine_version))
    explicit = {scenarios.parse_setting(lib, text)[0] for text in args.sets}
    requests = args.min_tp_for if args.min_tp_for is not None else args.max_len_for
    if requests is None:
        result = serving.serve(_serving_scenario(lib, args), args.engine, formulas=not args.json, explicit=explicit)
        if args.json:
            out.write(json.dumps(result.to_json(), indent=2) + "\n")
        else:
            result.print_table(out)
        return 0 if result.fits else 1
    return _serve_solve(lib, args, out, explicit, requests)


#: the option that holds each engine's release, and how many of its numbers after "0." it
#: tells apart: vLLM's minor version (0.29.x: 29), SGLang's minor and patch ones (0.5.3: 503)
ENGINE_VERSIONS = {"vllm": ("vllm_version", 1), "sglang": ("sglang_version", 2)}


def _engine_version(lib, engine: str, text: str) -> str:
    """``--engine-version 0.29.0`` as the setting it stands for (``vllm_version=29``; SGLang's
    ``0.5.3.post1``: ``sglang_version=503``)."""
    if engine not in ENGINE_VERSIONS:
        raise UsageError(f"--engine-version: the releases of {engine} are not told apart yet",
                         hint="pin the settings your release logs instead (memform serve --help)")
    option, parts = ENGINE_VERSIONS[engine]

    def written(code: int) -> str:
        return "0." + (str(code) if parts == 1 else f"{code // 100}.{code % 100}")

    known = sorted(int(c) for c in lib.options[option].choices)
    found = re.fullmatch(r"v?0\.(\d+)(?:\.(\d+))?(?:\.\d+)*(?:[.+-]?(?:rc|post|dev)[0-9a-z.+-]*)?", text.strip())
    code = None
    if found is not None and (parts == 1 or found.group(2) is not None):
        code = int(found.group(1)) if parts == 1 else int(found.group(1)) * 100 + int(found.group(2))
    if code not in known:
        listed = f"{written(known[0])} to {written(known[-1])}" if parts == 1 else ", ".join(map(written, known))
        raise UsageError(f"--engine-version {shown(text, 40)}: not a modelled {engine} release",
                         hint=f"{engine} {listed}, written as {written(known[-1])} or {written(known[-1])}.0")
    return f"{option}={code}"


def _serving_scenario(lib, args, check: bool = True):
    """The scenario ``serve`` starts from, its layout checked as the engines shard the model:
    heads and layers whole, the key/value heads replicated where tp is a multiple of them."""
    args.no_divisibility = True
    scenario = _scenario(lib, args, args.model)
    if check:
        layout.check(scenario.with_values(mode="infer"))
    return scenario


def _serve_solve(lib, args, out, explicit, requests: int) -> int:
    """``serve --min-tp-for C`` / ``--max-len-for C``: the answer, what it rests on, and the
    engine's breakdown there."""
    if not 1 <= requests <= serving.MAX_REQUESTS:
        raise UsageError(f"the concurrency takes a whole number from 1 to {serving.MAX_REQUESTS:,}, not {requests}")
    if args.min_tp_for is not None and args.tp is not None:
        raise UsageError("--min-tp-for searches tp: drop --tp")
    if args.max_len_for is not None and "seq_len" in explicit:
        raise UsageError("--max-len-for searches max_model_len: drop --set max_model_len")
    scenario = _serving_scenario(lib, args, check=args.min_tp_for is None)  # min_tp_for checks each tp
    solver = serving.min_tp_for if args.min_tp_for is not None else serving.max_len_for
    answer = solver(scenario, args.engine, explicit, requests)
    result = answer.result
    if args.json:
        data = result.to_json()
        data["solve"] = {"question": answer.question, "value": answer.value,
                         "tried": [[v, json_number(c)] for v, c in answer.tried]}
        out.write(json.dumps(data, indent=2) + "\n")
        return 0
    tried = ", ".join(f"{v:,}: {float(c):,.2f}x" for v, c in answer.tried)
    if args.min_tp_for is not None:
        out.write(f"smallest tp for {requests:,} requests of {int(result.scenario.values['seq_len']):,} tokens: "
                  f"tp={answer.value}   (maximum concurrency at each tp tried: {tried})\n")
    else:
        out.write(f"longest max_model_len for {requests:,} requests: {answer.value:,} tokens   "
                  f"(maximum concurrency at each length tried: {tried})\n")
    serving.serve(result.scenario, args.engine, explicit=set(explicit) | {"tp", "seq_len"}).print_table(out)
    return 0


def _show(expr) -> str:
    return estimates.show_text(expr)


def cmd_solve(args, out) -> int:
    lib = _library(args.rules)
    scenario = _scenario(lib, args, args.model)
    if args.multiple_of < 1:
        raise UsageError("--multiple-of takes a whole number >= 1")
    r = solving.solve(scenario, args.direction, args.unknown, target=args.target, step=args.step,
              multiple_of=args.multiple_of, divisibility=not args.no_divisibility)
    return _print_solve(args, r, out)


def _print_solve(args, r, out) -> int:
    """A :class:`~engine.answers.search.SolveResult` as ``memform solve`` prints it."""
    if args.json:
        out.write(json.dumps(r.to_json(), indent=2) + "\n")
        return 0
    where = args.gpu or f"{gb(r.capacity)} GB"
    out.write(f"{r.direction} {r.unknown} = {r.value}   ({shown(args.model, 255)} on {where}, {r.target} <= usable_memory)\n")
    out.write(f"closed form: {r.closed_form}\n")
    out.write(f"method: {r.method}" + (" (the closed form's bound reproduces the exact search)\n"
                                       if r.method == "closed-form" else " (exact integer search)\n"))
    out.write(f"at {r.unknown}={r.value}: {gb(r.bytes_at_value)} GB ({gib(r.bytes_at_value)} GiB) "
              f"<= {gb(r.capacity)} GB ({gib(r.capacity)} GiB)\n")
    if r.next_value is not None:
        out.write(f"at {r.unknown}={r.next_value}: {gb(r.bytes_at_next)} GB ({gib(r.bytes_at_next)} GiB) > usable_memory\n")
    for c in r.constraints:
        out.write(f"constraint: {c}\n")
    return 0


def cmd_show(args, out) -> int:
    lib = _library(args.rules)
    scenario = _scenario(lib, args, args.model)
    expr = estimates.show(scenario, args.rule, keep=quick.show_keep(args))
    if args.latex:
        out.write(display.latex(expr) + "\n")
    else:
        out.write(f"{args.rule} = {_show(expr)}\n")
    return 0


def cmd_plan(args, out) -> int:
    planning.validate_plan_args(args.gpus, args.top, args.max_micro_batch)
    lib = _library(args.rules)
    scenario = _scenario(lib, args, args.model)
    with _LazyProgress() as progress:
        rows = planning.plan(scenario, args.gpus, max_micro_batch=args.max_micro_batch, sort=args.sort,
                    progress=progress, divisibility=not args.no_divisibility)
    evaluator = planning.layout_evaluator(scenario) if rows else None
    listed = [r for r in (planning.exact(scenario, row, evaluator) for row in rows[:args.top]) if r is not None]
    return _print_plan(args, rows, listed, out)


def _print_plan(args, rows: list, listed: list, out) -> int:
    """What plan prints: the count of layouts that fit and the first ``--top`` of them."""
    if args.json:
        out.write(json.dumps({"feasible": len(rows), "layouts": [r.to_json() for r in listed]}, indent=2) + "\n")
        return 0 if rows else 1
    if not rows:
        out.write(f"no layout of {args.gpus} GPUs fits {shown(args.model, 255)}\n")
        return 1
    table = Table(title=Text(f"{shown(args.model, 255)} on {args.gpus} x {args.gpu or 'GPU'}: {len(rows)} layouts "
                             f"fit (sorted by {args.sort})"), title_justify="left")
    for col in ("tp", "pp", "dp", "ZeRO", "recompute", "micro_batch", "per-GPU GB", "headroom GB"):
        table.add_column(col, justify="right")
    for r in listed:
        table.add_row(str(r.tp), str(r.pp), str(r.dp), str(r.zero_stage), r.recompute, str(r.micro_batch),
                      gb(r.total), gb(r.headroom))
    Console(file=out, width=120, highlight=False, emoji=False).print(table)
    return 0


class _LazyProgress:
    """A progress bar on stderr that appears only once the work has taken over a second."""

    def __enter__(self):
        self.start, self.bar, self.task = time.monotonic(), None, None
        return self

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None and time.monotonic() - self.start > 1:
            self.bar = rich_progress.Progress(transient=True)
            self.bar.start()
            self.task = self.bar.add_task("layouts", total=total)
        if self.bar is not None:
            self.bar.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def cmd_names(args, out) -> int:
    lib = _library(args.rules)
    rows = names.entries(lib, args.pattern)
    if args.json:
        out.write(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
        return 0 if rows else 1
    if not rows:
        out.write(f"no name matches '{shown(args.pattern)}'\n")
        return 1
    table = Table(box=None, pad_edge=False)
    for col in ("name", "kind", "unit or choices", "default", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(Text(x) for x in (r.name, r.kind, r.unit, r.default, r.doc)))
    Console(file=out, width=max(120, Console().width), highlight=False, emoji=False).print(table)
    return 0


def cmd_check(args, out) -> int:
    checks.validate_samples(args.samples)  # before the library is loaded
    lib = _library(args.files)
    results = checks.run_checks(lib, samples=args.samples)
    failed = 0
    for r in results:
        if r.ok:
            out.write(f"ok    {r.check.doc} ({r.samples} scenarios)\n")
        else:
            failed += 1
            span = r.check.span
            out.write(f"FAIL  {r.check.doc}\n      {span.file}:{span.line}: {r.failure}\n")
    out.write(f"{len(lib.rules)} rules, {len(lib.inputs)} inputs, {len(lib.options)} options, "
              f"{len(results)} checks: {len(results) - failed} passed, {failed} failed\n")
    return 1 if failed else 0


def cmd_presets(args, out) -> int:
    """List the presets, filtered by --kind, --family and --min-memory (all of them must hold)."""
    if args.min_memory is not None and args.kind == "model":
        raise UsageError("--min-memory selects GPU presets; it cannot be combined with --kind model")
    lib = _library([])
    least = None
    if args.min_memory is not None:  # parsed as --capacity is: a byte size with a unit
        text = args.min_memory
        if not any(c.isalpha() for c in text):
            n = shown(text.strip())
            raise UsageError(f"--min-memory {n} has no unit",
                             hint=f"write {n}GB (10^9 bytes) or {n}GiB (2^30 bytes)")
        try:
            least = scenarios.parse_setting(lib, f"capacity={text}")[1]
        except EngineError as exc:
            raise UsageError(f"--min-memory {shown(text)} is not a memory size: {exc.message}",
                             hint="e.g. --min-memory 24GB or --min-memory 80GiB") from None
    family = None if args.family is None else args.family.casefold()
    rows = []
    for (kind, name), preset in sorted(lib.presets.items()):
        if args.kind is not None and kind != args.kind:
            continue
        if family is not None and family not in name.casefold() and family not in (preset.doc or "").casefold():
            continue
        if least is not None:
            capacity = next((lib.check_value(n, v, span) for n, v, span in preset.settings if n == "capacity"), None)
            if kind != "gpu" or capacity is None or capacity < least:
                continue
        rows.append((kind, name, preset.doc))
    if not rows:
        out.write("no preset matches\n")
        return 1
    width = max(12, *(len(name) for _, name, _ in rows))
    out.write("".join(f"{kind:6} {name:{width}} {doc}\n" for kind, name, doc in rows))
    return 0


def cmd_docs(args, out) -> int:
    if args.check:
        path = docs.check(_library([]), args.out or docs.DOCS_DIR, args.format)  # StaleDocsError: exit 1
        out.write(f"{docs.display_path(path)} is up to date\n")
        return 0
    if args.out is None:
        out.write(_reference(args.format))
        return 0
    path = Path(args.out) / DOC_FILES[args.format]
    try:  # the folder first: a path that cannot be written is an error before seconds of rendering
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write '{path}': {exc.strerror}") from None
    text = _reference(args.format)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write '{path}': {exc.strerror}") from None
    out.write(f"wrote {path}\n")
    return 0


def _reference(fmt: str) -> str:
    """The formula reference in ``fmt``: as rendered from these sources before (no sympy), or
    rendered now and kept."""
    text = quick.kept_docs(fmt)
    if text is None:
        text = docs.render(_library([]), fmt)
        quick.keep_docs(fmt, text)
    return text


def cmd_plot(args, out) -> int:
    lo, hi = plots.parse_range(args.range)
    lib = _library(args.rules)
    scenario = _scenario(lib, args, args.model)
    path = Path(args.out or f"{args.model}-{args.x}.png")
    _, data = plots.plot(scenario, args.x, lo, hi, path)
    out.write(f"wrote {path}\n")
    if data.best is not None:
        out.write(f"max {args.x} = {data.best:,}   ({shown(args.model, 255)} on {args.gpu or 'the capacity'}, total <= usable_memory)\n")
    elif data.note:
        out.write(f"{data.note}\n")
    return 0


def cmd_compile(args, out) -> int:
    lib = _library(args.rules)
    scenario = _scenario(lib, args, args.model)
    varying = tuple(dict.fromkeys(n.strip() for n in args.vary.split(",") if n.strip()))
    if not varying:
        raise UsageError("--vary names no input, option or rule", hint="for example --vary micro_batch,seq_len")
    rules = tuple(dict.fromkeys(args.rule_names or ["total"]))
    for name in varying:
        if name not in lib.inputs and name not in lib.options and name not in lib.rules:
            raise UnknownNameError(f"unknown name '{shown(name)}' in --vary",
                                   hint=did_you_mean(name, [*lib.inputs, *lib.options, *lib.rules]))
    for name in rules:
        if name not in lib.rules:
            raise UnknownNameError(f"'{shown(name)}' is not a rule", hint=did_you_mean(name, lib.rules))
    evaluator = exact.Evaluator.of(scenario, rules, varying)
    fixed = ", ".join(shown(text, 255) for text in args.sets)
    title = (f"memform {_version()}: {', '.join(rules)} of {shown(args.model, 255)}"
             + (f" on {args.gpu}" if args.gpu else "") + f", as a function of {', '.join(varying)}\n"
             f"(every other value the preset's and the defaults'{', with ' + fixed if fixed else ''}, folded in)\n"
             + {"python": "exact: ints and fractions.Fraction; evaluate({name: value}) -> {rule: value}",
                "numpy": "float64 over numpy arrays; evaluate({name: array}) -> {rule: array}",
                "js": "exact rationals over BigInt; evaluate({name: value}) -> {rule: value as text}"}[args.target])
    text = evaluator.module(args.target, title)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write '{shown(args.out, 255)}': {exc.strerror}") from None
        except ValueError:  # an embedded NUL
            raise UsageError(f"'{shown(args.out, 255)}' is not a valid path") from None
        out.write(f"wrote {shown(args.out, 255)}: {', '.join(rules)} over {', '.join(varying)} ({evaluator.steps} steps)\n")
    else:
        out.write(text)
    return 0


def cmd_web(args, out) -> int:
    if not args.out.strip():
        raise UsageError("--out names no folder", hint="memform web --out site")
    lib = _library(args.rules)
    compiled = exact._compiled(lib if args.rules else None)
    configs = {}
    for model in args.configs:  # each read as estimate reads it: the same values, the same errors
        scenario = _scenario(lib, argparse.Namespace(sets=[]), model if is_config_path(lib, model) else "./" + model)
        configs[shown(model, 255)] = scenario.values
    if configs:
        compiled = webpage.with_configs(compiled, configs)
    folder = Path(args.out)
    try:
        written = webpage.write(lib, compiled, folder, args.title, inline=not args.separate)
    except OSError as exc:
        raise UsageError(f"cannot write into '{shown(args.out, 255)}': {exc.strerror}") from None
    except ValueError:  # an embedded NUL
        raise UsageError(f"'{shown(args.out, 255)}' is not a valid path") from None
    size = sum(p.stat().st_size for p in written)
    out.write(f"wrote {', '.join(shown(str(p), 255) for p in written)} ({size / 1000:.0f} kB); "
              f"open {shown(str(folder / 'index.html'), 255)} in a browser\n")
    return 0


def _measured(lib, args):
    """The scenario to measure: precision defaults to fp32 (measure runs pure fp32 or bf16)."""
    scenario = _scenario(lib, args, args.model)
    if not any(text.split("=", 1)[0].strip() == "precision" for text in args.sets):
        scenario = scenario.with_values(precision="fp32")
    return scenario


def cmd_measure(args, out) -> int:
    lib = _library(args.rules)
    scenario = _measured(lib, args)
    config = args.model if is_config_path(lib, args.model) else None
    m = measuring.measure(scenario, config)
    out.write(json.dumps(m.to_json(), indent=2) + "\n" if args.json else measuring.format_table(m))
    return 0


def cmd_calibrate(args, out) -> int:
    lib = _library(args.rules)
    scenario = _measured(lib, args)
    config = args.model if is_config_path(lib, args.model) else None
    text = measuring.calibrate(scenario, config).rule_file()
    if args.out is None:
        out.write(text)
        return 0
    try:
        Path(args.out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write '{args.out}': {exc.strerror}") from None
    out.write(f"wrote {args.out}\n")
    return 0


def error_json(exc: EngineError) -> dict:
    """An error as ``--json`` prints it: its kind, message, hint, place and exit code."""
    if isinstance(exc, ErrorGroup):
        return {"type": "ErrorGroup", "message": exc.message, "errors": [error_json(e) for e in exc.errors],
                "exit_code": exc.exit_code}
    span = exc.span
    where = None if span is None else {"file": span.file, "line": span.line, "column": span.column,
                                       "length": span.length, "text": span.text}
    return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint, "location": where,
            "exit_code": exc.exit_code}


#: commands whose answers are kept as text (:mod:`engine.answers.quick`)
ANSWERED = ("show", "solve", "plan")

COMMANDS = {"estimate": cmd_estimate, "serve": cmd_serve, "solve": cmd_solve, "show": cmd_show, "plan": cmd_plan,
            "check": cmd_check, "presets": cmd_presets, "docs": cmd_docs, "plot": cmd_plot, "compile": cmd_compile, "web": cmd_web,
            "measure": cmd_measure, "calibrate": cmd_calibrate, "names": cmd_names}


def _printable_values() -> None:
    """Let every exact value the limits allow be printed: Python refuses to turn integers of
    more than 4,300 digits into text, a value of MAX_BITS bits has up to 30,103 (twice that
    leaves room for the constants of a formula)."""
    digits = 2 * (MAX_BITS * 30103 // 100000 + 1)
    limit = sys.get_int_max_str_digits()
    if limit and limit < digits:
        sys.set_int_max_str_digits(digits)


def _answered(args, out) -> int:
    """A command whose answer depends on its arguments and the sources alone: the text kept
    when it last ran with these arguments (no sympy), else its run, kept for the next time."""
    global _NOTES
    kept = quick.answer(args)
    if kept is not None:
        code, text, notes = kept
        for note in notes:
            _note(note)
        out.write(text)
        return code
    shown = quick.show(args) if args.command == "show" else None  # a polynomial: no sympy
    if shown is not None:
        out.write(shown)
        return 0
    planned = quick.plan(args) if args.command == "plan" else None  # a preset's layouts: no sympy
    solved = quick.solve(args) if args.command == "solve" else None  # a preset's workload: no sympy
    buffer, _NOTES = io.StringIO(), []
    try:
        if planned is not None:
            code = _print_plan(args, *planned, buffer)
        elif solved is not None:
            code = _print_solve(args, solved, buffer)
        else:
            code = COMMANDS[args.command](args, buffer)
        quick.remember_answer(args, code, buffer.getvalue(), _NOTES)
        return code
    finally:
        _NOTES = None
        out.write(buffer.getvalue())


def main(argv: list[str] | None = None, out=None, err=None) -> int:
    """Run the command line; returns the exit code instead of raising."""
    out = out or sys.stdout
    err = err or sys.stderr
    _printable_values()
    argv = sys.argv[1:] if argv is None else list(argv)
    options = argv[:argv.index("--")] if "--" in argv else argv  # after '--' every word is positional
    as_json = "--json" in options  # until the arguments are parsed: an argparse error
    try:
        try:
            args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
            as_json = getattr(args, "json", False)
            if args.command in ANSWERED:
                return _answered(args, out)
            return COMMANDS[args.command](args, out)
        except RecursionError:  # a rule file nested past what sympy or Python can walk
            raise ResourceLimitError("the rules nest too deeply to be evaluated or written out "
                                     "(past Python's recursion limit)",
                                     hint="split a deeply nested rule into rules of their own") from None
    except EngineError as exc:
        if as_json:  # a script reads the error from stdout, as it would the answer
            out.write(json.dumps({"error": error_json(exc)}, indent=2) + "\n")
        else:
            err.write(f"{exc}\n" if exc.span is not None else f"memform: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        err.write("memform: interrupted\n")
        return 130
