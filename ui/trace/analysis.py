"""What the Your trace tab draws from a trace, cached on the trace itself: its steps by a step range, and per
step the step without the profiler, the what-ifs and the per-kernel table. An upload's analyses count against the
server's byte budget with it (`drawn`, read by ui.trace.sources)."""

from __future__ import annotations

from core import trace as reader


def report_of(trace: reader.Trace, step_range: str | None) -> reader.TraceReport:
    cache = trace.__dict__.setdefault("_reports", {})
    if step_range not in cache:
        cache[step_range] = reader.analyse(trace, step_range=step_range)
    return cache[step_range]


def untraced_step(report: reader.TraceReport, step: reader.TraceStep):
    """The step without the profiler (sim.trace.untraced.Untraced): the trace's recorded figure, else an estimate."""
    from sim.trace.untraced import untraced_of

    return untraced_of(step, report.trace.recorded_untraced)


def whatifs_of(report: reader.TraceReport, step: reader.TraceStep, host_index: float | None = None) -> dict:
    """The what-ifs of the step without the profiler (what graphs and fusion would make of the step as it runs),
    a replay priced on the host `host_index` (None: the recorded run's). Only the latest host's are kept."""
    host, cached = step.__dict__.get("_whatifs", (None, None))
    if cached is None or host != host_index:
        from sim.trace.whatif import default_replay_cost, whatifs

        cached = whatifs(untraced_step(report, step).step, default_replay_cost(host_index))
        object.__setattr__(step, "_whatifs", (host_index, cached))
    return cached


def kernel_rows(report: reader.TraceReport, step: reader.TraceStep) -> list[dict]:
    cached = step.__dict__.get("_kernel_rows")
    if cached is None:
        from core.trace.kernels import kernel_table

        cached = kernel_table(report, step.index)
        object.__setattr__(step, "_kernel_rows", cached)
    return cached


def drawn(ranks: tuple) -> int:
    """How many analyses the page has cached on an upload (reports, untraced steps, what-ifs, kernel tables)."""
    count = 0
    for trace in ranks:
        for report in trace.__dict__.get("_reports", {}).values():
            count += 1 + sum(
                ("_whatifs" in s.__dict__)
                + ("_kernel_rows" in s.__dict__)
                + len(s.__dict__.get("_untraced", ()))
                for s in report.steps
            )
    return count
