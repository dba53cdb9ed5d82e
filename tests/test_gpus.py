"""GPU presets (formulas/gpus.mem) and the filters of 'memform presets'.

The expected capacities are the driver's own figures quoted in the public logs named in
gpus.mem (nvidia-smi memory.total in MiB, rocm-smi VRAM bytes), not memform's output.
"""
import io
import re
from pathlib import Path

import pytest

import engine.paths
from engine.cli import main
from engine.compile.model import Scenario
from engine.compile.cache import load

MiB = 2**20
GPUS_MEM = Path(engine.paths.data_path("formulas")) / "gpus.mem"

# name -> the total the driver reports, in MiB, as quoted by the source named in gpus.mem
DRIVER_MIB = {
    "rtx4090": 24564,     # RLinf/RLinf#255: "507MiB /  24564MiB"
    "rtx3090": 24576,     # noonghunna/club-3090#1128: "22598MiB /  24576MiB"
    "rtx5090": 32607,     # noonghunna/club-3090#1261: "29024MiB /  32607MiB"
    "a10g": 23028,        # NVIDIA/DCGM#232: "8722MiB / 23028MiB"
    "l4": 23034,          # modal-labs/modal-client#2797: "L4: 23034MiB"
    "l40s": 46068,        # akash-network/provider-configs#99: "NVIDIA L40S, 595.71.05, 46068 MiB"
    "t4": 15360,          # modal-labs/modal-client#2797: "T4: 15360MiB"
    "h100-80g": 81559,    # NVIDIA/nccl#1264: "0MiB /  81559MiB"
    "b200": 183359,       # NVIDIA/TensorRT-LLM#10278: "166593MiB / 183359MiB"
    "gb200": 189471,      # NVIDIA/k8s-test-infra qx-gb200.xml: "<total>189471 MiB</total>"
}
MI300X_VRAM_BYTES = 206141652992  # rocm-smi: "VRAM Total Memory (B): 206141652992"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def listed(out):
    """(kind, name) of each line 'memform presets' printed."""
    return [tuple(line.split()[:2]) for line in out.splitlines()]


@pytest.fixture(scope="module")
def lib():
    return load()


def capacity(lib, name):
    settings = {n: (v, span) for n, v, span in lib.preset("gpu", name).settings}
    assert set(settings) <= {"capacity", "driver_reserved", "gpu_sms", "cuda_major", "gpu_l2_cache", "gpu_nvlink", "gpu_is_a100",
                             "gpu_platform"}
    value, span = settings["capacity"]
    return lib.check_value("capacity", value, span)


def test_at_least_25_gpu_presets_load(lib):
    gpus = [name for kind, name in lib.presets if kind == "gpu"]
    assert len(gpus) >= 25
    # the names the rest of the tests and the documentation use are kept
    assert {"a100-40g", "a100-80g", "h100-80g", "h200-141g"} <= set(gpus)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) for name in gpus)


def test_gpu_presets_say_what_the_serving_engines_read_of_them(lib):
    """vLLM keeps its small scheduling defaults on every A100 (its device name contains 'A100'),
    and NCCL's NVLink buffers exist only where the GPUs are joined by NVLink: each preset's
    description (the part it names) decides both flags, which a scenario on it then holds."""
    for kind, name in lib.presets:
        if kind != "gpu":
            continue
        doc = lib.preset("gpu", name).doc
        s = Scenario.create(lib, "llama3.1-8b", name)
        assert (s.values["gpu_is_a100"] == "true") == ("A100" in doc), name
        nvidia = doc.startswith("NVIDIA")
        pcie_only = nvidia and ("PCIe" in doc or "GeForce" in doc or "RTX" in doc or not any(
            board in doc for board in ("SXM", "HGX", "NVL", "GB200", "H200", "H20 ")))
        if nvidia:
            assert (s.values["gpu_nvlink"] == "false") == pcie_only, (name, doc)


def test_every_gpu_preset_lives_in_gpus_mem_with_a_source(lib):
    text = GPUS_MEM.read_text()
    lines = text.splitlines()
    in_file = []
    for i, line in enumerate(lines):
        m = re.match(r'preset gpu "([^"]+)"', line)
        if not m:
            continue
        in_file.append(m.group(1))
        comments = []  # the comment block right above the preset
        j = i - 1
        while j >= 0 and lines[j].startswith("#"):
            comments.append(lines[j])
            j -= 1
        assert any(c.startswith("# source:") for c in comments), f"{m.group(1)} has no '# source:' line"
    assert sorted(in_file) == sorted(n for k, n in lib.presets if k == "gpu")
    assert "preset gpu" not in (GPUS_MEM.parent / "presets.mem").read_text()


def nvidia_presets(lib):
    """(name, its settings, the comment lines above it, nearest first) of every NVIDIA preset."""
    lines = GPUS_MEM.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r'preset gpu "([^"]+)" .*"NVIDIA', line)
        if m:
            yield m.group(1), {n: v for n, v, _ in lib.preset("gpu", m.group(1)).settings}, lines[i - 1::-1]


def test_every_nvidia_preset_sets_its_sm_count_with_a_source(lib):
    # torch's multi_processor_count (vLLM sizes its top-k/top-p scratch buffer by it)
    for name, settings, above in nvidia_presets(lib):
        assert "gpu_sms" in settings, name
        assert above[0].startswith("# SMs: ") and str(settings["gpu_sms"]) in above[0], name


