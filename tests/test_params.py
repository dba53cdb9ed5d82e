"""Parameter counts of the presets against published figures (not memform's own output)."""
from fractions import Fraction

import pytest

from engine.compile.model import Scenario

# Hugging Face model cards / safetensors metadata and the papers' architecture tables.
PUBLISHED = {
    "llama1-7b": 6_738_415_616,
    "llama1-13b": 13_015_864_320,
    "llama1-65b": 65_285_660_672,
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "gpt3-175b": 174_604_259_328,  # tied embedding + 2048 learned positions + biases (seed LIT-06)
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "gemma-7b": 8_537_680_896,
    "gpt2": 124_439_808,
    "deepseek-v3": 671_026_419_200,  # technical report: 671B total (MTP module excluded)
    "qwen3-8b": 8_190_735_360,  # Hub safetensors total (model card: 8.2B)
    "qwen3-30b-a3b": 30_532_122_624,  # llama.cpp n_params of the GGUF (model card: 30.5B)
    "gemma2-9b": 9_241_705_984,  # keras-hub gemma2_9b_en "params"; Hub safetensors total
    "phi3-mini-4k": 3_821_079_552,  # keras-hub phi3_mini_4k_instruct_en "params"
    "olmo2-7b": 7_298_617_344,  # Hub safetensors total of allenai/OLMo-2-1124-7B (public lists of Hub counts)
    "granite3.3-8b": 8_170_864_640,  # Hub parameter count of ibm-granite/granite-3.3-8b-instruct
    # issue 15.  "Hub list": a public list of Hub safetensors totals (search index id 71142266638);
    # keras-hub: keras-team/keras-hub keras_hub/src/models/<family>/<family>_presets.py "params"
    "llama3.2-1b": 1_235_814_400,  # Hub list, meta-llama/Llama-3.2-1B-Instruct
    "llama3.2-3b": 3_212_749_824,  # Hub list, meta-llama/Llama-3.2-3B-Instruct
    "smollm2-1.7b": 1_711_376_384,  # Hub list, HuggingFaceTB/SmolLM2-1.7B-Instruct
    "mistral-7b-v0.3": 7_248_023_552,  # Hub list, mistralai/Mistral-7B-v0.3; keras-hub mistral_0.3_7b_en
    "qwen2.5-0.5b": 494_032_768,  # Hub list, Qwen/Qwen2.5-0.5B-Instruct; keras-hub qwen2.5_0.5b_en
    "qwen2.5-1.5b": 1_543_714_304,  # Hub list, Qwen/Qwen2.5-1.5B-Instruct; keras-hub qwen2.5_math_1.5b_en
    "qwen2.5-3b": 3_085_938_688,  # Hub list, Qwen/Qwen2.5-3B-Instruct; keras-hub qwen2.5_3b_en
    # Hub safetensors.total of Qwen/Qwen2.5-14B (search index id 68699621641); llama.cpp
    # llama-bench of Qwen2.5-14B-Instruct-Q4_K_M.gguf: "Parameters: 14,770,033,664" (id 66473760111)
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,  # keras-hub qwen2.5_instruct_32b_en
    "qwen2.5-72b": 72_706_203_648,  # keras-hub qwen2.5_instruct_72b_en
    # keras-hub qwen3_0.6b_en / qwen3_1.7b_en (tied head counted once; the Hub totals, 751,632,384
    # and 2,031,739,904, also count the lm_head.weight copy the checkpoints store)
    "qwen3-0.6b": 596_049_920,
    "qwen3-1.7b": 1_720_574_976,
    "qwen3-4b": 4_022_468_096,  # Hub list, Qwen/Qwen3-4B; keras-hub qwen3_4b_en
    "qwen3-14b": 14_768_307_200,  # keras-hub qwen3_14b_en
    "qwen3-32b": 32_762_123_264,  # Hub list, Qwen/Qwen3-32B; keras-hub qwen3_32b_en
    "qwen3-235b-a22b": 235_093_634_560,  # keras-hub qwen3_moe_235b_a22b_en (model card: 235B)
    "gemma2-2b": 2_614_341_888,  # Hub list, google/gemma-2-2b-it; keras-hub gemma2_2b_en
    "phi4-mini": 3_836_021_760,  # Hub list, microsoft/Phi-4-mini-instruct
    "phi-2": 2_779_683_840,  # the Hub's safetensors count of microsoft/phi-2 ({"F16": 2779683840}, search index id 48474337912)
    # Hub list, openai/gpt-oss-20b and openai/gpt-oss-120b (the bf16 model's parameters: the
    # MXFP4 checkpoint stores two experts' values per byte); ollama's "general.parameter_count":
    # 20914757184 for gpt-oss:20b (search index id 13998610816); OpenAI's model card: 20.91B, 116.83B
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
    # keras-hub medgemma_instruct_27b "params" (Gemma 3 27B's architecture, image encoder
    # included; search index id 3173084990); a public table of GGUF counts gives 27432406640 for
    # unsloth_gemma-3-27b-it (id 70911651117)
    "gemma3-27b": 27_432_406_640,
    # a public list of Hub counts (search index id 71142266638): "'google/gemma-3-4b-it': ('gemma',
    # 4300079472)" and "'google/gemma-3-1b-it': ('gemma', 999885952)"; a pinned revision's
    # "parametros": 4300079472 (id 70873148759)
    "gemma3-4b": 4_300_079_472,
    "gemma3-1b": 999_885_952,
    # no published exact count found: transformers' model built from the config.json on the meta
    # device (tests/test_hfconfig.py test_meta_device_model_agrees builds it from the same file)
    # the Hub's count (search index id 71142266638, 108641793536); Maverick: Fireworks'
    # documentation and a public test (ids 16346900026, 71136150794: 401583781376)
    "llama4-scout": 108_641_793_536,
    "llama4-maverick": 401_583_781_376,
    # Llama 3.2 11B Vision (Instruct): NVIDIA's API-catalog model card, "Parameters: 10,670,220,835",
    # and a public table of the Hub's safetensors counts (search index id 12439498600)
    "llama3.2-11b-vision": 10_670_220_835,
    # Mistral Small 3.1: no published exact count found; transformers' model on the meta device
    # (tests/test_hfconfig.py), which vLLM's logged 'Model loading took 44.76 GiB' confirms
    # (tests/published/vllm_serving.json)
    "mistral-small-3.1-24b": 24_011_361_280,
    # Granite Vision 3.3 2B: no published exact count found; transformers' model on the meta device
    # from the assembled config (its SigLIP pooling head included: vision_use_head is left out)
    "granite-vision-3.3-2b": 2_975_396_928,
    "starcoder2-3b": 3_030_371_328,
    "falcon-7b": 6_921_720_704,
    "llava-v1.6-mistral-7b": 7_566_747_648,
    # the Hub page's numParameters (search index id 33908990598)
    "qwen2.5-vl-7b": 8_292_166_656,
    # a public table of Hub counts (search index id 12439498600: "qwen/qwen2-vl-7b-instruct": 8291375616)
    "qwen2-vl-7b": 8_291_375_616,
    # a safetensors-header audit of llava-hf/llava-1.5-7b-hf (search index id 69593245356: "686 tensors,
    # 7,063,427,072 params")
    "llava-1.5-7b": 7_063_427_072,
    "command-a-03-2025": 111_057_580_032,
    "command-r-08-2024": 32_296_476_672,
    # hybrids: transformers' model built on the meta device (tests/test_hfconfig.py from
    # tests/configs, tests/test_hybrid.py for Nemotron-Nano-9B-v2's fields), the router correction
    # biases (buffers) included; published only as "31.6 billion total parameters" (Nemotron 3
    # Nano, replicate.com/nvidia/nemotron-3-nano-30b-a3b), "80B in total" (Qwen3-Next's model
    # card), "6.94 B" (llama.cpp's print for Granite 4.0 H Tiny, koboldcpp issue 1781)
    "nemotron-3-nano-30b-a3b": 31_577_940_288,
    "nemotron-nano-9b-v2": 8_888_227_328,
    "qwen3-next-80b-a3b": 79_674_391_296,
    "granite-4.0-h-tiny": 6_939_037_248,
    # ibm-granite/granite-4.0-h-small @ b8c0982b: the Hub's safetensors total as a third-party
    # manifest records it (docs/research/verbatim-configs.md sec. 3)
    "granite-4.0-h-small": 32_207_337_984,
    # tiiuae/Falcon-H1-7B-Base @ c9a4cbb9: the Hub's safetensors total as a third-party manifest
    # records it (docs/research/verbatim-configs.md sec. 1)
    "falcon-h1-7b": 7_585_648_736,
    "mamba2-780m": 780_161_280,
    "jamba-1.5-mini": 51_570_323_328,  # "52B total" (docs/research/jamba-falcon-h1.md)
}

