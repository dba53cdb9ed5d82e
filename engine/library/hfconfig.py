"""Hugging Face ``config.json`` files as memform inputs.

Each supported ``model_type`` maps its fields one-to-one (or by a documented rename) to
the library's inputs and options.  Fields with no effect on memory (``rope_theta``,
token ids ...) are listed as such; any other field is reported by name, never dropped
silently.  A missing or mistyped field is an error naming the field and the file.

The file is read as untrusted input: UTF-8, UTF-16 and UTF-32 are recognised (by their BOM or,
without one, by the zero bytes of the first characters, as RFC 4627 describes); files over
10 MiB, nesting deeper than 64 levels, duplicate keys, and numbers that are not finite or not
below 2^63 are refused (floats are read exactly, as decimals); every value, derived ones
included, goes through the library's validation; text echoed in a message is escaped and cut.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from itertools import accumulate
from pathlib import Path

import sympy

from ..errors import (DomainError, EngineError, ResourceLimitError, SourceError, Span, UsageError,
                      did_you_mean, shown)
from ..library import hfquant

MAX_BYTES = 10 * 2**20  #: a config.json is a few kilobytes
MAX_DEPTH = 64  #: nesting of objects and arrays
MAX_NUMBER = 2**63  #: numbers must be below this in magnitude (64-bit integers)
MAX_NUMBER_CHARS = 100  #: longer number literals are refused before they are converted
MAX_PLACES = 64  #: decimal places of a float literal
MAX_SHOWN = 60  #: characters of user text echoed in a message
MAX_PATH_SHOWN = 255  #: characters of a path echoed (a longer one is cut)
MAX_LINE = 200  #: a longer source line is not echoed under an error

#: fields that change no memory figure (read, then reported as ignored)
NO_MEMORY_EFFECT = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "bos_token_id",
    "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps", "layer_norm_eps",
    "layer_norm_epsilon", "rope_theta", "rope_scaling", "use_cache", "pretraining_tp",
    "attention_dropout", "sliding_window", "use_sliding_window", "max_window_layers",
    "router_aux_loss_coef", "output_router_logits", "router_jitter_noise", "norm_topk_prob",
    "aux_loss_alpha", "seq_aux", "scoring_func", "routed_scaling_factor", "n_group", "topk_group",
    "ep_size", "hidden_act", "activation_function", "num_nextn_predict_layers", "rope_interleave",
    "tie_encoder_decoder", "bos_token", "eos_token", "hidden_activation",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "qkv_bias",
    "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_ctx", "decoder_sparse_step",
    "mlp_only_layers", "moe_layer_freq", "topk_method", "_name_or_path", "auto_map", "head_dim_factor",
    # Gemma 2: the KV-cache class generate() picks; Phi-3: the context length LongRoPE scales from
    "cache_implementation", "original_max_position_embeddings",
    # Granite: scalings of the embedding, the residual branches, attention scores and logits
    "embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling",
    # gpt-oss: the clamped SwiGLU's limit and slope, the context the YaRN scaling starts from
    "swiglu_limit", "swiglu_alpha", "initial_context_length",
    # transformers 5's rotary settings (a linear factor is read from it); Gemma 3: the sliding
    # layers' rotary base; an encoder's attention when true (refused then)
    "rope_parameters", "rope_local_base_freq", "use_bidirectional_attention",
    # StarCoder 2: the LayerNorms' epsilon; dropout on the embeddings' output (no saved mask
    # memform counts: the residual dropout is read as dropout)
    "norm_epsilon", "embedding_dropout",
    # Cohere: a scalar the logits are multiplied by
    "logit_scale",
    # Llama 4: the q/k L2 norm (no weight); the NoPE layers' attention temperature
    "use_qk_norm", "attn_temperature_tuning", "floor_scale", "attn_scale",
    # PretrainedConfig's own attributes, which transformers 4.x wrote into every nested config
    # (Llama 3.2 Vision's text_config and vision_config): generation defaults, output and return
    # switches, label maps, encoder-decoder flags (transformers configuration_utils.py)
    "add_cross_attention", "bad_words_ids", "begin_suppress_tokens", "chunk_size_feed_forward",
    "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample",
    "early_stopping", "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty",
    "finetuning_task", "forced_bos_token_id", "forced_eos_token_id", "id2label", "label2id", "is_decoder",
    "is_encoder_decoder", "length_penalty", "max_length", "min_length", "no_repeat_ngram_size",
    "num_beam_groups", "num_beams", "num_return_sequences", "output_attentions", "output_hidden_states",
    "output_scores", "prefix", "problem_type", "pruned_heads", "remove_invalid_values", "repetition_penalty",
    "return_dict", "return_dict_in_generate", "sep_token_id", "suppress_tokens", "temperature",
    "tf_legacy_loss", "tokenizer_class", "top_k", "top_p", "torchscript", "typical_p", "use_bfloat16",
}

#: fields every family shares, under the library's own names
COMMON = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
          "tie_word_embeddings", "mlp_bias", "partial_rotary_factor")
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class Family:
    """How one ``model_type`` maps to the library."""

    fixed: dict  # options every model of the family has
    renames: dict = field(default_factory=dict)  # config field -> library name
    required: tuple = ("intermediate_size",)
    defaults: dict = field(default_factory=dict)  # HF's defaults where a field is absent
    #: how the family's config names its sliding-window layers (read into sliding_window and
    #: sliding_window_layers); "" leaves sliding_window, use_sliding_window and max_window_layers
    #: ignored, as before.  "all": every layer when sliding_window is set (Mistral-style
    #: attention: Phi-3); "qwen": layers from max_window_layers on when
    #: use_sliding_window is true; "alternate": layers 0, 2, 4 ... (Gemma 2); "pattern": every
    #: layer but each sliding_window_pattern-th (Gemma 3, default 6; sliding_window 4096 where it
    #: is left out).  A layer_types list overrides them.
    window: str = ""
    #: config fields that repeat another field under a second name (gpt-oss writes both
    #: experts_per_token and num_experts_per_tok): read when alone, checked equal when both are given
    aliases: dict = field(default_factory=dict)
    #: config fields that set several library options at once (StarCoder 2's use_bias: every
    #: projection's bias)
    spreads: dict = field(default_factory=dict)
    #: fields the family's original code reads that transformers' model does not (ignored when
    #: they have the one value transformers builds, refused otherwise)
    expects: dict = field(default_factory=dict)
    #: true/false config fields that choose between two values of a library option
    #: (Cohere's use_qk_norm: qk_norm full or none): field -> (option, value if true, value if false)
    switches: dict = field(default_factory=dict)
    #: the sliding_window_pattern a "pattern" window scheme assumes where the field is left out
    window_pattern: int = 6


FAMILIES = {
    "llama": Family({"mlp": "swiglu", "norm": "rmsnorm"}, defaults={"tie_word_embeddings": False}),
    "mistral": Family({"mlp": "swiglu", "norm": "rmsnorm"}, defaults={"tie_word_embeddings": False}),
    "qwen2": Family({"mlp": "swiglu", "norm": "rmsnorm", "attention_bias": "true"},
                    defaults={"tie_word_embeddings": False}),
    "gemma": Family({"mlp": "geglu", "norm": "rmsnorm", "rmsnorm_weight": "fp32"}, defaults={"tie_word_embeddings": True}),
    "mixtral": Family({"mlp": "swiglu", "norm": "rmsnorm"},
                      renames={"num_local_experts": "num_experts"},
                      defaults={"tie_word_embeddings": False}),
    "qwen2_moe": Family({"mlp": "swiglu", "norm": "rmsnorm", "attention_bias": "true",
                         "shared_expert_gate": "true"},
                        renames={"moe_intermediate_size": "moe_intermediate_size",
                                 "shared_expert_intermediate_size": "shared_expert_intermediate_size",
                                 "decoder_sparse_step": "moe_layer_step"},
                        defaults={"tie_word_embeddings": False}),
    # DeepSeek-V2's router has no bias (topk_method greedy); V3's keeps e_score_correction_bias
    "deepseek_v2": Family({"mlp": "swiglu", "norm": "rmsnorm", "attention_type": "mla", "router_bias": "false"},
                          renames={"n_routed_experts": "num_experts"},
                          defaults={"tie_word_embeddings": False, "q_lora_rank": 1536}),
    "deepseek_v3": Family({"mlp": "swiglu", "norm": "rmsnorm", "attention_type": "mla", "router_bias": "true"},
                          renames={"n_routed_experts": "num_experts"},
                          defaults={"tie_word_embeddings": False, "q_lora_rank": 1536}),
    # Qwen3: no q/k/v biases (attention_bias covers q, k, v and o), q_norm and k_norm over head_dim
    "qwen3": Family({"mlp": "swiglu", "norm": "rmsnorm", "qk_norm": "head"},
                    defaults={"tie_word_embeddings": False}, window="qwen"),
    # Qwen3-MoE: no shared experts, a bias-free router; transformers >= 5 stacks the experts
    "qwen3_moe": Family({"mlp": "swiglu", "norm": "rmsnorm", "qk_norm": "head", "router_bias": "false",
                         "shared_expert_gate": "false"},
                        renames={"num_local_experts": "num_experts", "decoder_sparse_step": "moe_layer_step"},
                        defaults={"tie_word_embeddings": False}, window="qwen"),
    # Gemma 2: norms before and after attention and MLP; logit soft-capping has no parameters
    "gemma2": Family({"mlp": "geglu", "norm": "rmsnorm", "rmsnorm_weight": "fp32", "norm_placement": "sandwich"},
                     defaults={"tie_word_embeddings": True}, window="alternate"),
    # Phi-3: q, k, v in one qkv_proj and gate, up in one gate_up_proj (same parameters, fewer tensors)
    "phi3": Family({"mlp": "swiglu", "norm": "rmsnorm", "qkv_fused": "true", "gate_up_fused": "true"},
                   renames={"resid_pdrop": "dropout"},
                   defaults={"tie_word_embeddings": False}, window="all"),
    # OLMo 2: norms after attention and MLP only (no input norm), q_norm and k_norm over the
    # whole q and k widths (transformers models/olmo2/modeling_olmo2.py)
    "olmo2": Family({"mlp": "swiglu", "norm": "rmsnorm", "qk_norm": "full", "norm_placement": "post"},
                    defaults={"tie_word_embeddings": False}),
    # Granite: Llama's layout; its embedding, residual, attention and logits multipliers are
    # scalars of the forward pass, not parameters (models/granite/modeling_granite.py)
    "granite": Family({"mlp": "swiglu", "norm": "rmsnorm"}, defaults={"tie_word_embeddings": False}),
    # gpt-oss: q, k, v and o with biases, a sink logit per head, a router with a bias, experts
    # (SwiGLU) with biases on gate_up and down, no shared experts; sliding-window layers 0, 2, 4 ...
    # (transformers models/gpt_oss/modeling_gpt_oss.py, configuration_gpt_oss.py); vLLM keeps its
    # rotary table in fp32 (vllm model_executor/models/gpt_oss.py)
    "gpt_oss": Family({"mlp": "swiglu", "norm": "rmsnorm", "router_bias": "true", "mlp_bias": "true",
                       "attention_sinks": "true", "shared_expert_gate": "false", "rope_cache_dtype": "fp32"},
                      renames={"num_local_experts": "num_experts", "experts_per_token": "num_experts_per_tok"},
                      defaults={"tie_word_embeddings": False, "attention_bias": True},
                      window="alternate", aliases={"experts_per_token": "num_experts_per_tok"}),
    # Gemma 3's language model: Gemma 2's sandwich norms with q_norm and k_norm over head_dim; five
    # sliding-window layers to one global (sliding_window_pattern 6, or layer_types); the global and
    # the sliding layers rotate with tables of their own (rope_local_base_freq); defaults as
    # Gemma3TextConfig has them, for the fields Gemma 3's published text_config leaves out
    # (transformers models/gemma3/configuration_gemma3.py)
    "gemma3_text": Family({"mlp": "geglu", "norm": "rmsnorm", "rmsnorm_weight": "fp32", "norm_placement": "sandwich",
                           "qk_norm": "head", "sliding_rope": "own"},
                          defaults={"tie_word_embeddings": True, "vocab_size": 262_208,
                                    "max_position_embeddings": 131_072, "head_dim": 256, "num_attention_heads": 8,
                                    "num_key_value_heads": 4},
                          window="pattern"),
    # StarCoder 2: LayerNorms with biases, a plain GELU MLP (c_fc, c_proj), one use_bias for q, k,
    # v, o and the MLP; a sliding window on every layer when sliding_window is set
    # (transformers models/starcoder2/modeling_starcoder2.py, configuration_starcoder2.py)
    "starcoder2": Family({"mlp": "gelu", "norm": "layernorm"},
                         renames={"residual_dropout": "dropout"},
                         defaults={"tie_word_embeddings": True, "attention_bias": True, "o_proj_bias": True,
                                   "mlp_bias": True},
                         window="all", spreads={"use_bias": ("attention_bias", "o_proj_bias", "mlp_bias")},
                         expects={"mlp_type": "default", "norm_type": "layer_norm"}),
    # Cohere (Command R, Aya): one bias-free LayerNorm per layer, attention and SwiGLU MLP in
    # parallel on its output; optional q and k norms over (heads, head_dim); a scalar logit_scale
    # (transformers models/cohere/modeling_cohere.py, configuration_cohere.py)
    "cohere": Family({"mlp": "swiglu", "norm": "layernorm_nobias", "norm_placement": "parallel", "qk_norm_layout": "per_head"},
                     defaults={"tie_word_embeddings": True},
                     switches={"use_qk_norm": ("qk_norm", "full", "none")}),
    # Llama 4's language model: experts (intermediate_size wide, fused 3-D) with one shared expert
    # of the same width and a bias-free router on every interleave_moe_layer_step-th layer, dense
    # layers intermediate_size_mlp wide; the q/k L2 norm has no weight (transformers
    # models/llama4/modeling_llama4.py; docs/research/llama4.md)
    # Llama 3.2 Vision's language model: Llama 3.1's layers, cross_attention_layers naming those
    # that attend to the image states (read as a count), the embedding 8 rows wider than the
    # vocabulary (transformers models/mllama/modeling_mllama.py MllamaTextModel)
    "mllama_text_model": Family({"mlp": "swiglu", "norm": "rmsnorm"},
                                defaults={"tie_word_embeddings": False, "extra_embedding_rows": 8}),
    "llama4_text": Family({"mlp": "swiglu", "norm": "rmsnorm", "router_bias": "false", "shared_expert_gate": "false"},
                          renames={"num_local_experts": "num_experts", "interleave_moe_layer_step": "moe_layer_step",
                                   "intermediate_size": "moe_intermediate_size",
                                   "intermediate_size_mlp": "intermediate_size"},
                          defaults={"tie_word_embeddings": False, "n_shared_experts": 1}),
    # Falcon: q, k and v in one query_key_value (one K and V head with multi_query, num_kv_heads
    # with the new decoder architecture), a plain GELU MLP, one bias flag for every projection;
    # attention and MLP in parallel on one LayerNorm, or on two (new decoder architecture, or
    # num_ln_in_parallel_attn 2: counted as a pre-norm layer, the same norms and inputs), or in
    # sequence (transformers models/falcon/modeling_falcon.py, configuration_falcon.py)
    "falcon": Family({"mlp": "gelu", "norm": "layernorm", "qkv_fused": "true"},
                     renames={"ffn_hidden_size": "intermediate_size", "hidden_dropout": "dropout"},
                     required=(),
                     defaults={"tie_word_embeddings": True, "attention_bias": False, "o_proj_bias": False,
                               "mlp_bias": False, "max_position_embeddings": 2048},
                     spreads={"bias": ("attention_bias", "o_proj_bias", "mlp_bias")},
                     expects={"alibi": False, "apply_residual_connection_post_layernorm": False}),
    # Cohere 2 (Command R7B, Command A): Cohere's parallel layers without q/k norms, three
    # sliding-window layers (4096) in every four (Cohere2Config: sliding_window_pattern 4);
    # the fields of Cohere's own code must say what transformers builds
    "cohere2": Family({"mlp": "swiglu", "norm": "layernorm_nobias", "norm_placement": "parallel"},
                      defaults={"tie_word_embeddings": True}, window="pattern", window_pattern=4,
                      expects={"use_parallel_block": True, "use_gated_activation": True, "use_embedding_sharing": True,
                               "use_parallel_embedding": True, "rotary_pct": 1, "position_embedding_type": "rope_gptj",
                               "order_of_interleaved_layers": "local_attn_first"}),
    # Hybrids (docs/research/hybrid-state.md): layers whose token mixer is a recurrent,
    # linear-attention one; the layer kinds come from a list or a pattern (_read_hybrid).
    # Qwen3-Next: gated DeltaNet layers, attention every full_attention_interval-th layer with
    # the output gate in q_proj and q/k norms over head_dim, MoE with a gated shared expert
    # (transformers models/qwen3_next/modeling_qwen3_next.py, configuration_qwen3_next.py); its
    # RMSNorms apply (1 + weight) in fp32, as Gemma's
    "qwen3_next": Family({"mlp": "swiglu", "norm": "rmsnorm", "rmsnorm_weight": "fp32", "qk_norm": "head",
                          "router_bias": "false",
                          "shared_expert_gate": "true", "attention_output_gate": "true",
                          "linear_mixer": "gated_deltanet"},
                         renames={"decoder_sparse_step": "moe_layer_step", "linear_conv_kernel_dim": "conv_kernel",
                                  **{k: k for k in ("moe_intermediate_size", "shared_expert_intermediate_size",
                                                    "linear_num_key_heads", "linear_key_head_dim",
                                                    "linear_num_value_heads", "linear_value_head_dim")}},
                         defaults={"tie_word_embeddings": False, "head_dim": 256, "linear_num_key_heads": 16,
                                   "linear_key_head_dim": 128, "linear_num_value_heads": 32,
                                   "linear_value_head_dim": 128, "conv_kernel": 4}),
    # Nemotron-H: single-block layers (Mamba2, attention, a squared-ReLU MLP or an MoE of
    # squared-ReLU experts with one shared expert and an fp32 router with a correction bias), one
    # norm each; the Mamba2 inner width is heads x head_dim; attention without biases, the head
    # never tied; no rotary positions; its RMSNorms apply the weight in fp32 before the cast (transformers
    # models/nemotron_h/modeling_nemotron_h.py, configuration_nemotron_h.py)
    "nemotron_h": Family({"mlp": "relu2", "norm": "rmsnorm", "rmsnorm_weight": "fp32", "linear_mixer": "mamba2",
                          "router_bias": "true", "position_embedding": "none",
                          "shared_expert_gate": "false", "tie_word_embeddings": "false", "attention_bias": "false"},
                         renames={"n_routed_experts": "num_experts", "n_groups": "mamba_n_groups",
                                  "use_conv_bias": "mamba_conv_bias", "use_bias": "mamba_proj_bias",
                                  "moe_shared_expert_intermediate_size": "shared_expert_intermediate_size",
                                  **{k: k for k in ("moe_intermediate_size", "mamba_num_heads", "mamba_head_dim",
                                                    "ssm_state_size", "conv_kernel")}},
                         required=(),
                         defaults={"head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 64,
                                   "ssm_state_size": 128, "mamba_n_groups": 8, "conv_kernel": 4,
                                   "mamba_conv_bias": True, "mamba_proj_bias": False, "intermediate_size": 21504},
                         expects={"mlp_hidden_act": "relu2", "moe_latent_size": None}),
    # Granite 4.0-H: Mamba2 or attention in each layer, a shared MLP (gate and up fused in
    # input_linear) in every layer, and experts beside it when num_local_experts > 0; Mamba2 inner
    # width mamba_expand x hidden_size (transformers models/granitemoehybrid/)
    "granitemoehybrid": Family({"mlp": "swiglu", "norm": "rmsnorm", "linear_mixer": "mamba2", "router_bias": "false",
                                "shared_expert_gate": "false", "gate_up_fused": "true"},
                               renames={"num_local_experts": "num_experts", "mamba_n_heads": "mamba_num_heads",
                                        "mamba_d_state": "ssm_state_size", "mamba_d_conv": "conv_kernel",
                                        **{k: k for k in ("mamba_n_groups", "mamba_conv_bias", "mamba_proj_bias")}},
                               defaults={"tie_word_embeddings": False, "num_experts": 8, "mamba_num_heads": 128,
                                         "ssm_state_size": 256, "mamba_n_groups": 1, "conv_kernel": 4,
                                         "mamba_conv_bias": True, "mamba_proj_bias": False}),
    # Mamba2: every layer a norm and a Mamba2 mixer, no attention and no MLP
    # (transformers models/mamba2/modeling_mamba2.py)
    # Jamba: Mamba1 mixers and attention (layer i attends when i % attn_layer_period ==
    # attn_layer_offset), experts where i % expert_layer_period == expert_layer_offset and dense
    # MLPs elsewhere, the experts as wide as the MLP; no rotary positions, no biases, two norms
    # per layer (transformers models/jamba/; docs/research/jamba-falcon-h1.md)
    "jamba": Family({"mlp": "swiglu", "norm": "rmsnorm", "linear_mixer": "mamba1", "position_embedding": "none",
                     "router_bias": "false", "shared_expert_gate": "false", "attention_bias": "false"},
                    renames={"mamba_d_state": "ssm_state_size", "mamba_d_conv": "conv_kernel",
                             **{k: k for k in ("mamba_conv_bias", "mamba_proj_bias")}},
                    defaults={"tie_word_embeddings": False, "ssm_state_size": 16, "conv_kernel": 4,
                              "mamba_conv_bias": True, "mamba_proj_bias": False, "num_experts_per_tok": 2}),
    # Falcon-H1: every layer attention and a Mamba2 mixer side by side on one normed input, then a
    # SwiGLU MLP; two RMSNorms per layer; the Mamba2 inner width mamba_d_ssm (or mamba_expand x
    # hidden_size), its gated norm's weight only with mamba_rms_norm, out_proj's bias
    # projectors_bias (transformers models/falcon_h1/; docs/research/jamba-falcon-h1.md sec. 3)
    "falcon_h1": Family({"mlp": "swiglu", "norm": "rmsnorm", "linear_mixer": "mamba2", "mamba_gated_norm": "false"},
                        renames={"mamba_n_heads": "mamba_num_heads", "mamba_d_state": "ssm_state_size",
                                 "mamba_d_conv": "conv_kernel",
                                 **{k: k for k in ("mamba_n_groups", "mamba_conv_bias", "mamba_proj_bias")}},
                        defaults={"tie_word_embeddings": False, "mamba_num_heads": 128, "ssm_state_size": 256,
                                  "mamba_n_groups": 1, "conv_kernel": 4, "mamba_conv_bias": True,
                                  "mamba_proj_bias": False},
                        switches={"mamba_rms_norm": ("mamba_gated_norm", "true", "false")}),
    "mamba2": Family({"norm": "rmsnorm", "linear_mixer": "mamba2", "position_embedding": "none"},
                     renames={"num_heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "state_size": "ssm_state_size",
                              "n_groups": "mamba_n_groups", "use_conv_bias": "mamba_conv_bias",
                              "use_bias": "mamba_proj_bias", "conv_kernel": "conv_kernel"},
                     required=(),
                     defaults={"tie_word_embeddings": False, "mamba_num_heads": 128, "mamba_head_dim": 64,
                               "ssm_state_size": 128, "mamba_n_groups": 8, "conv_kernel": 4,
                               "mamba_conv_bias": True, "mamba_proj_bias": False, "hidden_size": 4096,
                               "num_hidden_layers": 64, "vocab_size": 32768}),
    # Phi-1, Phi-1.5, Phi-2: attention and a GELU (gelu_new) MLP in parallel on one LayerNorm, q, k,
    # v, the output projection (dense), fc1 and fc2 with biases, a rotary part of each head
    # (partial_rotary_factor), an output head with a bias (transformers models/phi/modeling_phi.py)
    "phi": Family({"mlp": "gelu", "norm": "layernorm", "norm_placement": "parallel", "attention_bias": "true",
                   "o_proj_bias": "true", "mlp_bias": "true", "gelu_kernel": "composite", "lm_head_bias": "true"},
                  renames={"resid_pdrop": "dropout"},
                  defaults={"tie_word_embeddings": False},
                  # qk_layernorm: a LayerNorm (weight and bias) over head_dim on the queries and on the keys
                  switches={"qk_layernorm": ("qk_norm", "head", "none")}),
    "gpt2": Family({"mlp": "gelu", "norm": "layernorm", "position_embedding": "learned",
                    "attention_bias": "true", "o_proj_bias": "true", "mlp_bias": "true",
                    "tie_word_embeddings": "true", "qkv_fused": "true", "gelu_kernel": "composite",
                    "eager_softmax": "working"},
                   renames={"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
                            "n_positions": "max_position_embeddings", "n_inner": "intermediate_size",
                            "resid_pdrop": "dropout"},
                   required=()),
}
#: fields some families have, under the library's names
EXTRA = {"num_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
         "shared_expert_intermediate_size", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank",
         "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "attention_bias", "dropout"}
#: families whose attention_bias also gives o_proj a bias (LlamaAttention and its copies)
O_PROJ_FOLLOWS = ("llama", "mistral", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "olmo2", "granite", "gpt_oss",
                  "cohere", "cohere2", "qwen3_next", "granitemoehybrid", "falcon_h1")
#: the fields of a hybrid's config that _read_hybrid reads (layer kinds, widths set together)
HYBRID_FIELDS = {
    "qwen3_next": ("layer_types", "full_attention_interval", "mlp_only_layers"),
    "nemotron_h": ("hybrid_override_pattern", "layers_block_type", "layer_types", "num_hidden_layers",
                   "attention_bias", "tie_word_embeddings", "n_shared_experts", "expand", "mamba_proj_bias",
                   "mamba_ssm_cache_dtype"),
    "granitemoehybrid": ("layer_types", "layers_block_type", "mamba_expand", "mamba_d_head",
                         "shared_intermediate_size", "intermediate_size", "position_embedding_type"),
    "jamba": ("attn_layer_period", "attn_layer_offset", "expert_layer_period", "expert_layer_offset",
              "mamba_expand", "mamba_dt_rank", "num_experts", "num_local_experts", "layers_block_type", "layer_types"),
    "mamba2": ("expand",),
    "falcon_h1": ("mamba_d_ssm", "mamba_expand", "mamba_d_head", "attn_layer_indices", "mamba_use_mlp",
                  "projectors_bias", "layers_block_type", "layer_types"),
}
#: fields of hybrids' configs with no effect on memory memform models (activations' and
#: kernels' settings, initialisation, scalars of the forward pass)
HYBRID_NO_EFFECT = {"mamba_hidden_act", "time_step_min", "time_step_max", "time_step_floor", "time_step_limit",
                    "time_step_rank", "rescale_prenorm_residual", "residual_in_fp32", "chunk_size",
                    "mamba_chunk_size", "num_logits_to_keep", "use_mamba_kernels", "mamba_ssm_cache_dtype",
                    "position_embedding_type", "norm_eps", "hidden_dropout",
                    "mlp_hidden_act", "moe_latent_size", "mamba_step_size", "layer_norm_epsilon", "rope_type",
                    "mamba_dt_rank", "init_std", "emb_init_std", "init_method", "normalization_function",
                    "rms_norm", "time_step_limit", "embedding_multiplier", "lm_head_multiplier", "key_multiplier",
                    "attention_in_multiplier", "attention_out_multiplier", "ssm_in_multiplier",
                    "ssm_out_multiplier", "mlp_multipliers", "ssm_multipliers", "mamba_norm_before_gate"}
#: config fields that describe sliding-window layers (read where a family names a window scheme)
WINDOW_FIELDS = ("sliding_window", "use_sliding_window", "max_window_layers", "layer_types")
#: what HF's null means where it is not "absent, derive it": q_lora_rank = None builds no query
#: compression (q_proj is a plain hidden x heads * qk_head_dim matrix), the library's 0
NULL_MEANS = {"q_lora_rank": 0}
#: the smallest value of config fields that pin a rule (a rule itself is only non-negative)
PINNED_MIN = {"num_key_value_heads": 1, "head_dim": 1, "moe_intermediate_size": 1}


@dataclass(frozen=True)
class Config:
    """What a config.json sets (library names -> values) and what it did not use."""

    path: str
    values: dict
    ignored: tuple  # fields with no memory effect
    unknown: tuple  # fields memform does not understand (as they may be printed)


def _json_shown(value) -> str:
    """A parsed JSON value as it may be echoed (exact fractions as decimals)."""
    if isinstance(value, str):
        value = value[:MAX_SHOWN + 1]  # cut before encoding: the string may be megabytes
    plain = json.dumps(value, ensure_ascii=False, default=lambda x: int(x) if x.denominator == 1 else float(x))
    return shown(plain)


#: the tokens that decide where a member sits: a string (with the colon after it when it names a
#: member) and the brackets
#: a string (the unrolled form "[^"\\]*(?:\\.[^"\\]*)*": one step per run of plain characters, not
#: one alternation per character, so a 9 MB string scans in milliseconds), or a bracket
_JSON_TOKENS = re.compile(r'(?P<string>"[^"\\]*(?:\\.[^"\\]*)*")(?P<colon>\s*:)?|[{}\[\]]')


@dataclass(frozen=True)
class _Source:
    """The decoded text of a config file and the name it is shown by, to locate errors."""

    path: str
    text: str
    start: int = 0  #: where the object being read begins (a nested text_config, vision_config)

    def within(self, key: str) -> "_Source":
        """The same text, its fields looked up in the object that member ``key`` holds."""
        found = self._member(key, 0)
        return _Source(self.path, self.text, found[1] if found else self.start)

    def _member(self, key: str, nth: int) -> tuple[int, int] | None:
        """Where the ``nth`` member named ``key`` of the object at ``start`` begins and where its
        name ends: a member of this object, not of one nested in it (text_config and the top level
        both name vocab_size)."""
        found = self._members.get(key, ())
        return found[nth] if nth < len(found) else None

    @functools.cached_property
    def _members(self) -> dict:
        """The members of the object at ``start``: name -> [(where it begins, where its name
        ends)], in order; one scan of the text, strings and brackets found by a regex."""
        members: dict = {}
        text = self.text
        begin = text.find("{", self.start)
        if begin < 0:
            return members
        depth = 0
        for token in _JSON_TOKENS.finditer(text, begin):
            t = token.group()
            if t[0] == '"':
                if depth == 1 and token.group("colon"):
                    try:
                        name = json.loads(token.group("string"))
                    except ValueError:
                        continue
                    members.setdefault(name, []).append((token.start(), token.end()))
            elif t in "{[":
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    break
        return members

    def span_at(self, pos: int, length: int = 1) -> Span:
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        line = self.text[start:end if end >= 0 else len(self.text)].removesuffix("\r")
        if len(line) > MAX_LINE or not all(c.isprintable() or c == "\t" for c in line):
            line = ""  # not echoed: the location and the message name the culprit
        return Span(self.path, self.text.count("\n", 0, pos) + 1, pos - start + 1, length, line)

    def span(self, key: str, nth: int = 0) -> Span | None:
        """Where member ``key`` of this object appears (its ``nth`` occurrence), or None."""
        found = self._member(key, nth)
        return self.span_at(found[0], len(key) + 2) if found else None

    def error(self, cls, message: str, key: str | None = None, nth: int = 0, hint: str | None = None):
        """An error located at field ``key``, or naming the file where it cannot be located."""
        span = self.span(key, nth) if key is not None else None
        return cls(message if span else f"{self.path}: {message}", span, hint)


@dataclass(frozen=True)
class _Refused:
    """A number the reader does not accept, kept until the error can name its field."""

    text: str
    reason: str


def _int(text: str):
    value = int(text) if len(text) <= MAX_NUMBER_CHARS else None  # int() of 4,301 digits raises
    if value is None or abs(value) >= MAX_NUMBER:
        return _Refused(text, "is too large (config.json numbers must be below 2^63)")
    return value


def _float(text: str):
    """An exact Fraction of a float literal (``0.1`` is 1/10), or what refuses it."""
    exponent = text.lower().partition("e")[2]
    if len(text) > MAX_NUMBER_CHARS or len(exponent.lstrip("+-").lstrip("0")) > 6:
        return _Refused(text, "is out of range")
    number = Decimal(text)
    if number.copy_abs() >= MAX_NUMBER:
        return _Refused(text, "is too large (config.json numbers must be below 2^63)")
    if number.as_tuple().exponent < -MAX_PLACES:
        return _Refused(text, f"has more than {MAX_PLACES} decimal places")
    return Fraction(number)


_INFINITE = "is not a finite number"
#: fields with no memory effect where transformers writes an infinite bound (Mamba2Config's
#: time_step_limit = (0.0, inf), json.dumps'd as Infinity)
INFINITE_OK = {"time_step_limit"}


def _constant(text: str):
    return _Refused(text, _INFINITE)


def _refused(value) -> _Refused | None:
    """The first refused number inside a parsed value, or None."""
    if isinstance(value, _Refused):
        return value
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((bad for bad in map(_refused, children) if bad is not None), None)


def _read(path: Path, name: str) -> _Source:
    """The file's text, decoded by its BOM or its leading zero bytes (UTF-8, -16, -32)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read '{name}': {exc.strerror or type(exc).__name__}") from None
    except ValueError:  # a NUL character in the path
        raise UsageError(f"cannot read '{name}': the path contains a NUL character") from None
    if len(data) > MAX_BYTES:
        raise ResourceLimitError(f"{name}: larger than {MAX_BYTES // 2**20} MiB; a config.json is a few kilobytes")
    encoding = json.detect_encoding(data)
    try:
        return _Source(name, data.decode(encoding))
    except UnicodeDecodeError as exc:
        where = _Source(name, data.decode(encoding, "replace"))
        pos = len(data[:exc.start].decode(encoding, "replace"))
        raise SourceError(f"not valid {encoding.upper().removesuffix('-SIG')} text: {exc.reason} "
                          f"(byte {exc.start})", where.span_at(pos),
                          hint="save the file as UTF-8 (UTF-16 and UTF-32 are read too)") from None


