"""A run's host speed index on the page, and the reader's own host ("on your host").

A probe result made since issue 35 carries how fast its host launched (`ProbeResult.host`): the median, p10
and p90 host µs of a trivial torch launch in the run's own process. The page names it beside a run wherever
one is picked or named (`host_phrase`); an older file says "host not measured", never an error.

"On your host" carries a run's figures to another host's speed through the calibrated timing model: the
fit's host costs moved by `Calibration.on_host` and the run's points predicted again (`OnHost`), the same
model the Calibration tab checks, never a second formula. The GPU's figures do not move with the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.probe_result import MAX_LAUNCH_US, launch_us_field
from ui.common import plain

NOT_MEASURED = "host not measured"
# How a reader measures their own host's index: on a machine with a GPU and this repository (the page imports
# neither torch nor the probe). The first prints {median, p10, p90}; the index is the median.
MEASURE_COMMAND = (
    "python -c \"from gpu_probe.host_speed import HostSpeed; h = HostSpeed(); h.sample('now'); "
    "print(h.block()['torch_launch_us'])\""
)
BENCH_COMMAND = "python bench/launch_cost.py --out launch_cost.json"
# The input's URL value (ui.url_params clamps to it; 0 is then refused here, with a notice).
HOST_SPEC = ("float", 0.0, MAX_LAUNCH_US)
INPUT_LABEL = "Your host: µs a launch"
INPUT_HELP = (
    "Your host's speed index: the median host time of one trivial torch launch (`torch.add` on tiny "
    "tensors), in µs. Measure it on your machine with the probe: "
    f"`{MEASURE_COMMAND}` (prints its median, p10 and p90), or `{BENCH_COMMAND}` (every launch path side by "
    "side). Empty: this run's own host. The page then shows what the calibrated timing model puts each step "
    f"at on that host: its launch and replay costs scaled, its GPU times kept. From above 0 to {MAX_LAUNCH_US:,.0f}."
)
SPREAD_SENTENCE = "Host-bound steps move with the host"


def host_cost(result):
    """The run's index as a `LaunchCost` (median, p10, p90 µs a torch launch), or None (not measured)."""
    host = getattr(result, "host", None)
    return host.index.torch_launch_us if host is not None else None


def own_index(result) -> float | None:
    """The run's index in one figure: its median µs a torch launch (None: not measured)."""
    cost = host_cost(result)
    return cost.median if cost is not None else None


def launch_us(us: float) -> str:
    """'5.9', '0.42', '120': a launch's µs, as many digits as a launch time carries."""
    return f"{us:.2g}" if us < 1 else f"{us:.1f}" if us < 100 else f"{us:,.0f}"


def host_phrase(result) -> str:
    """'host: 5.9 µs a torch launch (5.2–7.1)' (median, p10–p90), or 'host not measured'."""
    cost = host_cost(result)
    if cost is None:
        return NOT_MEASURED
    return f"host: {launch_us(cost.median)} µs a torch launch ({launch_us(cost.p10)}–{launch_us(cost.p90)})"


def host_line(result) -> str:
    """The index in one short line, for beside a chart's heading: 'This run's host: 6.1 µs a torch launch
    (p10–p90 5.8–7.0).', or that it was not measured."""
    cost = host_cost(result)
    if cost is None:
        return (
            "Host not measured: this run's file predates the host speed index, so its host-bound figures cannot "
            "be carried to another host."
        )
    return (
        f"This run's host: {launch_us(cost.median)} µs a torch launch (p10–p90 {launch_us(cost.p10)}–"
        f"{launch_us(cost.p90)})."
    )


def host_sentence(result) -> str:
    """The index in a sentence, with how it was measured and on what CPU (markdown-safe: the CPU's name comes
    from the file)."""
    host = getattr(result, "host", None)
    if host is None:
        return host_line(result)
    cost = host.index.torch_launch_us
    return (
        f"This run's host: {launch_us(cost.median)} µs a torch launch (median; p10–p90 "
        f"{launch_us(cost.p10)}–{launch_us(cost.p90)}), over {host.launches:,} launches a sample in the run's own "
        f"process, on {plain(host.cpu)}."
    )


def checked_host(value) -> tuple[float | None, str | None]:
    """The reader's index as the page uses it: (µs, or None for the run's own; None, or why the value was refused).
    Empty is the run's own; what a result file's index may not be (zero, negative, not a number, over
    MAX_LAUNCH_US) is refused by the same check (`core.probe_result.launch_us_field`), naming the input."""
    if value is None:
        return None, None
    try:
        return launch_us_field(value, INPUT_LABEL), None
    except ValueError as err:
        return None, f"{plain(str(err))}; using this run's own host."


def your_host(
    column, key: str, result, on_change=None, whose: str = "this run's"
) -> tuple[float | None, str | None]:
    """The reader's host input, drawn in `column` and bound to the URL under `key`: (their index, or None where
    it is empty or the run has no index of its own to carry from; a notice for a value it refused). `whose`: the
    run's, as the empty box names it."""
    own = own_index(result)
    value = column.number_input(
        INPUT_LABEL,
        min_value=0.0,
        max_value=MAX_LAUNCH_US,
        value=None,
        step=0.5,
        format="%.2f",
        key=key,
        bind="query-params",
        placeholder=f"{whose}: {launch_us(own)}" if own is not None else "not measured",  # fits the box
        disabled=own is None,
        help=INPUT_HELP,
        on_change=on_change,
    )
    index, notice = checked_host(value)
    return (index if own is not None else None), notice


@dataclass(frozen=True)
class OnHost:
    """A run's modelled points on its own host and on another: each [step, host, busy] µs (`Calibration`'s)."""

    own: float
    index: float
    points: tuple
    here: np.ndarray  # the calibrated model on the run's host
    there: np.ndarray  # the same model on the host `index`

    @classmethod
    def of(cls, cal, index: float) -> OnHost | None:
        """`cal`'s points predicted on the host `index` (None where the run has no index of its own)."""
        if not (index and cal.host_index):
            return None
        there = cal.simulator.predict(cal.on_host(index))
        return cls(float(cal.host_index), float(index), tuple(cal.points), cal.predicted, there)

    def at(self, mode: str, batch: int) -> int | None:
        """The point of (mode, batch), or None where the fit has none (a fallback, an unmodelled mode)."""
        return next((i for i, p in enumerate(self.points) if p.mode.name == mode and p.batch == batch), None)

    def bound_there(self, i: int) -> str:
        from core.timeline import CPU_BOUND, GPU_BOUND

        return CPU_BOUND if self.there[i, 1] > self.there[i, 2] else GPU_BOUND
