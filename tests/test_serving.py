"""Serving: paged KV blocks, prefix sharing, quantised KV, concurrency (Kwon et al. 2023)."""
from engine.compile.model import Scenario
from engine.answers.solve import solve

PER_TOKEN = 2 * 80 * 8 * 128 * 2  # Llama-2-70B: K and V, 80 layers, 8 KV heads of 128, bf16


def kv(lib, **values):
    return Scenario.create(lib, "llama2-70b", values={"mode": "infer", **values}).evaluate("kv_cache")


def test_paged_cache_rounds_each_sequence_up_to_whole_blocks(lib):
    assert kv(lib, seq_len=4097, micro_batch=3, kv_paging="none") == 3 * 4097 * PER_TOKEN
    assert kv(lib, seq_len=4097, micro_batch=3) == 3 * 4112 * PER_TOKEN  # 257 blocks of 16


def test_shared_prefix_is_cached_once(lib):
    # 8 requests of 2048 tokens sharing a 1024-token system prompt: 1024 + 8 x 1024 tokens
    assert kv(lib, seq_len=2048, micro_batch=8, shared_prefix=1024) == (1024 + 8 * 1024) * PER_TOKEN


def test_fp8_cache_is_half_and_int8_adds_per_token_scales(lib):
    assert kv(lib, seq_len=4096, kv_dtype="fp8_e4m3") * 2 == kv(lib, seq_len=4096)
    # int8: one fp16 scale per token per head for K and for V (2 bytes per 128 elements)
    assert kv(lib, seq_len=4096, kv_dtype="int8") == 4096 * 2 * 80 * 8 * (128 + 2)


def test_max_concurrent_sequences_fit_after_the_weights(lib):
    s = Scenario.create(lib, "llama2-70b", "h200-141g", values={"mode": "infer", "seq_len": 4096, "tp": 2})
    r = solve(s, "max", "micro_batch")
    fits = s.with_values(micro_batch=r.value).evaluate("total")
    assert fits <= (143771 - 699) * 2**20 < s.with_values(micro_batch=r.value + 1).evaluate("total")  # H200: CUDA's total (nvidia-smi less the driver's reserve)
    # each more sequence costs at least its KV cache (4096 tokens x 4 KV heads per GPU)
    assert r.bytes_at_next - r.bytes_at_value >= 4096 * 2 * 80 * 4 * 128 * 2