ACTIVE = {  # parameters a token passes through
    "deepseek-v3": 37_552_297_472,  # technical report: 37B activated
    # counted by hand: 32 x (41,943,040 attention + 2 x 176,160,768 experts + 32,768 router
    # + 8,192 norms) + 2 x 131,072,000 embeddings + 4,096 final norm (model card: 12.9B active)
    "mixtral-8x7b": 12_879_925_248,
    # model card: 3.3B activated; 48 x (18,874,368 attention + 8 x 4,718,592 experts + 262,144
    # router + 4,352 norms) + 2 x 311,164,928 embeddings + 2,048 final norm
    "qwen3-30b-a3b": 3_353_032_704,
    # OpenAI's gpt-oss model card, table 1: 3.61B active, the input embedding (201,088 x 2,880 =
    # 579,133,440, a lookup) not counted, the unembedding counted; the exact figure 3,608,307,264
    # as public files compute it (search index id 59012694364)
    "gpt-oss-20b": 3_608_307_264 + 579_133_440,
    # AI21's paper (arXiv 2408.12570): 12B active; exactly, the meta-device total less 16 MoE layers'
    # 14 unused experts of 3 x 4096 x 14336 (docs/research/jamba-falcon-h1.md)
    "jamba-1.5-mini": 51_570_323_328 - 16 * 14 * 3 * 4096 * 14336,
}


