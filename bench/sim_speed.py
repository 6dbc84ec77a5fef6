"""How fast the simulator and the Simulator tab respond.

    python bench/sim_speed.py [--repeats N]

(a) One 32-layer `simulate_step` plus a batch sweep 1..512 (all four toggle
    combinations), chapter preset: goal well under 20 ms. Printed cold (first call in
    the process, kernel tables not yet cached) and as the median of warm repeats.
(b) Script time of a page rerun after a control change, driven by Streamlit's AppTest:
    the wall time of `AppTest.run()`, i.e. the whole of app.py (URL sanitiser, tabs,
    the Simulator tab with its cache lookups, simulation on a cache miss, figure building
    and JSON serialisation) plus AppTest's own parsing of the produced elements. Browser
    transfer and Plotly rendering are not included (bench/interaction_speed.py measures
    those in Chromium). Goal: median under 150 ms. Each batch value is new, so every
    rerun simulates a step the cache has not seen; the sweep is cached (same model and
    hardware). Layers changes also miss the sweep cache and show that worst case.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.step_plan import StepPlan  # noqa: E402
from sim.config import PRESETS  # noqa: E402 - after the sys.path insert
from sim.step.schedule import simulate_step, sweep  # noqa: E402


def bench_simulator(repeats: int) -> None:
    preset = PRESETS["chapter"]
    model, hw = preset.model.with_layers(32), preset.hardware
    batches = np.arange(1, 513)

    def once() -> float:
        start = time.perf_counter()
        simulate_step(model, hw, StepPlan())
        sweep(model, hw, batches)
        return (time.perf_counter() - start) * 1e3

    cold = once()
    warm = [once() for _ in range(repeats)]
    print("(a) simulate_step (32 layers, batch 1) + sweep 1..512 x 4 combinations, chapter preset")
    print(
        f"    cold {cold:.1f} ms | warm median {statistics.median(warm):.1f} ms, "
        f"p90 {np.percentile(warm, 90):.1f} ms over {repeats}  (goal: well under 20 ms)"
    )


def bench_page(repeats: int) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    if at.exception:
        raise SystemExit(f"the page raised: {at.exception}")
    at.number_input(key="batch").set_value(2).run()  # warm the imports and first-run paths

    def timed(change) -> float:
        change()
        start = time.perf_counter()
        at.run()
        elapsed = (time.perf_counter() - start) * 1e3
        if at.exception:
            raise SystemExit(f"the page raised: {at.exception}")
        return elapsed

    rng = np.random.default_rng(0)
    batch_values = rng.permutation(np.arange(3, 513))[:repeats]
    batch_ms = [timed(lambda b=int(b): at.number_input(key="batch").set_value(b)) for b in batch_values]
    # "Your model": a new model, so a new step and a new sweep.
    hidden_values = rng.permutation(np.arange(8, 65) * 64)[: max(repeats // 2, 3)]
    hidden_ms = [timed(lambda h=int(h): at.number_input(key="hidden").set_value(h)) for h in hidden_values]
    toggle_ms = [timed(lambda i=i: at.toggle(key="fusion").set_value(i % 2 == 0)) for i in range(repeats)]
    layer_values = rng.permutation(np.arange(1, 129))[: max(repeats // 2, 3)]
    layers_ms = [timed(lambda n=int(n): at.slider(key="layers").set_value(n)) for n in layer_values]

    print("(b) page rerun after a control change (AppTest.run() wall time; see the docstring)")
    for name, values in (
        ("Batch size (new step, cached sweep)", batch_ms),
        ("Hidden size, Your model (new step and new sweep)", hidden_ms),
        ("Kernel fusion toggle (cached after the first two)", toggle_ms),
        ("Layers slider (new step and new sweep)", layers_ms),
    ):
        print(
            f"    {name:52s} median {statistics.median(values):6.1f} ms, "
            f"p90 {np.percentile(values, 90):6.1f} ms over {len(values)}"
        )
    print("    goal: median under 150 ms for the slider change")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed repeats per figure (default 30)")
    args = parser.parse_args(argv)
    bench_simulator(args.repeats)
    bench_page(args.repeats)


if __name__ == "__main__":
    main()
