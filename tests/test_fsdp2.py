"""stack = fsdp2 against PyTorch FSDP2 itself: two gloo ranks on the CPU train a tiny Llama with
fully_shard on every layer and the root (tests/fsdp2_worker.py) and report the bytes FSDP2's
own tensors hold; memform's rules must give the same figures, byte for byte.

What the CPU cannot show (the caching allocator's per-stream pools, NCCL's buffers) is in
docs/research/fsdp2-cpu.md."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="FSDP2 needs torch (pip install 'memform[torch]')")
transformers = pytest.importorskip("transformers", reason="the model needs transformers (pip install 'memform[torch]')")

from engine.library.hfconfig import read_config  # noqa: E402
from engine.compile.model import Scenario  # noqa: E402

WORKER = Path(__file__).with_name("fsdp2_worker.py")
# even sizes everywhere: FSDP2 pads dim 0 to a multiple of the ranks, memform does not
CONFIG = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 256}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp2")
    subprocess.run([sys.executable, str(WORKER), str(out), json.dumps(CONFIG)], check=True, timeout=600,
                   capture_output=True)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1] or ranks[0]["snaps"] == ranks[1]["snaps"]
    path = out / "config.json"
    transformers.LlamaConfig(**CONFIG).to_json_file(str(path))
    return ranks[0], path


@pytest.fixture(scope="module")
def scenario(lib, run):
    _, path = run
    config = read_config(path, lib)
    # the worker shards each layer and then the root (fsdp_units=root)
    return Scenario.create(lib, None, values={**config.values, "stack": "fsdp2", "dp": 2, "fsdp_units": "root",
                                              "precision": "bf16_mixed", "micro_batch": 2, "seq_len": 64})


def test_sharded_states_are_the_fp32_master_copy(run, scenario):
    measured, _ = run
    assert measured["param_dtypes"] == ["torch.float32"] and measured["grad_dtypes"] == ["torch.float32"]
    assert scenario.evaluate("weights") == measured["params"]
    assert scenario.evaluate("master") == 0
    assert scenario.evaluate("grads") == measured["grads"]
    assert scenario.evaluate("optimizer_states") == sum(measured["states"].values())


def test_gathered_blocks_when_backward_starts_and_during_it(run, scenario):
    measured, _ = run
    snaps = {s["label"]: s for s in measured["snaps"]}
    last = CONFIG["num_hidden_layers"] - 1
    # backward starts with the root group and the last block gathered
    assert snaps[f"pre_backward model.layers.{last}"]["gathered"] == scenario.evaluate("fsdp_turn_buffers")
    # a block in backward: the root, the block and the next one's all-gather (prefetched)
    middle = snaps[f"pre_backward model.layers.{last - 1}"]
    assert middle["gathered"] + middle["in_flight"] == scenario.evaluate("fsdp_gathered")
    # no point of backward holds more (the forward's start holds the root's all-gather output
    # beside its copy until the first block is copied out: on a GPU, the all-gather stream's
    # pool, side_stream_pools)
    backward = measured["snaps"][[s["label"] for s in measured["snaps"]].index("pre_backward (root)"):]
    assert max(s["gathered"] + s["in_flight"] for s in backward) == scenario.evaluate("fsdp_gathered")
    first = measured["snaps"][0]
    assert first["label"] == "pre_forward (root)"
    assert first["gathered"] + first["in_flight"] == 2 * scenario.evaluate("fsdp_root_gathered")


def test_one_reduce_scatter_input_in_flight_in_fp32(run, scenario):
    measured, _ = run
    backward = [s for s in measured["snaps"] if s["label"].startswith("post_backward")]
    assert all(len(s["reduce_scatter_inputs"]) == 1 for s in backward)
    block, root = backward[0]["reduce_scatter_inputs"][0], backward[-1]["reduce_scatter_inputs"][0]
    assert backward[-1]["label"] == "post_backward (root)"
    assert block == scenario.evaluate("fsdp_block_params") * scenario.evaluate("fsdp_reduce_bytes")
    assert root == scenario.evaluate("fsdp_root_params") * scenario.evaluate("fsdp_reduce_bytes")
