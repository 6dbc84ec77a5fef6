"""Issue 23's speed goals for the persistent kernel, as ratios measured side by side in one GPU run.

    python bench/persistent_speed.py [gpu_probe/kernels/persistent_h200/persistent_check.json]

Reads the JSON that `tools/persistent_check.py --out DIR` writes on a GPU (the persistent kernel and the probe's
fused+graph step timed in the same run, each batch back to back and as the probe times it, with the read floor
measured in that run) and prints each goal: the value, the goal, met or missed. No GPU needed to read it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from core.step_plan import FUSED_GRAPH
from core.step_plan import PERSISTENT as PERSISTENT_MODE

DEFAULT = (
    Path(__file__).resolve().parents[1]
    / "gpu_probe"
    / "kernels"
    / "persistent_h200"
    / "persistent_check.json"
)
PERSISTENT, PEER = PERSISTENT_MODE.name, FUSED_GRAPH.name  # the two steps, by the modes table's names
# The recorded run (2026-12-03) predates one name per mode: the check script then wrote "persistent+graph".
FORMER_NAMES = {"persistent+graph": PERSISTENT}


def runs_of(data: dict) -> dict[tuple[str, str, int], dict]:
    """(preset, mode, batch) -> the run's figures, each mode by the modes table's name."""
    return {(r["preset"], FORMER_NAMES.get(r["mode"], r["mode"]), r["batch"]): r for r in data["runs"]}


def goals(data: dict) -> list[tuple[str, float, str, bool]]:
    """(what, value, goal, met) for every goal the run has the figures for."""
    runs = runs_of(data)
    rows = []
    one = runs.get(("1b", PERSISTENT, 1))
    if one:
        rows.append(("1b b1 persistent back to back / read floor", one["back_to_back_x_floor"], "<= 1.27"))
        rows.append(
            ("1b b1 persistent as timed / read floor", one["as_timed_us"] / one["floor_us"], "<= 1.40")
        )
    for (preset, mode, batch), r in sorted(runs.items()):
        peer = runs.get((preset, PEER, batch))
        if preset == "1b" and mode == PERSISTENT and peer:
            rows.append(
                (
                    f"1b b{batch} persistent / fused+graph, back to back",
                    r["back_to_back_us"] / peer["back_to_back_us"],
                    "< 1.0",
                )
            )
    small = runs.get(("small", PERSISTENT, 1))
    if small:
        rows.append(
            ("small b1 persistent back to back / read floor", small["back_to_back_x_floor"], "<= 2.0")
        )
    out = []
    for what, value, goal in rows:
        op, limit = goal.split()
        out.append((what, value, goal, value <= float(limit) if op == "<=" else value < float(limit)))
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT
    try:
        data = json.loads(path.read_text())
        rows = goals(data)
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"bench/persistent_speed.py: {path}: not a persistent_check result ({err})", file=sys.stderr)
        return 2
    print(f"{data.get('device', '?')} · {data.get('created', '?')} · {data.get('command', '?')}")
    for what, value, goal, met in rows:
        print(f"{what:<52} {value:8.3f}   goal {goal:<7} {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
