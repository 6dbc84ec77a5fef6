"""The roofline floor of one decode step: no step is faster than the bytes it must read over the copy
bandwidth, nor than the FLOPs it must do over the matrix rate.

A probe run measures both ceilings on its GPU (`hbm_copy_GBps`: a large device-to-device copy, bytes read
plus written; `matmul_TFLOPs`: one large bf16 product) and says the model's shape and context, so a run's
`Roofline` (`core.probe_result.ProbeResult.roofline`) gives the floor at any batch, which ceiling sets it,
how far a measured step is above it and how a step's time divides into the floor, the host's share and the
kernel boundaries (`step_split`). A shape the file does not give counts as nothing: no KV bytes, the
weights' FLOPs alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.decoder import kv_elements


@dataclass(frozen=True, slots=True)
class Roofline:
    weight_read_bytes: int  # weights one step reads (an untied embedding table only row by row)
    copy_GBps: float  # the copy bandwidth, bytes read plus written
    matmul_TFLOPs: float | None = None  # the matrix rate; None: the floor is the bytes alone
    element: int = 2  # bytes per element of the KV cache and the weights
    n_layers: int | None = None  # the model's shape and the run's context: None where unknown
    hidden: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    context: int | None = None  # cached tokens per sequence

    @property
    def weight_floor_us(self) -> float:
        """The weights alone over the copy bandwidth, in µs."""
        return float(self.weight_read_bytes) / (self.copy_GBps * 1e3)

    def kv_read_bytes(self, batch: int) -> int:
        """Cached K and V a step reads: every layer, `context` tokens per sequence (0 where unknown)."""
        dims = (self.n_layers, self.hidden, self.n_heads, self.n_kv_heads, self.context)
        if any(d is None for d in dims) or min(*dims, batch) < 1:
            return 0
        head_dim = self.hidden // self.n_heads
        return kv_elements(self.n_kv_heads * head_dim, batch * self.context, self.n_layers) * self.element

    def read_bytes(self, batch: int) -> int:
        """Bytes one step at this batch must read: the weights it reads plus the KV cache at the context."""
        return int(self.weight_read_bytes) + self.kv_read_bytes(batch)

    def read_floor_us(self, batch: int) -> float:
        """The memory side of the floor: `read_bytes(batch)` over the copy bandwidth, in µs."""
        return self.read_bytes(batch) / (self.copy_GBps * 1e3)

    def step_flops(self, batch: int) -> float:
        """FLOPs one step at this batch must do: 2 per weight it multiplies, per row (the weights it reads:
        the projections, the LM head and the tiny norms), plus the attention's q.K and p.V over the context,
        every layer (the weights' alone where the shape or the context is unknown)."""
        weights = 2.0 * self.weight_read_bytes / self.element * batch
        if self.n_layers is None or self.hidden is None or self.context is None:
            return weights
        return weights + 4.0 * self.hidden * self.context * self.n_layers * batch

    def compute_floor_us(self, batch: int) -> float | None:
        """The compute side of the floor: `step_flops(batch)` over the matrix rate (None without one)."""
        if not self.matmul_TFLOPs:
            return None
        return self.step_flops(batch) / (self.matmul_TFLOPs * 1e6)

    def floor_us(self, batch: int) -> float:
        """The floor of one step: the larger of its bytes over the copy bandwidth and its FLOPs over the
        matrix rate (the bytes alone without the rate). No step can be faster."""
        return max(self.read_floor_us(batch), self.compute_floor_us(batch) or 0.0)

    def floor_bound(self, batch: int) -> str:
        """Which ceiling sets the floor at this batch: "memory" or "compute"."""
        return "compute" if (self.compute_floor_us(batch) or 0.0) > self.read_floor_us(batch) else "memory"

    def times_floor(self, run) -> float:
        """A run's median step over the floor at its batch: the page's and the bench's "× floor"."""
        return run.step_us_median / self.floor_us(run.batch)

    def hbm_used_GBps(self, run) -> float:
        """Bandwidth the run's median step time implies for the bytes it must read."""
        return self.read_bytes(run.batch) / (run.step_us_median * 1e3)

    def step_split(self, run) -> dict:
        """A step's median time cut into the floor (`floor_us`), the host's launch and input copies, and the
        rest, spread over the step's kernels: kernel boundaries.

        Each timed step starts on an idle GPU, which waits through the host's copies and launch.
        Where the run has its back-to-back time (the host's work hidden under the previous step),
        the host's share is measured: median − back to back (`host_from` "back to back"). Older
        files give only the median enqueue time, used as the host's share (`host_from` "enqueue").
        The share is kept within [0, median − floor] (`host_clamped` says which end held it, else
        None): a back-to-back time below the floor leaves no boundaries, one above the median no
        host share. The boundaries include the GPU's side of the input copies and, back to back,
        the gap between two graph launches.
        """
        floor = min(self.floor_us(run.batch), run.step_us_median)
        if run.step_us_back_to_back is not None:
            raw, host_from = run.step_us_median - run.step_us_back_to_back, "back to back"
        else:
            raw, host_from = run.enqueue_us_median or 0.0, "enqueue"
        most = run.step_us_median - floor
        host = min(max(raw, 0.0), most)
        clamped = "to the floor" if raw > most else "to zero" if raw < 0 else None
        boundaries = run.step_us_median - floor - host
        kernels = max(run.kernels_per_step, 1)
        return {
            "floor_us": floor,
            "host_us": host,
            "host_from": host_from,
            "host_clamped": clamped,
            "boundaries_us": boundaries,
            "kernels": run.kernels_per_step,
            "per_kernel_us": boundaries / kernels,
        }
