"""What is being simulated: a decoder's shape, a GPU + host's speeds, and named presets.

Every config validates itself at construction and raises `ValueError` naming the
field, so a bad slider value or a hand-edited URL fails with a message instead of
producing a nonsense timeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from core.decoder import DecoderShape, check_int
from sim.timing import GraphReplayCost

BATCH_RANGE = (1, 512)  # what the page's "Batch size" slider offers
LAYERS_RANGE = (1, 128)  # what the page's "Layers" slider offers
MAX_SIM_BATCH = 65_536  # the simulator itself accepts more (sweeps, bucket studies), but not unbounded


def _check_float(owner: str, name: str, value, low: float, high: float, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name}: must be a finite number, got {value!r}")
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        bound = f"above {low}" if low_open else f"at least {low}"
        raise ValueError(f"{owner}.{name}: must be {bound} and at most {high}, got {value}")


@dataclass(frozen=True, slots=True)
class ModelConfig(DecoderShape):
    """A decoder's shape (`core.decoder.DecoderShape`) plus what a simulated step needs."""

    bytes_per_el: float = 2  # bf16 weights and activations; 1 for fp8, 0.5 for int4 weights
    context_len: int = 1024  # tokens already in each sequence's KV cache at this decode step

    def __post_init__(self) -> None:
        DecoderShape.__post_init__(self)
        owner = "ModelConfig"
        _check_float(owner, "bytes_per_el", self.bytes_per_el, 0, 8, low_open=True)
        check_int(owner, "context_len", self.context_len, 1, 1_048_576)

    def with_layers(self, n_layers: int) -> ModelConfig:
        return replace(self, n_layers=n_layers)


@dataclass(frozen=True, slots=True)
class HardwareConfig:
    """How fast the GPU moves bytes and does math, and what the host pays per submission."""

    name: str
    hbm_GBps: float  # achievable HBM bandwidth (a large copy), not the datasheet peak
    matrix_TFLOPs: float  # achievable dense matmul rate at the model's precision
    min_kernel_us: float  # every kernel's fixed latency (an empty kernel): launch on the GPU, fill, drain
    eager_launch_us: float  # host time to build and submit one kernel (Python + dispatcher + driver)
    graph_launch_us: float  # host time for one graph replay, input copies into static buffers included
    graph_node_gap_us: float  # GPU time between one queued kernel's end and the next one's start

    def __post_init__(self) -> None:
        owner = "HardwareConfig"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"{owner}.name: must be a non-empty string")
        _check_float(owner, "hbm_GBps", self.hbm_GBps, 0, 100_000, low_open=True)
        _check_float(owner, "matrix_TFLOPs", self.matrix_TFLOPs, 0, 100_000, low_open=True)
        _check_float(owner, "min_kernel_us", self.min_kernel_us, 0, 10_000)
        _check_float(owner, "eager_launch_us", self.eager_launch_us, 0, 10_000, low_open=True)
        _check_float(owner, "graph_launch_us", self.graph_launch_us, 0, 100_000, low_open=True)
        _check_float(owner, "graph_node_gap_us", self.graph_node_gap_us, 0, 1_000)

    @property
    def replay_cost(self) -> GraphReplayCost:
        """A graph replay on this hardware, in the one timing model's terms: one host call of
        `graph_launch_us` (input copies included), then the nodes `graph_node_gap_us` apart."""
        return GraphReplayCost(launch_us=self.graph_launch_us, node_gap_us=self.graph_node_gap_us)


@dataclass(frozen=True, slots=True)
class Preset:
    key: str
    title: str
    model: ModelConfig
    hardware: HardwareConfig
    note: str  # why each figure is what it is

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelConfig):
            raise ValueError("Preset.model: must be a ModelConfig")
        if not isinstance(self.hardware, HardwareConfig):
            raise ValueError("Preset.hardware: must be a HardwareConfig")


