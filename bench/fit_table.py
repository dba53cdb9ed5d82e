"""Which popular models fit which consumer GPUs, for inference and for QLoRA: the README's
table, computed by memform itself.

    python bench/fit_table.py            # print the table (Markdown)
    python bench/fit_table.py --write    # replace it in README.md, between its markers

Each cell is memform's ``peak`` (what nvidia-smi shows at the step's peak: the tensors, the
caching allocator's slack and the CUDA context) and the GPUs whose capacity holds it.
tests/test_readme.py checks that the README's table is what this prints.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("llama3.2-3b", "phi3-mini-4k", "qwen3-4b", "mistral-7b-v0.3", "qwen2.5-7b", "olmo2-7b", "llama3.1-8b",
          "qwen3-8b", "granite3.3-8b", "gemma2-9b", "qwen2.5-14b", "qwen3-14b", "qwen3-30b-a3b", "qwen2.5-32b",
          "qwen3-32b", "mixtral-8x7b", "llama3.1-70b")
GPUS = ("rtx3090", "rtx4090", "rtx5090")
#: the workloads, as memform settings: one request or one sequence per step
WORKLOADS = {
    "inference, bf16, 4k context": {"mode": "infer", "micro_batch": 1, "seq_len": 4096},
    "inference, int4 (GPTQ g128), 4k context": {"mode": "infer", "micro_batch": 1, "seq_len": 4096,
                                                "weight_dtype": "int4"},
    "QLoRA r16, 2k sequence, checkpointing": {"finetune": "qlora", "micro_batch": 1, "seq_len": 2048,
                                              "recompute": "full"},
}
START, END = "<!-- fit-table:start -->", "<!-- fit-table:end -->"
GiB = 2**30


def table() -> str:
    """The Markdown table: per model and workload the peak in GiB and the GPUs it fits."""
    import engine
    from engine.compile.model import Scenario
    lib = engine.load()
    capacity = {g: Scenario.create(lib, None, g).values["capacity"] for g in GPUS}
    lines = ["| model | parameters | " + " | ".join(WORKLOADS) + " |",
             "| --- | ---: | " + " | ".join("---" for _ in WORKLOADS) + " |"]
    for model in MODELS:
        cells = []
        for values in WORKLOADS.values():
            peak = Scenario.create(lib, model, values=values).evaluate("peak")
            fits = [g.removeprefix("rtx") for g in GPUS if peak <= capacity[g]]
            cells.append(f"{float(peak) / GiB:.1f} GiB: " + (", ".join(fits) if fits else "none"))
        params = Scenario.create(lib, model).evaluate("n_params")
        lines.append(f"| `{model}` | {float(params) / 1e9:.1f}B | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the table in README.md")
    args = ap.parse_args()
    text = table()
    if not args.write:
        sys.stdout.write(text)
        return 0
    readme = ROOT / "README.md"
    s = readme.read_text(encoding="utf-8")
    start, end = s.index(START) + len(START), s.index(END)
    readme.write_text(s[:start] + "\n" + text + s[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
