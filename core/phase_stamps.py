"""A persistent kernel's in-kernel stamps, as a result file holds them (`gpu_probe.kernels.persistent_trace`): per
lane of consecutive programs, when each phase's wait began, its work started and ended."""

from __future__ import annotations

from dataclasses import dataclass

from core.result_fields import MAX_US, bounded_block, number_field

MAX_PHASES = 4096  # phases of one persistent kernel (the 1b preset has 82; 1024 layers would be 5,122)
MAX_LANES = 64


@dataclass(frozen=True, slots=True)
class PhaseStamps:
    """A persistent kernel's in-kernel stamps, per lane of consecutive programs (SMs): the median time (µs
    from the kernel's first stamp) each phase's wait began, its work started and ended
    (`gpu_probe.kernels.persistent_trace.compact`)."""

    programs: int
    total_us: float
    names: tuple[str, ...]  # per phase, in kernel order
    kinds: tuple[str, ...]
    lane_programs: tuple[tuple[int, int], ...]  # first and last program of each lane
    wait_begin_us: tuple[tuple[float, ...], ...]  # [lane][phase]
    start_us: tuple[tuple[float, ...], ...]
    end_us: tuple[tuple[float, ...], ...]
    by_kind: dict  # kind -> the read_trace summary (critical, release, imbalance, ... µs)

    def to_dict(self) -> dict:
        return {
            "programs": self.programs,
            "total_us": self.total_us,
            "names": list(self.names),
            "kinds": list(self.kinds),
            "lanes": [
                {"programs": list(p), "wait_begin_us": list(w), "start_us": list(s), "end_us": list(e)}
                for p, w, s, e in zip(self.lane_programs, self.wait_begin_us, self.start_us, self.end_us)
            ],
            "by_kind": self.by_kind,
        }


def parse_phases(v, where: str) -> PhaseStamps:
    """A run's `phases` block, every field checked (ValueError naming it)."""
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected an object")
    programs = int(number_field(v, "programs", 1, 1_000_000, f"{where}.programs", integer=True))
    total = number_field(v, "total_us", 0, MAX_US, f"{where}.total_us")
    names, kinds = v.get("names"), v.get("kinds")
    for key, values in (("names", names), ("kinds", kinds)):
        if not isinstance(values, list) or not 1 <= len(values) <= MAX_PHASES:
            raise ValueError(f"{where}.{key}: expected a list of 1 to {MAX_PHASES:,} phases")
        if not all(isinstance(x, str) and len(x) <= 100 for x in values):
            raise ValueError(f"{where}.{key}: each must be a string of at most 100 characters")
    if len(kinds) != len(names):
        raise ValueError(f"{where}.kinds: {len(kinds)} entries for {len(names)} phases")
    lanes = v.get("lanes")
    if not isinstance(lanes, list) or not 1 <= len(lanes) <= MAX_LANES:
        raise ValueError(f"{where}.lanes: expected a list of 1 to {MAX_LANES} lanes")
    columns = {"wait_begin_us": [], "start_us": [], "end_us": []}
    programs_of = []
    for k, lane in enumerate(lanes):
        at = f"{where}.lanes[{k}]"
        if not isinstance(lane, dict):
            raise ValueError(f"{at}: expected an object")
        span = lane.get("programs")
        if not (
            isinstance(span, list)
            and len(span) == 2
            and all(type(x) is int and 0 <= x < programs for x in span)
            and span[0] <= span[1]
        ):
            raise ValueError(f"{at}.programs: expected [first, last] programs below {programs}")
        programs_of.append((span[0], span[1]))
        for key, column in columns.items():
            values = lane.get(key)
            if not isinstance(values, list) or len(values) != len(names):
                raise ValueError(f"{at}.{key}: expected {len(names)} numbers, one per phase")
            if not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= MAX_US for x in values
            ):
                raise ValueError(f"{at}.{key}: each must be a number of µs from 0 to {MAX_US:g}")
            column.append(tuple(float(x) for x in values))
        if any(s > e + 1e-6 for s, e in zip(columns["start_us"][-1], columns["end_us"][-1])):
            raise ValueError(f"{at}.end_us: a phase ends before it starts")
    by_kind = v.get("by_kind", {})
    if not isinstance(by_kind, dict):
        raise ValueError(f"{where}.by_kind: expected an object")
    bounded_block(by_kind, f"{where}.by_kind", 64_000)
    return PhaseStamps(
        programs=programs,
        total_us=total,
        names=tuple(names),
        kinds=tuple(kinds),
        lane_programs=tuple(programs_of),
        wait_begin_us=tuple(columns["wait_begin_us"]),
        start_us=tuple(columns["start_us"]),
        end_us=tuple(columns["end_us"]),
        by_kind=by_kind,
    )