def test_every_nvidia_preset_sets_its_l2_cache_with_a_source(lib):
    # the L2 cache as CUDA reports it (deviceQuery's bytes, torch's L2_cache_size in whole MiB;
    # Inductor's benchmark buffer in vLLM's profile run is that size), docs/research/gpu-l2-cache.md
    for name, settings, above in nvidia_presets(lib):
        assert "gpu_l2_cache" in settings, name
        block = [line for line in above[:4] if line.startswith("# L2: ")]
        mib = lib.check_value("gpu_l2_cache", settings["gpu_l2_cache"], None) / 2**20
        assert block and mib == int(mib), name
        assert f"{int(mib)}MB" in block[0].replace(" MB", "MB") or f"{int(mib) * 2**20} bytes" in block[0], name


# name -> the total CUDA reports, as quoted by the source named in gpus.mem's "# reserved:" line:
# deviceQuery's global memory in bytes, or nvidia-smi -q's Total less its Reserved, in MiB
CUDA_TOTAL = {
    "rtx3090": 25_327_697_920,               # thamada/gls RTX3090_deviceQuery.py
    "a100-80g": 85_100_068_864,              # thamada/gls A100SXMx4_deviceQuery.py
    "h100-80g": 85_028_896_768,              # deviceQuery, R570 (vLLM's "79.19 GiB")
    "h200-141g": 150_021_734_400,            # thamada/gls H200_deviceQuery.py
    "t4": (15360 - 448) * MiB,               # k8s-test-infra qx-t4.xml: <reserved>448 MiB</reserved>
    "b200": (183359 - 728) * MiB,            # k8s-test-infra qx-b200.xml: <reserved>728 MiB</reserved>
}


@pytest.mark.parametrize("name, cuda", sorted(CUDA_TOTAL.items()))
def test_cuda_total_is_capacity_less_what_the_driver_reserves(lib, name, cuda):
    # the figure vLLM, SGLang and TensorRT-LLM budget from (torch.cuda.mem_get_info), to the MiB
    s = Scenario.create(lib, "llama3.1-8b", name)
    assert abs(s.evaluate("cuda_total_memory") - cuda) < MiB
    assert s.evaluate("total_gpu_memory") == s.evaluate("cuda_total_memory")


def test_every_nvidia_preset_reserves_with_a_source(lib):
    for name, settings, above in nvidia_presets(lib):
        assert "driver_reserved" in settings and above[1].startswith("# reserved: "), name


@pytest.mark.parametrize("name, mib", sorted(DRIVER_MIB.items()))
def test_capacity_is_the_driver_figure(lib, name, mib):
    assert capacity(lib, name) == mib * MiB


def test_amd_capacity_in_bytes(lib):
    assert capacity(lib, "mi300x") == MI300X_VRAM_BYTES


def test_presets_without_filters_lists_both_kinds():
    code, out, err = run("presets")
    assert (code, err) == (0, "")
    kinds = {kind for kind, _ in listed(out)}
    assert kinds == {"model", "gpu"}
    assert ("gpu", "rtx4090") in listed(out) and ("model", "llama2-7b") in listed(out)


@pytest.mark.parametrize("kind", ["model", "gpu"])
def test_kind_filter(kind):
    code, out, _ = run("presets", "--kind", kind)
    assert code == 0
    assert {k for k, _ in listed(out)} == {kind}


def test_family_filter_matches_name_or_description_in_any_case():
    code, out, _ = run("presets", "--family", "H100")
    assert code == 0
    assert {n for _, n in listed(out)} == {"h100-80g", "h100-pcie", "h100-nvl"}
    code, out, _ = run("presets", "--family", "amd instinct")  # only in the descriptions
    assert code == 0
    assert {n for _, n in listed(out)} == {"mi250x", "mi300x", "mi325x"}


def test_min_memory_filter(lib):
    code, out, _ = run("presets", "--min-memory", "80GB")
    assert code == 0
    names = {n for k, n in listed(out)}
    assert {k for k, _ in listed(out)} == {"gpu"}
    assert {"h100-80g", "a100-80g", "b200", "mi300x"} <= names
    assert not {"rtx4090", "a100-40g", "l40s", "t4"} & names
    # 81559 MiB is 85.5 GB: an H100 has 80 GB but not 80 GiB + 1 MiB
    code, out, _ = run("presets", "--min-memory", "81559MiB", "--family", "h100")
    assert {n for _, n in listed(out)} == {"h100-80g", "h100-pcie", "h100-nvl"}
    code, out, _ = run("presets", "--min-memory", "81560MiB", "--family", "h100")
    assert {n for _, n in listed(out)} == {"h100-nvl"}


def test_filters_combine():
    code, out, _ = run("presets", "--kind", "gpu", "--family", "nvidia", "--min-memory", "175GiB")  # B200: 183359 MiB = 179.1 GiB
    assert code == 0
    assert {n for _, n in listed(out)} == {"b200", "gb200"}


def test_no_match_is_said_and_exits_1():
    code, out, _ = run("presets", "--family", "no-such-gpu")
    assert (code, out) == (1, "no preset matches\n")


@pytest.mark.parametrize("size, message", [
    ("24", "--min-memory 24 has no unit"),
    ("lots", "--min-memory lots is not a memory size"),
    ("0GB", "--min-memory 0GB is not a memory size"),
    ("1e999GB", "--min-memory 1e999GB is not a memory size"),
])
def test_bad_min_memory_is_a_usage_error(size, message):
    code, out, err = run("presets", f"--min-memory={size}")
    assert code == 2 and out == ""
    assert err.startswith(f"memform: error: {message}")
    assert "Traceback" not in err


def test_min_memory_with_kind_model_is_refused():
    code, _, err = run("presets", "--kind", "model", "--min-memory", "24GB")
    assert code == 2 and "--min-memory" in err and "Traceback" not in err


def test_bad_kind_is_a_usage_error():
    code, _, err = run("presets", "--kind", "tpu")
    assert code == 2 and "invalid choice" in err and "Traceback" not in err
