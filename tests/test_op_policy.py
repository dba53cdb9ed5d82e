"""torchtitan's selective "op" checkpointing under torch.compile, measured on the CPU.

torchtitan (parallelize_llama.py at 9dec370, `_apply_ac_to_transformer_block` with
selective_ac_option = "op") wraps each transformer block in a non-reentrant checkpoint whose
policy marks the outputs of every other matmul and of the attention kernel MUST_SAVE, and then
compiles the block.  Here a tiny Llama block written as torchtitan writes it (wq wk wv wo, RoPE,
causal SDPA, RMSNorm, w2(silu(w1 x) * w3 x)) runs the same policy, compiled with AOTAutograd's
min-cut partitioner on the CPU; the activations the compiled block saves for backward (every
saved tensor that is not a parameter or the rotary table, de-duplicated by storage) are held
against memform's `op_policy_layer` with `torch_compile = blocks`.  Skipped without torch.
"""
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch", reason="measuring needs torch (pip install 'memform[torch]')")

from engine.compile.model import Scenario  # noqa: E402

HIDDEN, HEADS, KV_HEADS, INTER, BATCH, SEQ = 64, 4, 2, 96, 2, 32
HEAD_DIM = HIDDEN // HEADS

# torchtitan's _save_list; on the CPU SDPA dispatches to the flash kernel's CPU counterpart
SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten.abs.default, torch.ops.aten.max.default}


def op_policy_context():
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):  # torchtitan's _custom_policy
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        to_save = func in SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.wq, self.wk = lin(HIDDEN, HEADS * HEAD_DIM), lin(HIDDEN, KV_HEADS * HEAD_DIM)
        self.wv, self.wo = lin(HIDDEN, KV_HEADS * HEAD_DIM), lin(HEADS * HEAD_DIM, HIDDEN)
        self.w1, self.w3, self.w2 = lin(HIDDEN, INTER), lin(HIDDEN, INTER), lin(INTER, HIDDEN)
        self.attention_norm, self.ffn_norm = torch.nn.RMSNorm(HIDDEN), torch.nn.RMSNorm(HIDDEN)

    @staticmethod
    def rope(x, cos, sin):
        a, b = x[..., ::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)

    def attention(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.rope(self.wq(x).view(b, s, HEADS, HEAD_DIM), cos, sin)
        k = self.rope(self.wk(x).view(b, s, KV_HEADS, HEAD_DIM), cos, sin)
        v = self.wv(x).view(b, s, KV_HEADS, HEAD_DIM)
        rep = HEADS // KV_HEADS
        k, v = (t.repeat_interleave(rep, dim=2) for t in (k, v))
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))

    def inner(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        n = self.ffn_norm(h)
        return h + self.w2(torch.nn.functional.silu(self.w1(n)) * self.w3(n))

    def forward(self, x, cos, sin):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.inner, x, cos, sin, use_reentrant=False, context_fn=op_policy_context,
                          preserve_rng_state=False)


def saved_activation_bytes(compiled: bool) -> int:
    torch.manual_seed(0)
    block = Block()
    run = torch.compile(block, backend="aot_eager_decomp_partition", dynamic=False) if compiled else block
    angles = torch.outer(torch.arange(SEQ, dtype=torch.float32),
                         1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    x = torch.randn(BATCH, SEQ, HIDDEN, requires_grad=True)
    skip = {t.untyped_storage().data_ptr() for t in (*block.parameters(), cos, sin)}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            saved[ptr] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run(x, cos, sin)
    out.sum().backward()
    assert x.grad is not None
    return sum(saved.values())


def test_compiled_op_policy_saves_what_memform_counts(lib):
    # the compiled block keeps its input, wq's and wv's outputs, the attention's output and
    # log-sum-exp and w1's output; w2's output, which eager checkpointing stores, backward
    # never reads.  Expected, by hand: 2 x 32 tokens x 4 B x (64 + 64 + 32 + 64 + 96) + lse
    # 2 x 4 heads x 32 x 4 B = 82,944 B
    measured = saved_activation_bytes(compiled=True)
    assert measured == BATCH * SEQ * 4 * (HIDDEN + HEADS * HEAD_DIM + KV_HEADS * HEAD_DIM + HIDDEN + INTER) \
        + BATCH * HEADS * SEQ * 4
    s = Scenario.create(lib, "llama3.1-8b", values={
        "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "intermediate_size": INTER, "micro_batch": BATCH, "seq_len": SEQ, "precision": "fp32",
        "recompute": "op", "torch_compile": "blocks"})
    assert s.evaluate("op_policy_layer") == measured
    eager = Scenario.create(lib, "llama3.1-8b", values={
        "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "intermediate_size": INTER, "micro_batch": BATCH, "seq_len": SEQ, "precision": "fp32",
        "recompute": "op"})
    # eager, the checkpoint also stores w2's output (the policy's 4th saved matmul)
    assert eager.evaluate("op_policy_layer") - measured == BATCH * SEQ * HIDDEN * 4
