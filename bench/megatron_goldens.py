"""memform against every Megatron-LM functional-test golden value of a checkout.

Megatron-LM's functional tests keep, beside each recipe's ``model_config.yaml``, the measured
``mem-max-allocated-bytes`` (``torch.cuda.max_memory_allocated`` of the last global rank, the last
pipeline stage) per step in ``golden_values_<platform>.json``.  This reads every GPT, MoE and
Mixtral recipe of a Megatron-LM git checkout at a commit with memform's own reader of Megatron's
arguments (:mod:`engine.library.megatron`), on the recipes' one node of 8 GPUs, and prints each
recipe's last-step value against memform's ``peak_allocated`` for the last stage, with the
arguments memform does not model:

    python bench/megatron_goldens.py /path/to/Megatron-LM [--commit d98e8a64] [--platform dev_dgx_h100]

The summary line leaves out the recipes outside memform's training model (GRPO, CUDA graphs,
Megatron-FSDP, Muon) and those whose vocabulary the arguments do not give.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess

import engine
from engine.compile.model import Scenario
from engine.errors import EngineError
from engine.library.megatron import read_text

#: recipes that run what memform does not model, left out of the summary
OUTSIDE = ("grpo", "cudagraph", "cuda-graph", "megatron-fsdp", "muon", "reruns")
FAMILIES = ("gpt", "moe", "mixtral")
CUDA_MAJOR = {"a100": 8, "h100": 9, "gb200": 10}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", help="a Megatron-LM git checkout (or bare repository)")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--platform", default="dev_dgx_h100", help="the golden file's platform, e.g. dev_dgx_a100")
    args = ap.parse_args()

    def git(*cmd: str) -> str:
        return subprocess.run(["git", "-C", args.repo, *cmd], capture_output=True, text=True, check=True).stdout

    lib = engine.load()
    major = next((v for k, v in CUDA_MAJOR.items() if args.platform.endswith(k)), 9)
    rows = []
    for path in git("ls-tree", "-r", "--name-only", args.commit, "tests/functional_tests/test_cases/").split():
        parts = path.split("/")
        if not path.endswith(f"golden_values_{args.platform}.json") or parts[3] not in FAMILIES:
            continue
        try:
            golden = json.loads(git("show", f"{args.commit}:{path}"))
        except (json.JSONDecodeError, subprocess.CalledProcessError):
            continue
        series = golden.get("mem-max-allocated-bytes") if isinstance(golden, dict) else None
        series = series if isinstance(series, dict) else {}
        values = {int(k): v for k, v in series.get("values", {}).items() if isinstance(v, (int, float))}
        folder = path.rsplit("/", 1)[0]
        try:
            config = git("show", f"{args.commit}:{folder}/model_config.yaml")
        except subprocess.CalledProcessError:
            continue
        if not values or "MODEL_ARGS" not in config:
            continue
        name, measured = parts[4], int(values[max(values)])
        try:
            read = read_text(config, lib, name, gpus=8)
            s = Scenario.create(lib, None, values=read.values).with_values(pp_stage="last", cuda_major=major)
            predicted = int(s.evaluate("peak_allocated"))
            rows.append((name, measured, predicted, (predicted - measured) / measured, ", ".join(read.unknown)))
        except EngineError as exc:
            rows.append((name, measured, None, None, exc.message.splitlines()[0]))
    for name, measured, predicted, error, note in sorted(rows, key=lambda r: (r[3] is None, r[3] or 0)):
        shown = "      -" if error is None else f"{error:+7.1%}"
        print(f"{shown} {name[:72]:72} {measured:>15,} {predicted or 0:>15,}  {note[:100]}")
    held = [abs(r[3]) for r in rows if r[3] is not None and not any(o in (r[0] + r[4]).lower() for o in OUTSIDE)]
    if held:
        print(f"\n{len(held)} recipes in memform's training model: {sum(e <= 0.03 for e in held)} within 3 %, "
              f"{sum(e <= 0.05 for e in held)} within 5 %, median |error| {statistics.median(held):.1%}")


if __name__ == "__main__":
    main()
