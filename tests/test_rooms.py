"""Each room of the house imports only what docs/architecture.md says it may.

Read from the source (every import, the lazy ones inside functions included), not by importing it, so a
room that reaches into another fails here before it runs anywhere.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = ("numpy", "torch", "triton", "streamlit", "plotly", "pandas", "scipy", "playwright")

# room -> the rooms and packages it may import, besides the standard library and itself. A room is a
# package or a module; the longest name that matches a file or an import decides its room.
SIM = {"sim.timing", "sim.config", "sim.step", "sim.buckets", "sim.calibration", "sim.trace", "sim.cli"}
TABS = {"ui.simulator", "ui.probe", "ui.trace", "ui.buckets", "ui.calibration", "ui.quiz"}
PAGE = {"core", "gpu_probe", "numpy", "pandas", "plotly", "streamlit", "torch", *SIM}
ALLOWED = {
    "core": {"numpy"},
    "sim.timing": {"core", "numpy"},
    "sim.config": {"core", "sim.timing"},
    "sim.step": {"core", "numpy", "sim.config", "sim.timing"},
    "sim.buckets": {"core", "numpy", "sim.config", "sim.timing", "sim.step"},
    "sim.calibration": {"core", "numpy", "sim.config", "sim.timing", "sim.step"},
    "sim.trace": {"core", "numpy", "sim.config", "sim.timing", "sim.calibration"},
    "sim.cli": {"core", "numpy", *SIM},
    "gpu_probe": {"core", "numpy", "torch", "triton"},
    "ui": PAGE,  # what the tabs share
    **{tab: PAGE | {"ui"} for tab in TABS},  # a tab: the shared modules, never another tab
    "ui.url_params": PAGE | {"ui"} | TABS,  # the URL's keys are every tab's
    "app": {"streamlit", "ui", "ui.url_params", *TABS},
}
# The simulator's modules that are not a package: the CLI and its text report.
MODULES = {
    "sim.__main__": "sim.cli",
    "sim.report": "sim.cli",
    "sim": "sim.cli",
}


def room_of(module: str) -> str | None:
    """The room a dotted module name belongs to (None: the standard library or a package no rule names)."""
    if module in MODULES:
        return MODULES[module]
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in MODULES:
            return MODULES[name]
        if name in ALLOWED:
            return name
    return parts[0] if parts[0] in THIRD_PARTY else None


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" for a in node.names}  # `from sim import config`
    return found


def breaches(path: Path) -> list[str]:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    mine = room_of(module)
    out = []
    for name in sorted(imports(path)):
        other = room_of(name)
        if other is None or other == mine:
            continue
        if other not in ALLOWED[mine]:
            out.append(f"{module} ({mine}) imports {name} ({other})")
    return out


FILES = sorted(p for room in ("core", "sim", "gpu_probe", "ui") for p in (ROOT / room).rglob("*.py")) + [
    ROOT / "app.py"
]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_room_imports_only_what_it_may(path):
    assert not breaches(path)


def test_a_breach_is_named(tmp_path, monkeypatch):
    """The check can fail: the simulator's step model reaching for torch, the probe for the simulator, a tab into
    another tab."""
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    bad = tmp_path / "sim" / "step" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("import numpy as np\n\ndef f():\n    import torch\n    from sim.buckets import layouts\n")
    assert breaches(bad) == [
        "sim.step.bad (sim.step) imports sim.buckets.layouts (sim.buckets)",
        "sim.step.bad (sim.step) imports torch (torch)",
    ]
    probe = tmp_path / "gpu_probe" / "x.py"
    probe.parent.mkdir()
    probe.write_text("from sim.timing import kernel_us\nfrom core.step_plan import MODES\n")
    assert breaches(probe) == ["gpu_probe.x (gpu_probe) imports sim.timing.kernel_us (sim.timing)"]
    tab = tmp_path / "ui" / "trace" / "x.py"
    tab.parent.mkdir(parents=True)
    tab.write_text("from ui.charts import lanes_figure\nfrom ui.probe.tab import render\n")
    assert breaches(tab) == ["ui.trace.x (ui.trace) imports ui.probe.tab.render (ui.probe)"]