_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _max_depth(text: str) -> int:
    """How deeply objects and arrays nest (brackets inside strings do not count)."""
    outside = re.sub(r'"[^"\\]*(?:\\.[^"\\]*)*"', "", text)
    brackets = re.sub(r"[^\[\]{}]+", "", outside)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _parse(src: _Source) -> dict:
    depth = _max_depth(src.text)
    if depth > MAX_DEPTH:
        raise ResourceLimitError(f"{src.path}: objects and arrays nest {depth} levels deep; "
                                 f"the limit is {MAX_DEPTH}")

    def unique(pairs):
        obj = {}
        for key, value in pairs:
            if key in obj:
                raise src.error(SourceError, f"duplicate key '{shown(key)}' (JSON readers differ on which "
                                "one counts)", key, nth=1, hint="keep one of them")
            obj[key] = value
        return obj

    try:
        data = json.loads(src.text, object_pairs_hook=unique, parse_int=_int, parse_float=_float,
                          parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise SourceError(f"not valid JSON: {exc.msg.lower()}", src.span_at(exc.pos)) from None
    except RecursionError:  # not reached below MAX_DEPTH; kept as a guard
        raise ResourceLimitError(f"{src.path}: objects and arrays nest too deeply") from None
    if not isinstance(data, dict):
        raise SourceError(f"{src.path}: a config.json holds one JSON object")
    return data


def _load(path: str | Path) -> tuple[_Source, dict]:
    """The text and the JSON object of a config file, every check of the file's form made."""
    path = Path(path)
    src = _read(path, shown(str(path), MAX_PATH_SHOWN))
    data = _parse(src)
    for key, raw in data.items():
        bad = _refused(raw)
        if bad is not None and not (key in INFINITE_OK and bad.reason == _INFINITE):
            raise src.error(DomainError, f"field '{shown(key)}': {shown(bad.text)} {bad.reason}", key)
    return src, data


def read_json(path: str | Path) -> dict:
    """The JSON object of a config file, read with the checks of :func:`read_config`
    (encoding, size, depth, duplicate keys, numbers; floats as exact Fractions)."""
    return _load(path)[1]


def read_config(path: str | Path, library) -> Config:
    """Read a Hugging Face config.json; every value is validated against the library.

    A vision-language config (``gemma3``) nests its language model under ``text_config`` and its
    image encoder under ``vision_config``: both are read, and reported fields are named by path
    (``text_config.rope_theta``).

    Examples
    --------
    >>> import engine, json, tempfile, os
    >>> d = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    ...      "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False); json.dump(d, f); f.close()
    >>> read_config(f.name, engine.load()).values["mlp"]
    'swiglu'
    >>> os.unlink(f.name)
    """
    src, data = _load(path)
    supported = "supported: " + ", ".join(sorted(FAMILIES.keys() | MULTIMODAL.keys()))
    if "model_type" not in data:
        raise SourceError(f"{src.path}: missing field 'model_type'", hint=supported)
    model_type = data["model_type"]
    if not isinstance(model_type, str) or model_type not in FAMILIES.keys() | MULTIMODAL.keys():
        short = isinstance(model_type, str) and len(model_type) <= MAX_SHOWN  # difflib is slow on megabytes
        close = did_you_mean(model_type, FAMILIES.keys() | MULTIMODAL.keys()) if short else None
        raise src.error(DomainError, f"unsupported model_type {_json_shown(model_type)}", "model_type",
                        hint=f"{close} {supported}" if close else supported)
    if model_type in MULTIMODAL:
        values, given, ignored, unknown = _read_multimodal(src, data, library, MULTIMODAL[model_type])
    else:
        values, given, ignored, unknown = _read_text(src, data, library, model_type)
    # every value, fixed and derived ones too, must be valid for the library (domains, choices)
    for name, value in values.items():
        where = given.get(name)
        values[name] = _check(library, name, value, where[0] if where else src, where[1] if where else None)
    return Config(src.path, values, tuple(ignored), tuple(unknown))


@dataclass(frozen=True)
class Vision:
    """An image encoder's vision_config: its fields under the library's names, the defaults of
    transformers' config class where a field is left out, the fields with no effect."""

    model_types: tuple  # the model_type a vision_config may name (the first where it names none)
    fields: dict
    defaults: dict
    no_effect: frozenset
    #: true/false fields that must have one value (SigLIP's vision_use_head: false, no pooling head)
    required_flags: dict = field(default_factory=dict)
    #: the field giving the width the encoder hands the language model, which must be its hidden_size
    output_field: str | None = None
    #: Qwen2-VL: the MLP is embed_dim x mlp_ratio wide (a whole number, 4 where it is left out)
    mlp_ratio: bool = False
    #: fields that are non-empty lists read as their length: field -> (library name, default)
    lists: dict = field(default_factory=dict)
    #: true/false fields that set a library option: field -> (option, default where left out)
    switches: dict = field(default_factory=dict)


_ENCODER_FIELDS = {"hidden_size": "vision_hidden_size", "intermediate_size": "vision_intermediate_size",
                   "num_hidden_layers": "vision_num_hidden_layers", "patch_size": "vision_patch_size",
                   "image_size": "vision_image_size"}
_ENCODER_NO_EFFECT = {"model_type", "num_attention_heads", "hidden_act", "layer_norm_eps", "attention_dropout",
                      "torch_dtype", "dtype", "initializer_range", "transformers_version", "num_channels"}
#: SigLIP (transformers models/siglip/configuration_siglip.py SiglipVisionConfig)
SIGLIP = Vision(("siglip_vision_model",), _ENCODER_FIELDS,
                {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "patch_size": 16,
                 "image_size": 224},
                frozenset(_ENCODER_NO_EFFECT), required_flags={"vision_use_head": False})
#: SigLIP as LLaVA builds it (AutoModel over vision_config: SiglipVisionModel with its pooling head
#: unless vision_use_head is false, the class's default being true; Granite Vision)
SIGLIP_LLAVA = replace(SIGLIP, no_effect=SIGLIP.no_effect | {"projection_dim", "vocab_size"},
                       required_flags={}, switches={"vision_use_head": ("vision_head", True)})
#: Qwen2.5-VL's encoder (transformers models/qwen2_5_vl/configuration_qwen2_5_vl.py
#: Qwen2_5_VLVisionConfig; the Hub's files name it qwen2_5_vl, transformers 5 qwen2_5_vl_vision):
#: the window, the full-attention blocks and the heads have no parameters; out_hidden_size must be
#: the language model's width (checked), in_chans (the Hub's spelling) 3
QWEN2_5_VL_VISION = Vision(("qwen2_5_vl", "qwen2_5_vl_vision"),
                           {"depth": "vision_num_hidden_layers", "hidden_size": "vision_hidden_size",
                            "intermediate_size": "vision_intermediate_size", "patch_size": "vision_patch_size",
                            "temporal_patch_size": "vision_temporal_patch_size",
                            "spatial_merge_size": "vision_spatial_merge_size"},
                           {"depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "patch_size": 14,
                            "temporal_patch_size": 2, "spatial_merge_size": 2},
                           frozenset(_ENCODER_NO_EFFECT | {"num_heads", "window_size", "fullatt_block_indexes",
                                                           "tokens_per_second", "spatial_patch_size", "in_chans",
                                                           "in_channels", "out_hidden_size"}),
                           output_field="out_hidden_size")
#: Qwen2-VL's encoder (transformers models/qwen2_vl/configuration_qwen2_vl.py Qwen2VLVisionConfig;
#: the Hub's files name it qwen2_vl, transformers 5 qwen2_vl_vision): embed_dim is the encoder's
#: width, hidden_size the merger's output (the language model's width, checked), the MLP
#: embed_dim x mlp_ratio wide (modeling_qwen2_vl.py Qwen2VLVisionBlock)
QWEN2_VL_VISION = Vision(("qwen2_vl", "qwen2_vl_vision"),
                         {"depth": "vision_num_hidden_layers", "embed_dim": "vision_hidden_size",
                          "patch_size": "vision_patch_size", "temporal_patch_size": "vision_temporal_patch_size",
                          "spatial_merge_size": "vision_spatial_merge_size"},
                         {"depth": 32, "embed_dim": 1280, "patch_size": 14, "temporal_patch_size": 2,
                          "spatial_merge_size": 2},
                         frozenset(_ENCODER_NO_EFFECT | {"num_heads", "spatial_patch_size", "in_chans", "in_channels",
                                                         "hidden_size", "rope_parameters"}),
                         output_field="hidden_size", mlp_ratio=True)
#: CLIP's encoder as LLaVA builds it (transformers models/clip/configuration_clip.py
#: CLIPVisionConfig: a vision_config that is given but partial takes the class's ViT-B/32
#: defaults, not LLaVA's CLIP-L/336; docs/research/llava.md)
CLIP = Vision(("clip_vision_model",), _ENCODER_FIELDS,
              {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "patch_size": 32,
               "image_size": 224},
              frozenset(_ENCODER_NO_EFFECT | {"projection_dim", "vocab_size"}))
#: Mllama's encoder (transformers models/mllama/configuration_mllama.py MllamaVisionConfig): local
#: and global layers, tiles, the aspect-ratio layouts its position tables cover (a list, read as its
#: length); the intermediate layers the projector reads are in vision_output_dim
MLLAMA_VISION = Vision(("mllama_vision_model",),
                       {**_ENCODER_FIELDS, "num_global_layers": "vision_global_layers",
                        "max_num_tiles": "vision_max_num_tiles", "vision_output_dim": "vision_output_dim"},
                       {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "patch_size": 14,
                        "image_size": 448, "num_global_layers": 8, "max_num_tiles": 4, "vision_output_dim": 7680},
                       frozenset(_ENCODER_NO_EFFECT | {"attention_heads", "norm_eps", "intermediate_layers_indices",
                                                       "tie_word_embeddings"}),
                       lists={"supported_aspect_ratios": ("vision_aspect_ratios", 8)})
#: Pixtral's encoder (transformers models/pixtral/configuration_pixtral.py PixtralVisionConfig): its
#: rotary positions have no parameters; its heads size the rotary table vLLM caches
PIXTRAL_VISION = Vision(("pixtral",),
                        {**_ENCODER_FIELDS, "num_attention_heads": "vision_num_attention_heads"},
                        {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "patch_size": 16,
                         "image_size": 1024, "num_attention_heads": 16},
                        frozenset((_ENCODER_NO_EFFECT - {"num_attention_heads"})
                                  | {"head_dim", "rope_theta", "rope_parameters"}))
#: Llama 4's encoder (transformers models/llama4/configuration_llama4.py Llama4VisionConfig); the
#: pixel shuffle, the rotary table and the projector's bias flag (the code builds none) have no
#: parameters
LLAMA4_VISION = Vision(("llama4_vision_model",),
                       {**_ENCODER_FIELDS, "projector_input_dim": "vision_projector_input_dim",
                        "projector_output_dim": "vision_projector_output_dim", "vision_output_dim": "vision_output_dim"},
                       {"hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "patch_size": 14,
                        "image_size": 448, "projector_input_dim": 4096, "projector_output_dim": 4096,
                        "vision_output_dim": 7680},
                       frozenset(_ENCODER_NO_EFFECT | {"norm_eps", "pixel_shuffle_ratio", "projector_dropout",
                                                       "rope_theta", "vision_feature_layer",
                                                       "vision_feature_select_strategy", "multi_modal_projector_bias"}))


@dataclass(frozen=True)
class Multimodal:
    """A vision-language ``model_type``: its language model's family, its encoder and projector."""

    text: str  # the model_type of text_config
    vision: Vision
    fixed: dict  # the library's options for the encoder and the projector
    #: top-level fields read into the library (config field -> library name)
    fields: dict = field(default_factory=dict)
    #: what transformers assumes where the top level leaves a field out
    defaults: dict = field(default_factory=dict)
    #: where transformers reads tie_word_embeddings: "top" (Gemma 3: the top level, true where it is
    #: left out), "text" (Llama 4: each part reads its own config), "either" (Qwen2.5-VL, LLaVA: tied
    #: when the top level or text_config says so, false by default) or "outer" (LLaVA-NeXT: the top
    #: level alone, false by default; text_config's is not read)
    tie_from: str = "top"
    #: the model_type text_config may name (the family's own where None)
    text_type: str | None = None
    #: the language model's fields may sit at the top level instead of in text_config (the Hub's
    #: Qwen2.5-VL files; transformers 5 builds text_config from them)
    flat_text: bool = False
    #: the language models text_config may name, the first where it names none (LLaVA builds
    #: whichever AutoModel its text_config names); empty: only ``text``
    text_types: tuple = ()
    #: top-level fields transformers keeps but never reads for the model (LLaVA's vocab_size)
    no_effect: frozenset = frozenset()
    #: a reader of the kind's own top-level fields (values, given and ignored filled in place), and
    #: the fields it reads
    extra: object = None
    extra_keys: frozenset = frozenset()
    #: other encoders vision_config may name: (Vision, the library options it sets)
    vision_alternatives: tuple = ()


#: what transformers' config classes assume for a field a text_config leaves out (LLaVA's Hub
#: files give only what differs: llava-1.5-7b-hf's text_config is a vocab_size and a context length
#: over LlamaConfig's defaults); transformers models/{llama,mistral,qwen2}/configuration_*.py
TEXT_CLASS_DEFAULTS = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "max_position_embeddings": 2048},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768},
    "granite": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                "num_attention_heads": 32, "max_position_embeddings": 2048},
}
#: the language models LLaVA checkpoints pair with their encoder (llava-hf: Vicuna / Llama 2, Mistral,
#: Qwen2; IBM's Granite Vision: Granite)
_LLAVA_TEXT = ("llama", "mistral", "qwen2", "granite")
#: LLaVA's encoders besides CLIP: SigLIP (Granite Vision)
_LLAVA_ENCODERS = ((SIGLIP_LLAVA, {"vision_tower": "siglip"}),)
_LLAVA_FIELDS = frozenset({"vision_feature_layer", "multimodal_projector_bias", "vision_feature_select_strategy"})
#: LlavaNextConfig's image_grid_pinpoints where a config leaves it out
LLAVA_NEXT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
#: vocab_size: deprecated, the embedding is text_config's; image_seq_length: the base image's tokens,
#: which the processor counts from the patch grid (as _read_llava does)
_LLAVA_NO_EFFECT = frozenset({"vocab_size", "ignore_index", "projector_hidden_act", "use_image_newline_parameter",
                              "image_token_index", "image_token_id", "image_seq_length"})


