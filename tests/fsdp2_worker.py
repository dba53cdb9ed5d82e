"""One rank of a two-rank FSDP2 training step on the CPU (gloo), for tests/test_fsdp2.py.

Builds a tiny Llama in fp32, applies ``fully_shard`` to every decoder layer and then to the root
with ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` (torchtitan's recipe),
runs two AdamW (foreach) steps and records, on the second, what each FSDP parameter group holds
after each of its hooks: the bytes of its gathered (unsharded) parameters and of the
reduce-scatter inputs kept in flight.  Sizes are read from the tensors FSDP2 itself holds, not
from memform.  Written to ``OUT/rank{r}.json``; docs/research/fsdp2-cpu.md has the full study.
"""
import json
import os
import sys


def run(rank: int, world: int, out: str, config: dict) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):  # gloo over the loopback: no hostname lookup in a sandboxed CI
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**config))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    groups = [g for m in model.modules() if isinstance(m, FSDPModule) for g in m._get_fsdp_state()._fsdp_param_groups]

    def storages(tensors) -> int:
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())

    snaps = []

    def snap(label: str) -> None:
        ctx = groups[0].comm_ctx
        pending = [g._all_gather_result for g in groups if g._all_gather_result is not None]
        if ctx.all_gather_state is not None:
            pending.append(ctx.all_gather_state.all_gather_result)
        snaps.append({"label": label,
                      "gathered": sum(storages(t for p in g.fsdp_params for t in p.all_gather_outputs) for g in groups),
                      # all-gather outputs not yet copied out (prefetched) or kept until the next copy-out
                      "in_flight": storages(r.all_gather_output for r in pending),
                      "reduce_scatter_inputs": [s.reduce_scatter_input.untyped_storage().nbytes()
                                                for s in ctx.reduce_scatter_states]})

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    ids = torch.randint(0, config["vocab_size"], (2, 64), generator=torch.Generator().manual_seed(rank))
    model(input_ids=ids, labels=ids).loss.backward()
    params = storages(p._local_tensor for p in model.parameters())
    grads = storages(p.grad._local_tensor for p in model.parameters())
    grad_dtypes = sorted({str(p.grad._local_tensor.dtype) for p in model.parameters()})
    opt.step()
    states = {}
    for p in model.parameters():
        for k, v in opt.state[p].items():
            t = getattr(v, "_local_tensor", v)
            states[k] = states.get(k, 0) + t.numel() * t.element_size()
    opt.zero_grad()

    for name in ("pre_forward", "post_forward", "pre_backward", "post_backward"):
        original = getattr(FSDPParamGroup, name)

        def hooked(self, *a, _original=original, _name=name, **k):
            result = _original(self, *a, **k)
            snap(f"{_name} {self._module_fqn or '(root)'}")
            return result
        setattr(FSDPParamGroup, name, hooked)
    model(input_ids=ids, labels=ids).loss.backward()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"params": params, "grads": grads, "grad_dtypes": grad_dtypes, "states": states,
                   "param_dtypes": sorted({str(p._local_tensor.dtype) for p in model.parameters()}),
                   "snaps": snaps}, f)
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp
    out, config = sys.argv[1], json.loads(sys.argv[2])
    mp.spawn(run, args=(2, out, config), nprocs=2)


if __name__ == "__main__":
    main()