_CHAPTER_NOTE = """\
The chapter's step: 32 layers, 11 kernels per layer unfused, 6 µs of host time per launch.
Model (≈1.2 B parameters): hidden 2048, 16 heads of 128 with 4 KV heads, a slim SwiGLU FFN of 3584
(1.75 × hidden), vocab 32000, bf16, 1024 tokens of context. The chapter names no model; these sizes
make its figures come out. At batch 1 the five big projections (q, o at 2.8 µs; gate, up, down at
4.9 µs of weight reads) and the six small kernels (two norms, k, v, RoPE, attention at the 2 µs
minimum) keep the GPU busy ≈1.08 ms for the step, ≈3 µs a kernel (the chapter's "a few
microseconds"), against 356 × 6 µs ≈ 2.1 ms of launches: ≈50 % utilisation, as in the chapter's
widget (0.89 vs 1.73 ms, 52 %).
Hardware: an H100-class GPU at achievable, not datasheet, rates: 3000 GB/s HBM (≈90 % of 3.35 TB/s,
what a large copy reaches), 700 TFLOP/s bf16 matmul (≈70 % of the 989 dense peak), 2 µs minimum kernel
time (launch latency, ramp-up and tail of a tiny grid). 6 µs per eager launch is the chapter's figure;
a graph replay costs 10 µs of host time (cudaGraphLaunch plus copying token ids and positions into the
static buffers); a queued kernel starts 0.2 µs after its predecessor ends.
Fused (132 kernels: 792 µs of launches vs ≈0.77 ms of GPU work) the step is balanced; graphs make it
GPU-bound. Each sequence adds 2 MB of KV-cache reads per layer (1024 tokens × 4 KV heads × 128 × K and
V × 2 bytes), so by batch ≈49 the kernels outgrow the launches: at batch 128 with both toggles off the
gaps close on their own."""

_LLAMA_NOTE = """\
Llama-3-8B: 32 layers, hidden 4096, 32 heads / 8 KV heads of 128, FFN 14336, vocab 128256, bf16,
2048 tokens of context. 16 GB of weights per step.
H100 SXM at achievable rates: 3000 GB/s (the datasheet's 3.35 TB/s is not reached by real copies),
700 TFLOP/s bf16 (of 989 dense), 2 µs minimum kernel, 6 µs per eager launch (the chapter's figure),
10 µs per graph replay, 0.2 µs between queued kernels. Reading 16 GB takes ≈5.3 ms, far more than
356 launches: a model this size is GPU-bound even at batch 1, so launch overhead hardly matters."""

_PROBE_NOTE = """\
The live probe's decoder (≈0.5 B parameters): 32 layers, hidden 1024, 16 heads of 64 with 16 KV heads,
FFN 2816, vocab 32000, bf16, 512 tokens of context, on one H200.
4200 GB/s is the measured copy bandwidth of an H200 (of 4.8 TB/s on the datasheet) and 790 TFLOP/s
the measured bf16 matmul rate; 2 µs minimum kernel. The host figures (6 µs per eager launch, 10 µs per
graph replay, 0.2 µs node gap) are starting guesses: the Calibration tab fits them to a measured run.
The probe's eager PyTorch step launches more than 11 kernels a layer (casts, reshapes, residual adds,
SiLU and multiply run as kernels of their own), so the measured step is more launch-bound than this."""

_H100 = dict(
    hbm_GBps=3000.0,
    matrix_TFLOPs=700.0,
    min_kernel_us=1.0,
    eager_launch_us=6.0,
    graph_launch_us=10.0,
    graph_node_gap_us=0.2,
)

PRESETS: dict[str, Preset] = {
    "chapter": Preset(
        key="chapter",
        title="Chapter: 32 layers, 11 kernels/layer, 6 µs/launch",
        model=ModelConfig(
            name="chapter-1.2b",
            n_layers=32,
            hidden=2048,
            n_heads=16,
            n_kv_heads=4,
            ffn=3584,
            vocab=32000,
            bytes_per_el=2,
            context_len=1024,
        ),
        hardware=HardwareConfig(name="H100-class (achievable rates)", **_H100),
        note=_CHAPTER_NOTE,
    ),
    "llama3-8b-h100": Preset(
        key="llama3-8b-h100",
        title="Llama-3-8B on an H100 SXM",
        model=ModelConfig(
            name="llama3-8b",
            n_layers=32,
            hidden=4096,
            n_heads=32,
            n_kv_heads=8,
            ffn=14336,
            vocab=128256,
            bytes_per_el=2,
            context_len=2048,
        ),
        hardware=HardwareConfig(name="H100 SXM (achievable rates)", **_H100),
        note=_LLAMA_NOTE,
    ),
    "probe-0.5b-h200": Preset(
        key="probe-0.5b-h200",
        title="Live probe's 0.5 B decoder on an H200",
        model=ModelConfig(
            name="probe-0.5b",
            n_layers=32,
            hidden=1024,
            n_heads=16,
            n_kv_heads=16,
            ffn=2816,
            vocab=32000,
            bytes_per_el=2,
            context_len=512,
        ),
        hardware=HardwareConfig(
            name="H200 (measured rates)",
            hbm_GBps=4200.0,
            matrix_TFLOPs=790.0,
            min_kernel_us=2.0,
            eager_launch_us=6.0,
            graph_launch_us=10.0,
            graph_node_gap_us=0.2,
        ),
        note=_PROBE_NOTE,
    ),
}
DEFAULT_PRESET = "chapter"