@pytest.mark.parametrize("model", sorted(ACTIVE))
def test_active_parameter_count(lib, model):
    assert Scenario.create(lib, model).evaluate("n_params_active") == ACTIVE[model]


def test_every_model_preset_has_a_published_count(lib):
    assert {name for kind, name in lib.presets if kind == "model"} == set(PUBLISHED)


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_exact_parameter_count(lib, model):
    assert Scenario.create(lib, model).evaluate("n_params") == PUBLISHED[model]


@pytest.mark.parametrize("model, L, d, V", [("llama1-7b", 32, 4096, 32000), ("gpt3-175b", 96, 12288, 50257)])
def test_rough_count_is_12_L_d2_plus_2_V_d(lib, model, L, d, V):
    assert Scenario.create(lib, model).evaluate("n_params_approx") == 12 * L * d * d + 2 * V * d


def test_gqa_shrinks_only_k_and_v(lib):
    s = Scenario.create(lib, "llama2-70b")
    d, kv = 8192, 8 * 128
    assert s.evaluate("attention_params") == 2 * d * d + 2 * d * kv  # Wq, Wo full; Wk, Wv d x (8 * 128)
    assert s.with_values(num_key_value_heads=64).evaluate("attention_params") == 4 * d * d


def test_pipeline_stage_holds_its_layers_and_the_larger_end(lib):
    # Llama-2-7B, pp=4: 8 layers per stage; the first stage has the embedding, the last the
    # head and final norm (untied: V*d + d > V*d), so the busiest stage is the last
    L, d, V, ff = 32, 4096, 32000, 11008
    layer = 4 * d * d + 3 * d * ff + 2 * d
    s = Scenario.create(lib, "llama2-7b", values={"pp": 4})
    assert s.evaluate("params_per_gpu") == 8 * layer + V * d + d


def test_zero_shards_expert_states_over_their_own_data_parallel_ranks(lib):
    """Mixtral 8x7B, ep = 8 inside dp = 64, ZeRO-1, mixed-precision AdamW (16 B per parameter).
    Each GPU holds the dense part D and one of 8 experts per layer (E / 8) in bf16 weights and
    gradients; the 12 B of master copy and Adam moments are sharded over the 64 ranks for D,
    and for E / 8 over the 64 / 8 = 8 ranks that hold the same experts (DeepSpeed-MoE's
    expert data-parallel group), i.e. 12 (D + E) / 64."""
    experts = 32 * 8 * 3 * 4096 * 14336  # layers x experts x (gate, up, down) x hidden x inner
    dense = PUBLISHED["mixtral-8x7b"] - experts
    assert experts == 45_097_156_608
    s = Scenario.create(lib, "mixtral-8x7b", values={"dp": 64, "ep": 8, "zero_stage": 1,
                                                     "optimizer_step_bytes": 0})
    held = dense + experts // 8
    assert s.evaluate("weights") == 2 * held
    assert s.evaluate("grads") == 2 * held
    assert s.evaluate("master") + s.evaluate("optimizer_states") == 12 * (dense + experts) // 64
    assert s.evaluate("model_states") == 4 * held + 12 * (dense + experts) // 64


