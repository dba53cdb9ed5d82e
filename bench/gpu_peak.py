"""Peak GPU memory of a full-size Llama-style training step, measured beside memform's total.

Run on a machine with a CUDA GPU (not part of the tests):

    python bench/gpu_peak.py llama2-7b --set micro_batch=1 --set seq_len=4096 --set precision=bf16
    python bench/gpu_peak.py path/to/config.json --layers 8 --attention eager

It builds the model with random weights directly on the GPU (transformers, no downloads),
runs ``--steps`` training steps (forward, backward, AdamW step; the optimizer states exist
from the first step on) and prints torch.cuda.max_memory_allocated of the last step next to
memform's ``total`` with no CUDA context and no allocator margin (max_memory_allocated counts
neither), and each component.  ``--layers`` shrinks the model (num_hidden_layers) to fit.
``--device cpu`` runs the same step on the CPU with no measured peak: a dry run of the script
(tests/test_measure.py runs it on a tiny config).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a memform model preset or a Hugging Face config.json")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--layers", type=int, help="num_hidden_layers to build (default: the model's)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a dry run with no measured peak")
    args = parser.parse_args(argv)

    import torch
    import transformers

    import engine
    from engine.errors import EngineError
    from engine.answers.measure import (PRECISIONS, _check_options, autocast_region, family_of,
                                        hf_config, prediction_scenario)
    from engine.compile.model import Scenario, parse_setting

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("gpu_peak: no CUDA device", file=sys.stderr)
        return 2
    lib = engine.load()
    try:
        config_path = args.model if Path(args.model).is_file() else None
        if config_path:
            from engine.library.hfconfig import read_config
            base = Scenario.create(lib, None, values=read_config(config_path, lib).values)
        else:
            base = Scenario.create(lib, args.model)
        values = dict(parse_setting(lib, text) for text in args.sets)
        values.setdefault("precision", "bf16")
        if args.layers:
            values["num_hidden_layers"] = args.layers
        scenario = base.with_values(**values)
        _check_options(scenario)
        family = family_of(scenario, config_path)
        pred = prediction_scenario(scenario, family).with_values(mode="train")
        config = hf_config(pred, family)
    except EngineError as exc:
        print(f"gpu_peak: {exc}", file=sys.stderr)
        return 2

    b, s = int(pred.evaluate("micro_batch")), int(pred.evaluate("seq_len"))
    dtype = getattr(torch, PRECISIONS[pred.option("precision")][0])

    def autocast():  # bf16_mixed / fp16_mixed: the forward under autocast, as accelerate runs it
        return autocast_region(torch, pred.option("precision"), "cuda" if cuda else "cpu")
    attn = "eager" if pred.option("attention") == "eager" else "sdpa"
    torch.manual_seed(0)
    with torch.device(args.device):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=dtype)
    model.train()
    if pred.option("recompute") == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-5),
                 "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-5, momentum=0.9),
                 "sgd": lambda p: torch.optim.SGD(p, lr=1e-5)}[pred.option("optimizer")](model.parameters())
    ids = torch.randint(0, config.vocab_size, (b, s), device=args.device)
    persist = int(pred.evaluate("grads_persist")) == 1
    for _ in range(args.steps):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with autocast():
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=not persist)  # as memform's grads_persist says
        del loss
        if cuda:
            torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() if cuda else None

    print(f"{args.model} ({family}, {sum(p.numel() for p in model.parameters()):,} parameters): "
          f"b={b} s={s} {pred.option('precision')} {attn} recompute={pred.option('recompute')} "
          f"optimizer={pred.option('optimizer')} on {torch.cuda.get_device_name() if cuda else 'the CPU'}")
    print(f"  memform n_params          {int(pred.evaluate('n_params')):>16,}")
    for rule in ("weights", "grads", "optimizer_states", "activations", "logits"):
        print(f"  memform {rule:17} {int(pred.evaluate(rule)):>16,} B")
    total = int(pred.evaluate("total"))
    predicted_peak = int(pred.evaluate("peak_allocated"))  # the largest phase of the step
    print(f"  memform total             {total:>16,} B  (no CUDA context, no allocator margin)")
    print(f"  memform peak              {predicted_peak:>16,} B  (the largest phase of the step)")
    if peak is None:
        print("  max_memory_allocated      (not measured on the CPU)")
        return 0
    print(f"  max_memory_allocated      {peak:>16,} B  ({100 * (total - peak) / peak:+.2f} % total, "
          f"{100 * (predicted_peak - peak) / peak:+.2f} % peak, memform vs measured)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
