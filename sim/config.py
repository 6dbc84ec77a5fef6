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
KERNELS_PER_LAYER_RANGE = (11, 256)  # unfused: at least the chapter's 11 ops, one kernel each
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
    # Kernels one layer launches (sim.step.ops): the chapter's 11 ops unfused, its 4 fused kernels.
    # More unfused is a real eager PyTorch layer (the probe measured 51); the extra ones are small
    # elementwise kernels that each pay a launch and the kernel latency.
    unfused_per_layer: int = 11
    fused_per_layer: int = 4

    def __post_init__(self) -> None:
        DecoderShape.__post_init__(self)
        owner = "ModelConfig"
        _check_float(owner, "bytes_per_el", self.bytes_per_el, 0, 8, low_open=True)
        check_int(owner, "context_len", self.context_len, 1, 1_048_576)
        check_int(owner, "unfused_per_layer", self.unfused_per_layer, *KERNELS_PER_LAYER_RANGE)
        check_int(owner, "fused_per_layer", self.fused_per_layer, 1, self.unfused_per_layer)

    def with_layers(self, n_layers: int) -> ModelConfig:
        return replace(self, n_layers=n_layers)


def model_from_hf(decoder: DecoderShape, context_len: int = 1024, **kernels) -> ModelConfig:
    """The simulator's model of a decoder read from a Hugging Face config (`core.hf_config.HFDecoder`): its
    shape, its bytes per element from the config's dtype, at `context_len` tokens of context; `kernels`:
    unfused_per_layer and fused_per_layer where they differ from the chapter's. A bias on q, k and v (Qwen2)
    is a few KB a layer and not modelled."""
    shape = {f: getattr(decoder, f) for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab")}
    return ModelConfig(
        decoder.name,
        **shape,
        tie_embeddings=decoder.tie_embeddings,
        bytes_per_el=getattr(decoder, "bytes_per_el", 2),
        context_len=context_len,
        **kernels,
    )


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
    graph_node_host_us: float = (
        0.0  # host time a graph replay adds per node (the driver submits them in turn)
    )
    # A persistent kernel's cost per phase in place of a kernel's latency: the grid barrier's release after
    # the last program arrives, and the imbalance of the programs' work. The probe's persistent kernel on an
    # H200 (gpu_probe/kernels/NOTES.md, run 7): release 0.8-1.7 µs and imbalance 0.5-2.1 µs a phase.
    barrier_us: float = 2.0

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
        _check_float(owner, "graph_node_host_us", self.graph_node_host_us, 0, 100)
        _check_float(owner, "barrier_us", self.barrier_us, 0, 1_000)

    @property
    def replay_cost(self) -> GraphReplayCost:
        """A graph replay on this hardware, in the one timing model's terms: one host call of
        `graph_launch_us` (input copies included) plus `graph_node_host_us` a node, the nodes
        starting once it has returned and running `graph_node_gap_us` apart."""
        return GraphReplayCost(
            launch_us=self.graph_launch_us,
            per_node_host_us=self.graph_node_host_us,
            node_gap_us=self.graph_node_gap_us,
        )


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
The chapter's step: 32 layers, 11 kernels per layer unfused (4 fused), 6 µs of host time per launch.
Model (≈1.2 B parameters): hidden 2048, 16 heads of 128 with 4 KV heads, a slim SwiGLU FFN of 3584
(1.75 × hidden), vocab 32000, bf16, 1024 tokens of context. The chapter names no model; these sizes
make its figures come out. At batch 1 the five big projections (q and o 3.8 µs, gate, up and down
5.9 µs, latency included) and the six small kernels (two norms, k, v, RoPE, attention: 1.0-1.7 µs)
keep the GPU busy ≈1.12 ms for the step, ≈3 µs a kernel (the chapter's "a few microseconds"),
against 356 × 6 µs ≈ 2.1 ms of launches: ≈51 % utilisation, as in the chapter's widget (0.89 vs
1.73 ms, 52 %).
Hardware: an H100-class GPU at achievable, not datasheet, rates (estimates, not measurements):
3000 GB/s HBM (≈90 % of 3.35 TB/s, what a large copy reaches), 700 TFLOP/s bf16 matmul (≈70 % of the
989 dense peak), 1 µs kernel latency (launch latency, ramp-up and tail of a tiny grid). 6 µs per eager
launch and 11 kernels a layer are the chapter's figures, not a measurement: the probe measured 51
kernels a layer and 17-24 µs a launch for an eager PyTorch layer (the other presets use those). A
graph replay costs 10 µs of host time (cudaGraphLaunch plus copying token ids and positions into the
static buffers); a queued kernel starts 0.2 µs after its predecessor ends.
Fused (132 kernels: 792 µs of launches against ≈0.89 ms of GPU work) the step is just GPU-bound,
0.93 ms; graphs take the launches off too (0.93 ms with fusion, 2.3 × the unfused eager step). Each
sequence adds 2 MB of KV-cache reads per layer (1024 tokens × 4 KV heads × 128 × K and V × 2 bytes),
so from batch 45 the kernels outgrow the launches: with both toggles off the gaps close on their own."""

# The probe's unfused layer (its small and 1b runs of 2026-12-06 on one H100, in the repository's history; the
# shipped runs are H200 runs of 2026-12-07, on a faster host and launch path): the chapter's
# per-op layer, 15 kernels and the attention's split merge at small batch; host time per launch (unprofiled
# enqueue time / launches) 25-44 µs at batch 1 to 256 in both presets (the hold-out run: 28-38 µs).
PROBE_EAGER_KERNELS_PER_LAYER = 16
PROBE_FUSED_KERNELS_PER_LAYER = 6  # its fused layer at batch 1: 5 kernels and the split merge
PROBE_EAGER_LAUNCH_US = 30.0
# A replay's host time (input copies + cudaGraphLaunch), unprofiled, small preset at batch 1: 93.8 µs for the
# fused graph's 196 nodes and 174.4 µs for the unfused graph's 517, a line of 45 µs + 0.25 µs a node (the
# hold-out: 98.0 and 238.9 µs, 12 µs + 0.44 µs a node).
PROBE_REPLAY_US = 45.0
PROBE_REPLAY_NODE_US = 0.25
PROBE_NODE_GAP_US = 0.4  # the calibration's reading of the profiled replays: 0.416 µs between nodes

_LLAMA_NOTE = """\
Llama-3-8B: 32 layers, hidden 4096, 32 heads / 8 KV heads of 128, FFN 14336, vocab 128256, bf16,
2048 tokens of context. 16 GB of weights per step.
Kernels and host, measured: the live probe's unfused layer (the chapter's ops one kernel each: two RMSNorms,
q, k, v, RoPE, the KV write, paged attention, o, gate, up, SiLU x up, down, two residual adds) launches 16
kernels a layer at batch 1 (15 and the attention's split merge), at 25-44 µs of host time each on the probe
machine's host (its H100 runs of 2026-12-06, unprofiled); 30 µs here. Its fused layer is 6
kernels at batch 1 (5 and the split merge). A replay costs its host 45 µs (input copies and cudaGraphLaunch)
plus 0.25 µs a node (the probe's graphs at batch 1: 93.8 µs for 196 nodes, 174.4 µs for 517); 0.4 µs
between replayed kernels (the calibration's reading of the profiled replays); 2 µs of latency a kernel.
Published, as a check: gpt-fast's plain eager Llama-2-7B decodes 25.5 tokens/s on an A100 (39 ms a
token) against 107 with torch.compile (pytorch-labs/gpt-fast README); here an eager step is 516
launches x 30 µs = 15.5 ms of host time against 6.1 ms of GPU work: launch-bound up to batch 101, GPU-bound
from the crossover at 102. At batch 1 graphs alone are 2.4 × faster, fusion with graphs 2.8 × (5.7 ms).
GPU: an H100 SXM at achievable rates (estimates, not measurements): 3000 GB/s (the probe's H100 copied at
3,010 GB/s; 3.35 TB/s on the datasheet), 700 TFLOP/s bf16 (of 989 dense; the probe's H100 ran a large
product at 778). Reading 16 GB takes ≈5.3 ms. One launch cost serves both paths: the probe's fused
Triton launches cost 40-60 µs, its one-op kernels less."""

_PROBE_NOTE = """\
The live probe's decoder (≈0.5 B parameters): 32 layers, hidden 1024, 16 heads of 64 with 16 KV heads,
FFN 2816, vocab 32000, bf16, 512 tokens of context, on one H200.
Hardware: 4200 GB/s is the H200's copy bandwidth as the probe measured it (4,104-4,250 GB/s in its runs of
2026-11-30 to 12-03; 4.8 TB/s on the datasheet); 790 TFLOP/s the bf16 matrix rate it reaches (of 989
dense), 2 µs latency a kernel. Kernels and host, measured on the probe's earlier runs (small.json as it was,
one H100, 2026-12-06): the unfused layer is the chapter's ops one kernel each, 16 kernels at batch 1 (15 and
the attention's split merge, 15 from batch 64), at 25-44 µs of host time each, unprofiled (30 µs here); its
fused layer 6 (5 above batch 4). A replay costs 45 µs of host time with its input copies plus 0.25 µs a node
(93.8 µs measured for the fused graph's 196 nodes, 174.4 µs for the unfused graph's 517); 0.4 µs between
replayed kernels.
At batch 1 the simulator then gives 15.5 ms eager (measured 15.0 ms on the H100, the host setting the pace),
1.6 ms with graphs (1.5 measured) and 0.79 ms fused with graphs (0.67 on the H100). One launch cost
serves both paths, where the probe's fused Triton launches cost 45-60 µs: fused without graphs it gives 5.9 ms
where the probe measured 11.5. The Calibration tab fits every figure per kernel family; its preset is the
calibrated one."""

_H100 = dict(
    hbm_GBps=3000.0,
    matrix_TFLOPs=700.0,
    min_kernel_us=1.0,
    eager_launch_us=6.0,
    graph_launch_us=10.0,
    graph_node_gap_us=0.2,
)
_PROBE_HOST = dict(
    min_kernel_us=2.0,
    eager_launch_us=PROBE_EAGER_LAUNCH_US,
    graph_launch_us=PROBE_REPLAY_US,
    graph_node_host_us=PROBE_REPLAY_NODE_US,
    graph_node_gap_us=PROBE_NODE_GAP_US,
)
_PROBE_KERNELS = dict(
    unfused_per_layer=PROBE_EAGER_KERNELS_PER_LAYER, fused_per_layer=PROBE_FUSED_KERNELS_PER_LAYER
)

# Each preset's decoder: name, layers, hidden, heads, KV heads, FFN, vocab, bf16, tokens of context.
_CHAPTER_MODEL = ModelConfig("chapter-1.2b", 32, 2048, 16, 4, 3584, 32000, bytes_per_el=2, context_len=1024)
_LLAMA_MODEL = ModelConfig(
    "llama3-8b", 32, 4096, 32, 8, 14336, 128256, bytes_per_el=2, context_len=2048, **_PROBE_KERNELS
)
_PROBE_MODEL = ModelConfig(
    "probe-0.5b", 32, 1024, 16, 16, 2816, 32000, bytes_per_el=2, context_len=512, **_PROBE_KERNELS
)

PRESETS: dict[str, Preset] = {
    p.key: p
    for p in (
        Preset(
            key="chapter",
            title="Chapter: 32 layers, 11 kernels/layer, 6 µs/launch",
            model=_CHAPTER_MODEL,
            hardware=HardwareConfig(name="H100-class (achievable rates)", **_H100),
            note=_CHAPTER_NOTE,
        ),
        Preset(
            key="llama3-8b-h100",
            title="Llama-3-8B on an H100 SXM",
            model=_LLAMA_MODEL,
            hardware=HardwareConfig(
                name="H100 SXM (achievable rates), the probe's measured host",
                hbm_GBps=3000.0,
                matrix_TFLOPs=700.0,
                **_PROBE_HOST,
            ),
            note=_LLAMA_NOTE,
        ),
        Preset(
            key="probe-0.5b-h200",
            title="Live probe's 0.5 B decoder on an H200",
            model=_PROBE_MODEL,
            hardware=HardwareConfig(
                name="H200 (measured rates)", hbm_GBps=4200.0, matrix_TFLOPs=790.0, **_PROBE_HOST
            ),
            note=_PROBE_NOTE,
        ),
    )
}
DEFAULT_PRESET = "chapter"