def test_expert_groups_with_tensor_parallel_attention_and_whole_experts(lib):
    """Mixtral 8x7B with tp = 2 for the dense parts, experts whole (etp = 1) over ep = 8, dp = 8,
    ZeRO-1. Megatron-Core groups the 2 x 8 ranks of a stage into 8 expert shards with
    16 / 8 = 2 replicas each, so expert states are sharded 2 ways; DeepSpeed-MoE groups dp
    alone (8 / 8 = 1 replica): expert states are not sharded. Dense states: over tp, then dp,
    but for the norms and routers, which every tp rank holds whole (docs/research/tp-replicated.md:
    TENorm, moe/router.py) and the distributed optimizer shards over dp like the rest."""
    experts = 32 * 8 * 3 * 4096 * 14336
    whole = 32 * 2 * 4096 + 4096 + 32 * 8 * 4096  # two RMSNorms a layer, the final norm, the routers
    dense = PUBLISHED["mixtral-8x7b"] - experts
    base = {"tp": 2, "dp": 8, "ep": 8, "etp": 1, "zero_stage": 1, "optimizer_step_bytes": 0}
    for layout, expert_replicas in (("megatron", 2), ("deepspeed", 1)):
        s = Scenario.create(lib, "mixtral-8x7b", values={**base, "expert_groups": layout})
        held = Fraction(dense - whole, 2) + whole
        states = s.evaluate("master") + s.evaluate("optimizer_states")
        assert states == 12 * (held / 8 + Fraction(experts, 8 * expert_replicas)), layout
        assert s.evaluate("weights") == 2 * (held + Fraction(experts, 8))


def test_what_tensor_parallelism_leaves_whole(lib):
    """The parameters every tp rank holds whole, as counted from Megatron-Core's, vLLM's and
    torchtitan's sources in docs/research/tp-replicated.md sec. 4: Llama-3.1-8B keeps only its
    RMSNorm weights (266,240; 1,004,015,616 parameters per rank at tp = 8); DeepSeek-V3 its norms,
    routers with their correction biases and MLA's down projections (1,030,919,680, or 107,451,904
    with the down projections split as Megatron's local spec and --mla-down-proj-fusion do)."""
    s = Scenario.create(lib, "llama3.1-8b", values={"tp": 8})
    assert s.evaluate("tp_replicated_params") == 266_240
    assert s.evaluate("params_per_gpu") == 1_004_015_616
    s = Scenario.create(lib, "deepseek-v3", values={"tp": 8})
    assert s.evaluate("tp_replicated_params") == 1_030_919_680
    assert Scenario.create(lib, "deepseek-v3", values={"tp": 8, "mla_down_proj_tp": "split"}) \
        .evaluate("tp_replicated_params") == 107_437_056 + 14_848
    # GPT-2: 25 LayerNorms (weight and bias of 768), the attention's and the MLP's output biases
    # (row-parallel, 768 in each of 12 layers) and the learned position table (Megatron's
    # "Position embedding (serial)", vLLM's wpe = nn.Embedding: 1024 x 768)
    s = Scenario.create(lib, "gpt2", values={"tp": 2})
    assert s.evaluate("tp_replicated_params") == 25 * 2 * 768 + 2 * 12 * 768 + 1024 * 768