def _feature_layers(src: "_Source", layer) -> list:
    """vision_feature_layer as a list: the encoder layers (indices) a projector reads."""
    layers = layer if isinstance(layer, list) else [layer]
    if not layers or any(isinstance(i, bool) or not isinstance(i, int) for i in layers):
        raise src.error(DomainError, "field 'vision_feature_layer' must be a layer index or a non-empty list of "
                        f"them, not {_json_shown(layer)}", "vision_feature_layer")
    return layers


def _read_projector_bias(src: "_Source", data: dict, values: dict, given: dict) -> None:
    """multimodal_projector_bias (true where it is left out: LlavaConfig, Mistral3Config)."""
    values["mm_projector_bias"] = "true" if _flag(src, data, "multimodal_projector_bias", True) else "false"
    if "multimodal_projector_bias" in data:
        given["mm_projector_bias"] = (src, "multimodal_projector_bias")


def _read_llava(src: "_Source", data: dict, values: dict, given: dict) -> None:
    """LLaVA's own top-level fields: how many encoder layers the projector reads
    (vision_feature_layer, an index or a list of them), its biases, and the text tokens one
    image becomes: (image_size / patch_size)^2 patches, CLIP's class token too under
    vision_feature_select_strategy "full", SigLIP's first patch dropped under "default"
    (LlavaProcessor; SigLIP has no class token); LLaVA-NeXT adds its largest
    grid of image_grid_pinpoints, each row ending in image_newline (LlavaNextProcessor)."""
    if "vocab_size" in data:  # deprecated and not read (the embedding is text_config's), but not garbage
        _whole(src, data, "vocab_size", None, minimum=1)
    layer = data.get("vision_feature_layer", -2)
    layers = _feature_layers(src, layer)
    values["vision_feature_layers"] = sympy.Integer(len(layers))
    encoder_layers = int(values["vision_num_hidden_layers"])
    depth = max(i + encoder_layers + 1 if i < 0 else i for i in layers)  # vLLM's get_layer_index
    if not 0 <= depth <= encoder_layers:
        raise src.error(DomainError, f"vision_feature_layer {_json_shown(layer)} names a layer the encoder's "
                        f"{encoder_layers} do not have", "vision_feature_layer")
    values["vision_feature_depth"] = sympy.Integer(depth)
    if "vision_feature_layer" in data:
        given["vision_feature_layers"] = (src, "vision_feature_layer")
        given["vision_feature_depth"] = (src, "vision_feature_layer")
    _read_projector_bias(src, data, values, given)
    strategy = data.get("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise src.error(DomainError, f"vision_feature_select_strategy {_json_shown(strategy)} is not 'default' or "
                        "'full'", "vision_feature_select_strategy")
    side = int(values["vision_image_size"]) // int(values["vision_patch_size"])
    if side < 1:
        raise src.error(DomainError, "vision_config.image_size is smaller than its patch_size", "vision_config")
    # CLIP's class token is kept under "full"; SigLIP has none, and "default" drops the first token
    tokens = side * side + (1 if values["vision_tower"] == "clip" else 0) - (1 if strategy == "default" else 0)
    if values["mm_projector"] == "llava_next":  # the base image and the largest grid of tiles
        tile = int(values["vision_image_size"])
        grid = data.get("image_grid_pinpoints", LLAVA_NEXT_PINPOINTS)
        if not isinstance(grid, list) or not grid or any(
                not isinstance(pair, list) or len(pair) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < tile for v in pair) for pair in grid):
            raise src.error(DomainError, "field 'image_grid_pinpoints' must be a non-empty list of [height, width] "
                            f"pairs of at least the image_size ({tile})", "image_grid_pinpoints")
        extra, h, w = max((side * (h // tile) * side * (w // tile) + side * (h // tile), h, w) for h, w in grid)
        tokens += extra
        # the image vLLM's profile run takes is the one with the most tokens; its encoder input is
        # the base image and the grid's crops (LlavaNextProcessingInfo.get_image_size_with_most_features)
        values["mm_tiles_per_image"] = sympy.Integer(1 + (h // tile) * (w // tile))
    values["mm_tokens_per_image"] = sympy.Integer(tokens)


def _read_mistral3(src: "_Source", data: dict, values: dict, given: dict) -> None:
    """Mistral 3's own top-level fields: the encoder layers the projector reads, its biases, and the
    tokens of the largest image: (image_size / (patch_size x spatial_merge_size))^2 (vLLM's Pixtral
    processor: a row of merged patches per image row, the break tokens not embedded)."""
    layers = _feature_layers(src, data.get("vision_feature_layer", -1))
    values["vision_feature_layers"] = sympy.Integer(len(layers))
    if "vision_feature_layer" in data:
        given["vision_feature_layers"] = (src, "vision_feature_layer")
    _read_projector_bias(src, data, values, given)
    merge = _whole(src, data, "spatial_merge_size", 2, minimum=1)
    if merge is None:  # Mistral3PatchMerger needs it
        raise src.error(DomainError, "field 'spatial_merge_size' must be a whole number >= 1, not null",
                        "spatial_merge_size")
    values["vision_spatial_merge_size"] = sympy.Integer(merge)
    if "spatial_merge_size" in data:
        given["vision_spatial_merge_size"] = (src, "spatial_merge_size")
    side = -(-int(values["vision_image_size"]) // (int(values["vision_patch_size"]) * merge))
    values["mm_tokens_per_image"] = sympy.Integer(side * side)


#: Gemma 3 (transformers models/gemma3): Gemma3ForConditionalGeneration holds a Gemma3TextModel,
#: a SigLIP vision tower (SiglipVisionModel, vision_config.model_type siglip_vision_model) and the
#: Gemma3MultiModalProjector (a vision_hidden x hidden matrix and an RMSNorm).  Llama 4
#: (models/llama4): Llama4ForConditionalGeneration holds Llama4ForCausalLM, Llama4VisionModel and
#: Llama4MultiModalProjector (docs/research/llama4.md)
MULTIMODAL = {
    "gemma3": Multimodal("gemma3_text", SIGLIP, {"vision_tower": "siglip", "mm_projector": "gemma3"},
                         fields={"mm_tokens_per_image": "mm_tokens_per_image"},
                         defaults={"mm_tokens_per_image": 256}),
    # Llama 3.2 Vision (models/mllama): MllamaForConditionalGeneration holds the language model
    # with its cross-attention layers, the tiled encoder and a one-layer projector with a bias;
    # each part reads its own tie_word_embeddings
    "mllama": Multimodal("mllama_text_model", MLLAMA_VISION, {"vision_tower": "mllama", "mm_projector": "mllama"},
                         tie_from="text"),
    # Mistral Small 3.1 (models/mistral3): Mistral3ForConditionalGeneration holds Mistral's language
    # model, the Pixtral encoder and the patch-merging projector; the checkpoint's output head is its
    # own (text_config's tie_word_embeddings; transformers 5 ties it only where the top level says so)
    "mistral3": Multimodal("mistral", PIXTRAL_VISION, {"vision_tower": "pixtral", "mm_projector": "mistral3"},
                           tie_from="text", no_effect=frozenset({"projector_hidden_act"}), extra=_read_mistral3,
                           extra_keys=frozenset({"vision_feature_layer", "multimodal_projector_bias",
                                                 "spatial_merge_size"})),
    "llama4": Multimodal("llama4_text", LLAMA4_VISION, {"vision_tower": "llama4", "mm_projector": "llama4"},
                         tie_from="text"),
    # Qwen2.5-VL (models/qwen2_5_vl): Qwen2_5_VLForConditionalGeneration holds Qwen2.5's language
    # model (q, k, v biases) and the vision transformer with its patch merger
    "qwen2_5_vl": Multimodal("qwen2", QWEN2_5_VL_VISION, {"vision_tower": "qwen2_5_vl", "mm_projector": "none"},
                             tie_from="either", text_type="qwen2_5_vl_text", flat_text=True),
    # Qwen2-VL (models/qwen2_vl): the same language model; its encoder has LayerNorms and a
    # two-layer MLP (docs/research/qwen2-vl.md)
    "qwen2_vl": Multimodal("qwen2", QWEN2_VL_VISION, {"vision_tower": "qwen2_vl", "mm_projector": "none"},
                           tie_from="either", text_type="qwen2_vl_text", flat_text=True),
    # LLaVA-1.5 and LLaVA-NeXT (models/llava, models/llava_next): a CLIP encoder, a two-layer
    # projector and the language model text_config names (llama where it names none); the
    # top-level vocab_size is not read (the embedding is text_config.vocab_size)
    "llava": Multimodal("llama", CLIP, {"vision_tower": "clip", "mm_projector": "llava"}, tie_from="either",
                        text_types=_LLAVA_TEXT, no_effect=_LLAVA_NO_EFFECT, extra=_read_llava,
                        extra_keys=_LLAVA_FIELDS, vision_alternatives=_LLAVA_ENCODERS),
    # LlavaNextConfig copies no tie_word_embeddings up from text_config: only the top level ties
    "llava_next": Multimodal("llama", CLIP, {"vision_tower": "clip", "mm_projector": "llava_next"},
                             tie_from="outer", text_types=_LLAVA_TEXT, no_effect=_LLAVA_NO_EFFECT,
                             extra=_read_llava, extra_keys=_LLAVA_FIELDS | {"image_grid_pinpoints"},
                             vision_alternatives=_LLAVA_ENCODERS),
}
#: top-level fields of a vision-language config with no memory effect (token ids of the image markers)
MULTIMODAL_NO_EFFECT = {"boi_token_index", "eoi_token_index", "image_token_index", "image_token_id",
                        "boi_token_id", "eoi_token_id", "video_token_id", "vision_start_token_id",
                        "vision_end_token_id", "vision_token_id"}


def _object(src: _Source, data: dict, key: str) -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        if key not in data:
            raise SourceError(f"{src.path}: missing field '{key}'", hint="a vision-language config.json nests "
                              "its language model under text_config and its image encoder under vision_config")
        raise src.error(DomainError, f"field '{key}' must be an object, not {_json_shown(value)}", key)
    return value


def _read_multimodal(src: _Source, data: dict, library, kind: Multimodal):
    """The library's values of a vision-language config: text_config read as its own family,
    vision_config as the encoder's widths, the top level's image fields."""
    text_type = kind.text_type or kind.text
    nested = "text_config" in data or not kind.flat_text
    family = kind.text
    if nested:
        text = _object(src, data, "text_config")
        text_src, prefix = src.within("text_config"), "text_config."
        if kind.text_types:  # LLaVA: the language model text_config names
            family = text.get("model_type", kind.text_types[0])
            if family not in kind.text_types:
                raise text_src.error(DomainError, f"text_config.model_type {_json_shown(family)} is not one of "
                                     + ", ".join(kind.text_types), "model_type")
        elif text.get("model_type", text_type) != text_type:
            raise text_src.error(DomainError, f"text_config.model_type {_json_shown(text['model_type'])} is not "
                                 f"'{text_type}'", "model_type")
    else:  # the language model's fields at the top level, beside vision_config
        text = {k: v for k, v in data.items()
                if k != "vision_config" and k not in MULTIMODAL_NO_EFFECT and k not in kind.fields}
        text_src, prefix = src, ""
    values, given, ignored, unknown = _read_text(text_src, text, library, family, prefix=prefix,
                                                 class_defaults=TEXT_CLASS_DEFAULTS.get(family) if kind.text_types else None)
    values.update(kind.fixed)
    vision = _object(src, data, "vision_config")
    vision_src = src.within("vision_config")
    encoder = kind.vision
    for alternative, options in kind.vision_alternatives:  # LLaVA: CLIP, or SigLIP (Granite Vision)
        if vision.get("model_type") in alternative.model_types:
            encoder = alternative
            values.update(options)
    types = encoder.model_types
    if vision.get("model_type", types[0]) not in types:
        raise vision_src.error(DomainError, f"vision_config.model_type {_json_shown(vision['model_type'])} is "
                               f"not '{types[-1]}'", "model_type")
    for key in ("num_channels", "in_channels", "in_chans"):
        if vision.get(key, 3) != 3:
            raise vision_src.error(DomainError, f"vision_config.{key} {_json_shown(vision[key])}: memform's image "
                                   "encoders embed 3-channel (RGB) patches", key)
    out = encoder.output_field
    if out and vision.get(out, values.get("hidden_size")) != values.get("hidden_size"):
        raise vision_src.error(DomainError, f"vision_config.{out} {_json_shown(vision[out])} is not the language "
                               "model's hidden_size", out, hint="the encoder's merger writes the language model's "
                               "embeddings: its output width is the model's hidden_size")
    for key, wanted in encoder.required_flags.items():  # SigLIP's vision_use_head defaults to true
        if vision.get(key, True) is not wanted:
            raise vision_src.error(DomainError, f"vision_config.{key} is not {_json_shown(wanted)}: SigLIP's pooling "
                                   "head is not modelled (Gemma 3's encoder has none)",
                                   key if key in vision else None)
    for key, raw in vision.items():
        if key in encoder.fields:
            name = encoder.fields[key]
            given[name] = (vision_src, key)
            values[name] = _convert(raw, name, key, library, vision_src)
        elif key in encoder.no_effect or key in encoder.required_flags or key in NO_MEMORY_EFFECT:
            ignored.append(f"vision_config.{shown(key)}")
        elif encoder.mlp_ratio and key == "mlp_ratio":
            continue  # read below
        elif key in encoder.switches:
            name = encoder.switches[key][0]
            given[name] = (vision_src, key)
            values[name] = "true" if _flag(vision_src, vision, key, None) else "false"
        elif key in encoder.lists:
            name = encoder.lists[key][0]
            if not isinstance(raw, list) or not raw:
                raise vision_src.error(DomainError, f"vision_config.{key} must be a non-empty list, not "
                                       f"{_json_shown(raw)}", key)
            given[name] = (vision_src, key)
            values[name] = sympy.Integer(len(raw))
        else:
            unknown.append(f"vision_config.{shown(key)}")
    for key, default in encoder.defaults.items():
        values.setdefault(encoder.fields[key], sympy.Integer(default))
    for name, default in encoder.lists.values():
        values.setdefault(name, sympy.Integer(default))
    for name, default in encoder.switches.values():
        values.setdefault(name, "true" if default else "false")
    if encoder.mlp_ratio:  # Qwen2VLVisionBlock: int(embed_dim * mlp_ratio)
        ratio = _whole(vision_src, vision, "mlp_ratio", 4, minimum=1)
        values["vision_intermediate_size"] = values["vision_hidden_size"] * ratio
        if "mlp_ratio" in vision:
            given["vision_intermediate_size"] = (vision_src, "mlp_ratio")
    if kind.extra is not None:
        kind.extra(src, data, values, given)
    for key, raw in data.items():
        if key in ("text_config", "vision_config") or (not nested and key in text):
            continue  # read with the language model
        if key in kind.extra_keys:
            continue  # read above
        if key in kind.fields:
            name = kind.fields[key]
            given[name] = (src, key)
            values[name] = _convert(raw, name, key, library, src)
        elif key in NO_MEMORY_EFFECT or key in MULTIMODAL_NO_EFFECT or key in kind.no_effect:
            ignored.append(key)
        elif key == "tie_word_embeddings":
            continue  # read below
        else:
            unknown.append(shown(key))
    for name, default in kind.defaults.items():
        values.setdefault(name, sympy.Integer(default))
    if kind.tie_from == "either":  # Qwen2_5_VLConfig: tied if the top level or text_config says so
        tied = data.get("tie_word_embeddings", False) or text.get("tie_word_embeddings", False)
        where = "tie_word_embeddings" if "tie_word_embeddings" in data else None
        if where:
            given["tie_word_embeddings"] = (src, where)
        values["tie_word_embeddings"] = _convert(tied, "tie_word_embeddings", "tie_word_embeddings", library, src)
        return values, given, ignored, unknown
    if kind.tie_from == "outer":  # LlavaNextConfig: the top level alone, untied by default
        if "tie_word_embeddings" in text:
            ignored.append(prefix + "tie_word_embeddings")
            given.pop("tie_word_embeddings", None)
        tied = data.get("tie_word_embeddings", False)
        if "tie_word_embeddings" in data:
            given["tie_word_embeddings"] = (src, "tie_word_embeddings")
        values["tie_word_embeddings"] = _convert(tied, "tie_word_embeddings", "tie_word_embeddings", library, src)
        return values, given, ignored, unknown
    if kind.tie_from == "text":  # each part ties as its own config says: text_config decided above
        if "tie_word_embeddings" in data:
            ignored.append("tie_word_embeddings")
        return values, given, ignored, unknown
    # the head: transformers 5 ties it as the top level says (Gemma3Config: true where it is left
    # out), whatever text_config says; a text_config that says otherwise is refused as ambiguous
    tied = data.get("tie_word_embeddings", True)
    if "tie_word_embeddings" in text and text["tie_word_embeddings"] != tied:
        default = "" if "tie_word_embeddings" in data else ", the default"
        raise src.error(DomainError, f"'tie_word_embeddings' ({_json_shown(tied)}{default}) and "
                        "'text_config.tie_word_embeddings' differ",
                        "tie_word_embeddings" if "tie_word_embeddings" in data else "text_config",
                        hint="transformers follows the top level; keep one of them")
    if "tie_word_embeddings" in data:
        given["tie_word_embeddings"] = (src, "tie_word_embeddings")
    values["tie_word_embeddings"] = _convert(tied, "tie_word_embeddings", "tie_word_embeddings", library, src)
    return values, given, ignored, unknown


# source: vllm 0.19.0 model_executor/models/: the files of these families build embed_tokens,
# norm and lm_head on every pipeline rank (no is_first_rank / is_last_rank gate; llama.py,
# qwen2.py, qwen3.py, deepseek_v2.py gate them); read in docs/research/vllm-pp.md sec. 1
PP_EVERY_STAGE = {"mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "gemma", "gemma2", "gemma3_text", "gpt_oss"}
# source: vllm 0.19.0 model_executor/models/ (make_empty_intermediate_tensors_factory(["hidden_states"])
# in gpt2.py, phi.py, starcoder2.py, falcon.py, olmo2.py; ["hidden_states", "residual"] elsewhere)
PP_HIDDEN_STATES_ONLY = {"gpt2", "phi", "starcoder2", "falcon", "olmo2"}


def _read_text(src: _Source, data: dict, library, model_type: str, prefix: str = "", class_defaults: dict | None = None):
    """The library's values of a language model's config (the whole file, or a text_config);
    fields reported as ignored or unknown are named with ``prefix``; ``class_defaults`` stand
    where the config leaves a field out (a LLaVA text_config, read over its config class)."""
    family = FAMILIES[model_type]
    values: dict = dict(family.fixed)
    if model_type in PP_EVERY_STAGE:
        values["pp_head_placement"] = "every_stage"
    if model_type in PP_HIDDEN_STATES_ONLY:
        values["pp_intermediate_tensors"] = sympy.Integer(1)
    given: dict = {}  # library name -> (source, the field that set it)
    ignored, unknown = [], []
    special = {"quantization_config"} & data.keys()  # fields read below, outside the one-to-one mapping
    if model_type == "falcon":
        special.update(k for k in FALCON_LAYOUT if k in data)
        if "num_key_value_heads" in data:  # FalconConfig's field is num_kv_heads: this one is never read
            special.add("num_key_value_heads")
            unknown.append(prefix + "num_key_value_heads")
    if model_type == "mllama_text_model" and "cross_attention_layers" in data:
        special.add("cross_attention_layers")
        given["cross_attention_layers"] = (src, "cross_attention_layers")
        values["cross_attention_layers"] = sympy.Integer(len(_layer_list(src, data, "cross_attention_layers")))
    if model_type == "llama4_text":
        special.update(k for k in ("moe_layers", "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval")
                       if k in data)
        if "moe_layers" in data:
            _check_moe_layers(src, data)
    for alias, main in family.aliases.items():
        if alias in data and main in data:
            if data[alias] != data[main]:
                raise src.error(DomainError, f"fields '{alias}' and '{main}' differ", alias, hint="keep one of them")
            special.add(alias)  # the same value twice: read once, under its main name
    if model_type in HYBRID_FIELDS:
        special.update(k for k in HYBRID_FIELDS[model_type] if k in data)
    if family.window:
        special.update(k for k in WINDOW_FIELDS if k in data)
        if model_type == "gemma2" and "sliding_window_size" in data:
            special.add("sliding_window_size")  # an early alias of sliding_window
        if family.window == "pattern" and "sliding_window_pattern" in data:
            special.add("sliding_window_pattern")
    for key, raw in data.items():
        if key in special:
            continue
        if key in family.expects:
            if raw != family.expects[key]:
                raise src.error(DomainError, f"{key} {_json_shown(raw)} is not supported", key,
                                hint=f"transformers builds {model_type} with {key} {_json_shown(family.expects[key])}")
            ignored.append(prefix + key)
            continue
        if key in family.switches:
            name, yes, no = family.switches[key]
            given[name] = (src, key)
            values[name] = yes if _flag(src, data, key, None) else no
            continue
        if key in family.spreads:
            for name in family.spreads[key]:
                given[name] = (src, key)
                values[name] = _convert(raw, name, key, library, src)
            continue
        name = family.renames.get(key, key)
        if (key in NO_MEMORY_EFFECT or model_type in HYBRID_FIELDS and key in HYBRID_NO_EFFECT) \
                and key not in family.renames:
            ignored.append(prefix + key)
            continue
        if name not in COMMON and name not in EXTRA and key not in family.renames:
            unknown.append(prefix + shown(key))
            continue
        if name in given:
            raise src.error(SourceError, f"fields '{given[name][1]}' and '{key}' both set '{name}'", key,
                            hint="keep one of them")
        given[name] = (src, key)
        raw = NULL_MEANS.get(name) if raw is None else raw
        if raw is not None:  # HF writes null for "derive it" (GPT-2 n_inner, head_dim)
            values[name] = _convert(raw, name, key, library, src)
    for name, default in {**family.defaults, **(class_defaults or {})}.items():
        if name not in given:
            values.setdefault(name, "true" if default is True else "false" if default is False
                              else sympy.Integer(default))
    if model_type == "gpt2":
        if "hidden_size" in values:
            values.setdefault("intermediate_size", 4 * values["hidden_size"])
        values.setdefault("max_position_embeddings", sympy.Integer(1024))
    if model_type in O_PROJ_FOLLOWS and (data.get("attention_bias") is True
                                         or "attention_bias" not in data and family.defaults.get("attention_bias")):
        values["o_proj_bias"] = "true"  # Llama's attention_bias covers q, k, v and o
    if family.window:
        _read_window(family.window, data, values, src, family.window_pattern)
    if model_type == "llama4_text":
        _read_chunks(data, values, src)
    if model_type == "falcon":
        _read_falcon_layout(data, values, src)
    if model_type in HYBRID_FIELDS:
        ignored += [prefix + k for k in _read_hybrid(model_type, data, values, given, src)]
    factor = _linear_rope_factor(src, data)
    if factor is not None:
        given["rope_linear_factor"] = (src, factor[0])
        values["rope_linear_factor"] = _convert(factor[1], "rope_linear_factor", factor[0], library, src)
        ignored.remove(prefix + factor[0])  # read, not ignored
    if data.get("use_bidirectional_attention"):
        raise src.error(DomainError, "use_bidirectional_attention (an encoder's attention, its window halved) "
                        "is not supported", "use_bidirectional_attention")
    if "quantization_config" in data:
        hfquant.read(src, data["quantization_config"], values)
    if model_type in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss"):
        if "moe_intermediate_size" not in values and "intermediate_size" in values:
            values["moe_intermediate_size"] = values["intermediate_size"]
    if model_type in ("qwen2_moe", "qwen3_moe") and data.get("mlp_only_layers"):
        raise src.error(DomainError, f"mlp_only_layers {_json_shown(data['mlp_only_layers'])} (dense layers "
                        "between MoE layers) is not supported", "mlp_only_layers")
    if data.get("moe_layer_freq", 1) != 1:  # DeepSeek: experts on layers i >= first_k_dense_replace, i % freq == 0
        raise src.error(DomainError, f"moe_layer_freq = {_json_shown(data['moe_layer_freq'])} (MoE on every other "
                        "layer, counted from the first dense-free one) is not supported", "moe_layer_freq")
    for name in REQUIRED + family.required:
        if name not in values:
            key = next((k for k, v in family.renames.items() if v == name), name)
            raise SourceError(f"{src.path}: missing field '{prefix}{key}'", hint=f"a {model_type} config.json names it")
    return values, given, ignored, unknown


def _layer_kinds(src: _Source, data: dict, key: str, kinds: dict, layers: int | None) -> dict:
    """How many layers of each kind a list of layer kinds (``key``) names, under the kinds'
    library names (``kinds``: the config's spelling -> ours); a located error for another
    spelling, or a list whose length is not ``layers`` (None: any length)."""
    listed = data[key]
    if not isinstance(listed, list) or any(not isinstance(k, str) or k not in kinds for k in listed) \
            or layers is not None and len(listed) != layers:
        names = ", ".join(repr(k) for k in dict.fromkeys(kinds))
        length = f" for each of the {layers} layers" if layers is not None else ""
        raise src.error(DomainError, f"field '{key}' must list {names}{length}", key)
    counts = dict.fromkeys(kinds.values(), 0)
    for kind in listed:
        counts[kinds[kind]] += 1
    return counts


#: Nemotron-H's hybrid_override_pattern letters and layers_block_type names
#: (configuration_nemotron_h.py _pattern_to_list: M Mamba2, * attention, - MLP, E MoE)
NEMOTRON_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe",
                  "mamba": "mamba", "linear_attention": "mamba", "full_attention": "attention", "attention": "attention",
                  "mlp": "mlp", "moe": "moe"}
#: the SSM state dtypes a config may ask for (vLLM's mamba_ssm_cache_dtype choices)
SSM_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "auto"}
#: Granite 4.0-H's and Qwen3-Next's layer_types (PreTrainedConfig maps the legacy names)
MIXER_KINDS = {"mamba": "linear", "linear_attention": "linear", "attention": "attention",
               "full_attention": "attention"}


def _read_hybrid(model_type: str, data: dict, values: dict, given: dict, src: _Source) -> list:
    """The layer kinds of a hybrid config and the widths its fields set together, as
    transformers' config classes derive them; returns the fields read that have no effect."""
    no_effect = []

    def whole(key, default, minimum=1):
        value = _whole(src, data, key, default, minimum)
        if value is None and key in data:  # null: the config classes would fail on it too
            raise src.error(DomainError, f"field '{key}' must be a whole number >= {minimum}, not null", key)
        return value

    def pin_inner(key, hidden):
        """The Mamba inner width, int(``key`` x hidden_size) as the config classes take it."""
        expand = data.get(key, 2)
        if isinstance(expand, bool) or not isinstance(expand, (int, Fraction)) or expand <= 0:
            raise src.error(DomainError, f"field '{key}' must be a number above 0, not {_json_shown(expand)}", key)
        pin("mamba_intermediate_size", int(expand * hidden), key if key in data else None)
        return int(expand * hidden)

    def pin(name, value, key=None):
        values[name] = sympy.Integer(value)
        if key:
            given[name] = (src, key)

    if model_type == "nemotron_h":
        # the pattern decides the layers; num_hidden_layers is its length (a property)
        keys = [k for k in ("hybrid_override_pattern", "layers_block_type", "layer_types") if k in data]
        if len(keys) > 1 and any(data[k] is not None for k in keys[1:]):
            raise src.error(SourceError, f"fields '{keys[0]}' and '{keys[1]}' both set the layer kinds", keys[1],
                            hint="keep one of them")
        if not keys:
            raise SourceError(f"{src.path}: missing field 'hybrid_override_pattern'",
                              hint="a nemotron_h config.json names its layers by it or by layers_block_type")
        key = keys[0]
        raw = data[key]
        if key == "hybrid_override_pattern":
            if not isinstance(raw, str) or not raw or any(c not in "M*-E" for c in raw):
                raise src.error(DomainError, "field 'hybrid_override_pattern' must be a string of M (Mamba2), "
                                "* (attention), - (MLP) and E (MoE) layers", key)
            raw = list(raw)
        counts = _layer_kinds(src, {key: raw}, key, NEMOTRON_KINDS, None)
        layers = sum(counts.values())
        if "num_hidden_layers" in data and data["num_hidden_layers"] is not None \
                and whole("num_hidden_layers", None) != layers:
            raise src.error(DomainError, f"num_hidden_layers {_json_shown(data['num_hidden_layers'])} is not the "
                            f"{layers} layers {key} lists", "num_hidden_layers", hint="transformers counts the list")
        pin("num_hidden_layers", layers, key)
        pin("linear_attention_layers", counts["mamba"], key)
        pin("mixer_free_layers", counts["mlp"] + counts["moe"], key)
        pin("ffn_free_layers", counts["mamba"] + counts["attention"], key)
        pin("num_moe_layers", counts["moe"], key)
        for name, default in (("num_experts", 8), ("num_experts_per_tok", 2), ("moe_intermediate_size", 7688),
                              ("shared_expert_intermediate_size", 7688)):  # NemotronHConfig's defaults
            values.setdefault(name, sympy.Integer(default))
        # the shared expert is built whatever n_shared_experts says; biases and ties are fixed
        # (mamba_proj_bias is never read: use_bias gives the Mamba2 projections their biases)
        no_effect += [k for k in ("n_shared_experts", "attention_bias", "tie_word_embeddings", "expand",
                                  "mamba_proj_bias") if k in data]
        # vLLM keeps the SSM state in the dtype the config asks (model_executor/models/config.py,
        # NemotronHForCausalLMConfig; transformers' NemotronHConfig defaults it to float32)
        state = data.get("mamba_ssm_cache_dtype", "float32")
        if not isinstance(state, str) or state not in SSM_DTYPES:
            raise src.error(DomainError, f"mamba_ssm_cache_dtype {_json_shown(state)} is not one of "
                            + ", ".join(SSM_DTYPES), "mamba_ssm_cache_dtype")
        values["mamba_ssm_dtype"] = SSM_DTYPES[state]
        if "mamba_ssm_cache_dtype" in data:
            given["mamba_ssm_dtype"] = (src, "mamba_ssm_cache_dtype")
        if "num_attention_heads" not in values:
            values["num_attention_heads"] = sympy.Integer(32)  # NemotronHConfig's default
        if "num_key_value_heads" not in values:
            values["num_key_value_heads"] = sympy.Integer(8)
    elif model_type == "qwen3_next":
        layers = int(values["num_hidden_layers"]) if "num_hidden_layers" in values else None
        if layers is None:
            return no_effect  # the missing field is reported by the caller
        if data.get("layer_types") is not None:
            counts = _layer_kinds(src, data, "layer_types", MIXER_KINDS, layers)
            linear = counts["linear"]
            if "full_attention_interval" in data:
                no_effect.append("full_attention_interval")  # the list wins (configuration_qwen3_next.py)
        else:
            interval = whole("full_attention_interval", 4)
            linear = layers - layers // interval
        pin("linear_attention_layers", linear, "layer_types" if "layer_types" in data else None)
        only = data.get("mlp_only_layers") or []
        if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                             for i in only):
            raise src.error(DomainError, f"field 'mlp_only_layers' must list layer numbers below {layers}",
                            "mlp_only_layers")
        step = int(values.get("moe_layer_step", 1))
        if "num_experts" in values and int(values["num_experts"]) > 0:
            # Qwen3NextDecoderLayer: experts where i is not in mlp_only_layers and (i + 1) % step == 0
            pin("num_moe_layers", sum(1 for i in range(layers) if i not in set(only) and (i + 1) % step == 0),
                "mlp_only_layers" if only else None)
        elif "num_experts" not in values:
            values["num_experts"] = sympy.Integer(512)  # Qwen3NextConfig's default
            pin("num_moe_layers", sum(1 for i in range(layers) if i not in set(only) and (i + 1) % step == 0))
        values.setdefault("num_experts_per_tok", sympy.Integer(10))
        values.setdefault("moe_intermediate_size", sympy.Integer(512))
        values.setdefault("shared_expert_intermediate_size", sympy.Integer(512))
    elif model_type == "granitemoehybrid":
        layers = int(values["num_hidden_layers"]) if "num_hidden_layers" in values else None
        hidden = int(values["hidden_size"]) if "hidden_size" in values else None
        if layers is None or hidden is None:
            return no_effect
        keys = [k for k in ("layer_types", "layers_block_type") if data.get(k) is not None]
        if len(keys) > 1:
            raise src.error(SourceError, "fields 'layer_types' and 'layers_block_type' both set the layer kinds",
                            keys[1], hint="keep one of them")
        linear = _layer_kinds(src, data, keys[0], MIXER_KINDS, layers)["linear"] if keys else layers
        pin("linear_attention_layers", linear, keys[0] if keys else None)
        inner = pin_inner("mamba_expand", hidden)
        heads = int(values.get("mamba_num_heads", 128))
        head = data.get("mamba_d_head", 64)
        head = inner // heads if head == "auto" else whole("mamba_d_head", 64)
        pin("mamba_head_dim", head, "mamba_d_head" if "mamba_d_head" in data else None)
        # GraniteMoeHybridModel: a rotary table only with position_embedding_type "rope"
        kind = data.get("position_embedding_type", "rope")
        values["position_embedding"] = "rope" if kind == "rope" else "none"
        shared = whole("shared_intermediate_size", 1024, minimum=0)
        width = whole("intermediate_size", 11008)
        if int(values.get("num_experts", 8)) > 0:
            pin("moe_intermediate_size", width, "intermediate_size" if "intermediate_size" in data else None)
            pin("shared_expert_intermediate_size", shared,
                "shared_intermediate_size" if "shared_intermediate_size" in data else None)
            pin("intermediate_size", width)  # no dense layers: read for the library's required input
        else:  # no experts: the shared MLP is each layer's dense MLP
            pin("intermediate_size", shared, "shared_intermediate_size" if "shared_intermediate_size" in data else None)
            if "intermediate_size" in data:
                no_effect.append("intermediate_size")
    elif model_type == "jamba":
        layers = int(values["num_hidden_layers"]) if "num_hidden_layers" in values else None
        hidden = int(values["hidden_size"]) if "hidden_size" in values else None
        if layers is None or hidden is None:
            return no_effect
        # JambaConfig: the layouts are periods and offsets (layers_block_type and layer_types are
        # properties it derives from them, ignored when a file carries them)
        period, offset = whole("attn_layer_period", 8), whole("attn_layer_offset", 4, minimum=0)
        e_period, e_offset = whole("expert_layer_period", 2), whole("expert_layer_offset", 1, minimum=0)
        for p_key, o_key, p_val, o_val in (("attn_layer_period", "attn_layer_offset", period, offset),
                                           ("expert_layer_period", "expert_layer_offset", e_period, e_offset)):
            if o_val >= p_val:  # JambaConfig.validate_architecture
                raise src.error(DomainError, f"{o_key} {o_val} must be below {p_key} {p_val}", o_key)
        attention = sum(1 for i in range(layers) if i % period == offset)
        pin("linear_attention_layers", layers - attention, "attn_layer_period" if "attn_layer_period" in data else None)
        keys = [k for k in ("num_experts", "num_local_experts") if k in data]
        if len(keys) == 2 and data["num_experts"] != data["num_local_experts"]:
            raise src.error(DomainError, "fields 'num_experts' and 'num_local_experts' differ", "num_local_experts",
                            hint="keep one of them")
        experts = whole(keys[0], 16) if keys else 16
        pin("num_experts", experts, keys[0] if keys else None)
        pin("num_moe_layers", sum(1 for i in range(layers) if i % e_period == e_offset) if experts > 1 else 0,
            "expert_layer_period" if "expert_layer_period" in data else None)
        if experts <= 1:
            values["num_experts"] = sympy.Integer(0)  # one expert: JambaMLP, a dense layer
        values.setdefault("moe_intermediate_size", values.get("intermediate_size", sympy.Integer(14336)))
        values.setdefault("intermediate_size", sympy.Integer(14336))
        pin_inner("mamba_expand", hidden)
        rank = data.get("mamba_dt_rank", "auto")
        pin("mamba_dt_rank", -(-hidden // 16) if rank == "auto" else whole("mamba_dt_rank", None),
            "mamba_dt_rank" if "mamba_dt_rank" in data else None)
        no_effect += [k for k in ("layers_block_type", "layer_types") if k in data]
    elif model_type == "falcon_h1":
        layers = int(values["num_hidden_layers"]) if "num_hidden_layers" in values else None
        hidden = int(values["hidden_size"]) if "hidden_size" in values else None
        if layers is None or hidden is None:
            return no_effect
        # FalconH1Config: every layer "hybrid"; the transformers model builds no other layout
        # (attn_layer_indices is vLLM's, mamba_use_mlp false is refused by neither)
        if data.get("attn_layer_indices") is not None:
            raise src.error(DomainError, "field 'attn_layer_indices' must be null: transformers' Falcon-H1 gives "
                            "every layer attention and a Mamba2 mixer", "attn_layer_indices")
        if not _flag(src, data, "mamba_use_mlp", True):
            raise src.error(DomainError, "field 'mamba_use_mlp' false (layers without an MLP) is not modelled",
                            "mamba_use_mlp")
        if _flag(src, data, "projectors_bias", False) != (values.get("mamba_proj_bias", "false") == "true"):
            raise src.error(DomainError, "projectors_bias (out_proj's bias) differs from mamba_proj_bias (in_proj's): "
                            "memform gives both projections one bias flag", "projectors_bias")
        pin("linear_attention_layers", layers)
        pin("parallel_hybrid_layers", layers)
        if data.get("mamba_d_ssm") is not None:
            inner = whole("mamba_d_ssm", None)
            pin("mamba_intermediate_size", inner, "mamba_d_ssm")
            if "mamba_expand" in data:
                no_effect.append("mamba_expand")
        else:
            inner = pin_inner("mamba_expand", hidden)
        heads = int(values.get("mamba_num_heads", 128))
        head = data.get("mamba_d_head", "auto")
        head = inner // heads if head == "auto" else whole("mamba_d_head", None)
        if head * heads != inner:  # FalconH1Config refuses it too
            raise src.error(DomainError, f"mamba_n_heads {heads} x mamba_d_head {head} is not the Mamba2 inner width "
                            f"{inner}", "mamba_d_head")
        pin("mamba_head_dim", head, "mamba_d_head" if "mamba_d_head" in data else None)
        no_effect += [k for k in ("layers_block_type", "layer_types") if k in data]
    elif model_type == "mamba2":
        for key in ("hidden_size", "num_hidden_layers"):
            if key not in values:  # null in the file (Mamba2Config would fail on it too)
                raise src.error(DomainError, f"field '{key}' must be a whole number >= 1, not null", key)
        hidden = int(values["hidden_size"])
        pin_inner("expand", hidden)
        layers = int(values["num_hidden_layers"])
        pin("linear_attention_layers", layers)
        pin("ffn_free_layers", layers)
        # no attention and no MLP: their sizes are never used, given for the library's required inputs
        values.setdefault("num_attention_heads", values.get("mamba_num_heads", sympy.Integer(128)))
        values.setdefault("intermediate_size", values["hidden_size"])
    return no_effect


#: Falcon's fields that choose its attention and norm layout (configuration_falcon.py defaults)
FALCON_LAYOUT = {"multi_query": True, "new_decoder_architecture": False, "parallel_attn": True,
                 "num_kv_heads": None, "num_ln_in_parallel_attn": None}


def _read_falcon_layout(data: dict, values: dict, src: _Source) -> None:
    """Falcon's KV heads and norms as FalconAttention and FalconDecoderLayer build them."""
    flags = {key: _whole(src, data, key, default, minimum=1) if default is None else _flag(src, data, key, default)
             for key, default in FALCON_LAYOUT.items()}
    heads = values.get("num_attention_heads")
    if "hidden_size" in values:
        values.setdefault("intermediate_size", 4 * values["hidden_size"])  # ffn_hidden_size's default
    if heads is None:
        return  # the missing field is reported below
    if flags["new_decoder_architecture"]:
        values["num_key_value_heads"] = sympy.Integer(flags["num_kv_heads"] or heads)
    else:
        values["num_key_value_heads"] = sympy.Integer(1) if flags["multi_query"] else heads
    norms = flags["num_ln_in_parallel_attn"] or (2 if flags["new_decoder_architecture"] else 1)
    values["norm_placement"] = "parallel" if flags["parallel_attn"] and norms == 1 else "pre"


def _read_chunks(data: dict, values: dict, src: _Source) -> None:
    """Llama 4's chunked attention: the layers with rotary positions (no_rope_layers[i] = 1, by
    default every layer but each no_rope_layer_interval-th) attend within chunks of
    attention_chunk_size tokens (Llama4TextConfig: layer_types chunked_attention), read as
    local-attention layers."""
    layers = values.get("num_hidden_layers")
    if layers is None:
        return  # the missing field is reported below
    layers = int(layers)
    chunk = _whole(src, data, "attention_chunk_size", None, minimum=1)
    flags = data.get("no_rope_layers")
    if flags:  # an explicit list: 1 for a layer with rotary positions
        if not isinstance(flags, list) or len(flags) != layers or any(f not in (0, 1) or isinstance(f, bool)
                                                                      for f in flags):
            raise src.error(DomainError, f"field 'no_rope_layers' must list 0 or 1 for each of the {layers} layers",
                            "no_rope_layers")
        rope_layers = sum(flags)
    else:
        interval = _whole(src, data, "no_rope_layer_interval", 4, minimum=1) or 4
        rope_layers = layers - layers // interval
    if chunk is not None and rope_layers:
        values.update(sliding_window=sympy.Integer(chunk), sliding_window_layers=sympy.Integer(rope_layers),
                      local_attention="chunked")


def _layer_list(src: _Source, data: dict, key: str) -> list:
    """A list of distinct layer indices in [0, num_hidden_layers) (Mllama's cross_attention_layers)."""
    layers, count = data[key], data.get("num_hidden_layers")
    if not isinstance(layers, list) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in layers) \
            or len(set(layers)) != len(layers):
        raise src.error(DomainError, f"field '{key}' must be a list of distinct layer indices, not "
                        f"{_json_shown(layers)}", key)
    if isinstance(count, int) and not isinstance(count, bool) and any(i >= count for i in layers):
        raise src.error(DomainError, f"field '{key}' names layer {max(layers)}, past the last of "
                        f"num_hidden_layers {count}", key)
    return layers


def _check_moe_layers(src: _Source, data: dict) -> None:
    """Llama 4's moe_layers: null, or the list interleave_moe_layer_step gives (layers step - 1,
    2 step - 1, ...); another list is refused (memform counts MoE layers by the step)."""
    listed = data["moe_layers"]
    if listed is None:
        return
    layers, step = data.get("num_hidden_layers"), data.get("interleave_moe_layer_step", 1)
    if isinstance(layers, int) and isinstance(step, int) and not isinstance(step, bool) and step >= 1 \
            and listed == list(range(step - 1, layers, step)):
        return
    raise src.error(DomainError, f"moe_layers {_json_shown(listed)[:60]} is not every interleave_moe_layer_step-th "
                    "layer; other layouts are not supported", "moe_layers")


def _linear_rope_factor(src: _Source, data: dict):
    """(field, factor) of a linear rotary scaling (vLLM's LinearScalingRotaryEmbedding keeps a
    table ``factor`` times as long), or None.  transformers < 5 writes ``rope_scaling``
    ({"rope_type" or "type": "linear", "factor": f}); 5.x ``rope_parameters``, per layer type where
    the model has two tables (Gemma 3: the full-attention layers' entry)."""
    for key in ("rope_scaling", "rope_parameters"):
        block = data.get(key)
        if isinstance(block, dict) and isinstance(block.get("full_attention"), dict):
            block = block["full_attention"]
        if isinstance(block, dict) and (block.get("rope_type") or block.get("type")) == "linear":
            if "factor" not in block:
                raise src.error(DomainError, f"field '{key}' names linear scaling without a 'factor'", key)
            return key, block["factor"]
    return None


def _whole(src: _Source, data: dict, key: str, default, minimum: int = 0):
    """Field ``key`` as a whole number of at least ``minimum`` (``default`` where it is left out;
    null stays None), or a located error."""
    raw = data.get(key, default)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, Fraction)) or raw != int(raw) or raw < minimum:
        raise src.error(DomainError, f"field '{key}' must be a whole number >= {minimum}, not {_json_shown(raw)}", key)
    return int(raw)


def _flag(src: _Source, data: dict, key: str, default):
    """Field ``key`` as true or false (``default`` where it is left out), or a located error."""
    raw = data.get(key, default)
    if not isinstance(raw, bool):
        raise src.error(DomainError, f"field '{key}' must be true or false, not {_json_shown(raw)}", key)
    return raw


def _read_window(scheme: str, data: dict, values: dict, src: _Source, pattern_default: int = 6) -> None:
    """``sliding_window`` and ``sliding_window_layers`` from a config's sliding-window fields,
    as transformers builds its ``layer_types`` (configuration_qwen3.py, configuration_gemma2.py;
    Mistral-style models slide on every layer)."""
    layers = values.get("num_hidden_layers")
    if layers is None:
        return  # the missing field is reported below
    layers = int(layers)

    def whole(key, default):
        return _whole(src, data, key, default)

    def flag(key, default):
        return _flag(src, data, key, default)

    window = whole("sliding_window", 4096 if scheme == "pattern" else None) or 0
    if "sliding_window_size" in data and whole("sliding_window_size", None) != (window or None):
        raise src.error(DomainError, "fields 'sliding_window' and 'sliding_window_size' differ",
                        "sliding_window_size", hint="keep one of them")
    kinds = data.get("layer_types")
    if kinds is not None:
        if (not isinstance(kinds, list) or len(kinds) != layers
                or any(k not in ("full_attention", "sliding_attention") for k in kinds)):
            raise src.error(DomainError, f"field 'layer_types' must list 'full_attention' or "
                            f"'sliding_attention' for each of the {layers} layers", "layer_types")
        sliding = kinds.count("sliding_attention")
    elif not window:
        sliding = 0
    elif scheme == "qwen":  # layers i >= max_window_layers slide, when use_sliding_window
        start = whole("max_window_layers", 28)  # Qwen3Config's default
        sliding = max(layers - start, 0) if flag("use_sliding_window", False) else 0
    elif scheme == "alternate":  # Gemma2Config: sliding when (i + 1) % 2
        sliding = (layers + 1) // 2
    elif scheme == "pattern":  # Gemma3TextConfig: sliding when (i + 1) % sliding_window_pattern
        pattern = whole("sliding_window_pattern", pattern_default)
        if not pattern:
            raise src.error(DomainError, "field 'sliding_window_pattern' must be at least 1", "sliding_window_pattern")
        sliding = layers - layers // pattern
    else:  # "all"
        sliding = layers
    if sliding and not window:
        raise src.error(DomainError, "layer_types names sliding_attention layers but sliding_window is not set",
                        "layer_types")
    values["sliding_window"] = sympy.Integer(window if sliding else 0)
    values["sliding_window_layers"] = sympy.Integer(sliding)


def _convert(raw, name: str, key: str, library, src: _Source):
    """The library's exact, validated value of field ``key`` (library name ``name``)."""
    decl = library.decls.get(name)
    if decl is not None and decl.kind == "option":
        if not isinstance(raw, bool):
            raise src.error(DomainError, f"field '{key}' must be true or false, not {_json_shown(raw)}", key)
        return _check(library, name, "true" if raw else "false", src, key)
    if isinstance(raw, bool) or not isinstance(raw, (int, Fraction)):
        raise src.error(DomainError, f"field '{key}' must be a number, not {_json_shown(raw)}", key)
    value = sympy.Rational(raw.numerator, raw.denominator)
    if name in PINNED_MIN and value < PINNED_MIN[name]:
        raise src.error(DomainError, f"field '{key}' must be >= {PINNED_MIN[name]}, not {_json_shown(raw)}", key)
    return _check(library, name, value, src, key)


def _check(library, name: str, value, src: _Source, key: str | None):
    """``library.check_value`` located at field ``key``; the file is named where the field is
    not found as written (a derived value, a key spelled with escapes)."""
    span = src.span(key) if key is not None else None
    try:
        return library.check_value(name, value, span)
    except EngineError as exc:
        if span is not None:
            raise
        raise type(exc)(f"{src.path}: {exc.message}", None, exc.hint) from None
