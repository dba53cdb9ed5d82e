"""The step's peak (rule peak) against the plain sum (rule total)."""
from engine.compile.model import Scenario


def test_peak_is_the_sum_when_gradients_persist_and_the_loss_is_fused(lib):
    s = Scenario.create(lib, "llama2-7b", values={"micro_batch": 4, "seq_len": 4096, "loss_kernel": "fused"})
    assert s.evaluate("peak") == s.evaluate("total")


def test_unfused_loss_adds_two_logits_sized_gradients_at_the_start_of_backward(lib):
    # PyTorch's log_softmax + nll_loss backward: the gradient of the log-probabilities and
    # that of the logits, each b s V fp32 values: 2 x 4 x 4096 x 32000 x 4 B
    s = Scenario.create(lib, "llama2-7b", values={"micro_batch": 4, "seq_len": 4096})
    assert s.evaluate("peak_allocated") == s.evaluate("tensors") + 2 * 4 * 4096 * 32000 * 4


def test_freed_gradients_leave_the_forward_peak(lib):
    # activations (73 GB) dwarf the gradients (13.5 GB): the start of backward is the peak,
    # and without persistent gradient buffers it holds everything but the gradients, except
    # the output layer's, the first to appear (32000 x 4096 in bf16)
    s = Scenario.create(lib, "llama2-7b", values={"micro_batch": 4, "seq_len": 4096, "grad_lifetime": "step",
                                                  "loss_kernel": "fused"})
    assert s.evaluate("peak_allocated") == s.evaluate("tensors") - s.evaluate("grads") + 32000 * 4096 * 2


def test_foreach_optimizer_temporaries_can_set_the_peak(lib):
    # one token: activations are tiny, so the update (states + grads + fp32 temporaries) is the peak
    s = Scenario.create(lib, "llama2-7b", values={"micro_batch": 1, "seq_len": 1, "optimizer_impl": "foreach"})
    temp = 4 * 6_738_415_616  # one fp32 buffer per parameter
    expected = s.evaluate("model_states") + temp
    assert s.evaluate("peak_allocated") == expected


def test_the_three_figures_tools_print(lib):
    # max_memory_allocated: the live tensors; reserved: plus the allocator's slack (alloc_margin
    # of them); nvidia-smi: plus the CUDA context
    s = Scenario.create(lib, "llama2-7b", values={"micro_batch": 1, "seq_len": 1, "alloc_margin": 0.25,
                                                  "cuda_context": 2**29})
    allocated = s.evaluate("tensors") + 2 * 32000 * 4  # one token: the loss's two fp32 gradients
    assert s.evaluate("peak_allocated") == allocated
    assert s.evaluate("peak_reserved") == allocated * 5 / 4
    assert s.evaluate("peak") == s.evaluate("device_used") == allocated * 5 / 4 + 2**29