def test_an_mtp_module_keeps_its_norms_router_and_served_projection_whole(lib):
    """DeepSeek-V3's MTP module (docs/research/mtp.md) at tp = 8: one more MoE block (two RMSNorms of
    7168, MLA's latent norms of 1536 and 512, the router's 256 x 7168 weight and 256 biases, the
    MLA down projections 7168 x (1536 + 512 + 64)), its enorm, hnorm and final norm (3 x 7168), all
    whole on every rank; eh_proj (7168 x 14336) is column-parallel in Megatron-Core and a plain
    nn.Linear in vLLM's deepseek_mtp, so whole on every rank only when served."""
    block = 2 * 7168 + 1536 + 512 + 256 * 7168 + 256 + 3 * 7168 + 7168 * (1536 + 512 + 64)
    for mode, projection in (("train", 0), ("infer", 7168 * 14336)):
        base = Scenario.create(lib, "deepseek-v3", values={"tp": 8, "mode": mode})
        mtp = base.with_values(mtp_layers=1)
        assert mtp.evaluate("tp_replicated_params") - base.evaluate("tp_replicated_params") == block + projection


def test_megatron_keeps_replicated_states_whole_per_tp_rank_and_shards_them_over_dp(lib):
    """docs/research/tp-replicated.md sec. 1b: Megatron's replicated parameters sit in the dense
    DDP buffer, so each tp rank holds N_rep (2 + 4) bytes of bf16 weight and fp32 main_grad and
    N_rep 12 / dp of master copy and Adam moments.  DeepSeek-V3 at tp = 8, dp = 4: replicating
    MLA's down projections (61 layers x 7168 x (1536 + 512 + 64)) adds 7/8 of that per rank."""
    n = 61 * 7168 * (1536 + 512 + 64)
    got = []
    for mode in ("replicated", "split"):
        s = Scenario.create(lib, "deepseek-v3", values={"tp": 8, "dp": 4, "ep": 8, "stack": "megatron",
                                                        "zero_stage": 1, "mla_down_proj_tp": mode})
        got.append([s.evaluate(r) for r in ("weights", "grads", "master", "optimizer_states")])
    weights, grads, master, states = (a - b for a, b in zip(*got))
    moved = Fraction(7, 8) * n
    assert (weights, grads, master + states) == (2 * moved, 4 * moved, 12 * moved / 4)


def test_zero_shards_over_data_and_context_parallel_ranks(lib):
    """Llama-2-7B on dp = 2 x cp = 4 ranks with ZeRO-1: the 8 ranks hold the same weights (each
    a quarter of every sequence), and Megatron's distributed optimizer shards the 12 bytes per
    parameter of master copy and Adam moments over all 8."""
    p = PUBLISHED["llama2-7b"]
    s = Scenario.create(lib, "llama2-7b", values={"dp": 2, "cp": 4, "zero_stage": 1, "optimizer_step_bytes": 0})
    assert s.evaluate("master") + s.evaluate("optimizer_states") == 12 * p // 8
    assert s.evaluate("weights") == s.evaluate("grads") == 2 * p


def test_deepseek_v3_checkpoint_total_with_its_mtp_module(lib):
    # deepseek-ai/DeepSeek-V3 on the Hub: 684,531,386,000 elements, of them 41,555,600 FP32 (the
    # Hub's safetensors split, quoted in search index ids 67469160833, 58758039937): the 128 x 128
    # FP8 tiles' weight_scale_inv and 59 x 256 router biases (e_score_correction_bias, which
    # memform counts as parameters).  Layer 61, the MTP module, stores its own copies of the
    # embedding and the output head (129,280 x 7,168 each), which the model's are
    # (docs/research/mtp.md)
    scales = 41_555_600 - 59 * 256
    copies = 2 * 129_280 * 7_168
    with_mtp = Scenario.create(lib, "deepseek-v3", values={"mtp_layers": 1}).evaluate("n_params")
    assert with_mtp == 684_531_386_000 - scales - copies
    assert with_mtp - Scenario.create(lib, "deepseek-v3").evaluate("n_params") == 11_610_068_224


def test_an_mtp_layer_adds_one_layer_to_the_kv_cache(lib):
    # vLLM's deepseek_mtp draft adds its MLA layer to the block pool: 62 layers of (512 + 64)
    # BF16 elements per token, 71,424 B instead of 70,272 (docs/research/mtp.md)
    per_token = lambda mtp: Scenario.create(lib, "deepseek-v3", values={"mode": "infer", "mtp_layers": mtp}
                                            ).evaluate("kv_cache_per_token")
    assert (per_token(0), per_token(1)) == (61 * 576 * 2, 62 * 576 * 2) == (70_272, 71_424)
