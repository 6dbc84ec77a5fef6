"""Server memory per session with uploads, measured on a real server driven by Chromium.

    python bench/upload_memory.py [--sessions 5]

Starts `streamlit run app.py`, then opens `--sessions` sessions one after another (each its own
browser context), and in each uploads a probe result (the recorded H200 run, 6.5 MB, with a device
name of its own so that no two sessions share a parsed copy) on the Live GPU probe tab and a
batch-size CSV just under the 1,000,000-byte limit on the Bucketing tab. Prints the server's
resident memory (VmRSS) after the first page load and after each session, the growth per session
and the peak (VmHWM). The baseline is taken after one session without uploads has opened those tabs
(the recorded runs parsed, torch imported by the probe tab's CUDA check), so the growth is the
uploads' and the sessions'. The sessions stay open to the end, so nothing is freed early.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import harness  # noqa: E402

RECORDED = ROOT / "gpu_probe" / "recorded" / "h200.json"
UPLOAD_INPUT = "[data-testid=stFileUploaderDropzoneInput]"


def probe_file(folder: Path, i: int) -> Path:
    data = json.loads(RECORDED.read_text())
    data["device"] = f"{data['device']} (session {i})"
    path = folder / f"run{i}.json"
    path.write_text(json.dumps(data))
    return path


def csv_file(folder: Path, i: int) -> Path:
    """A valid histogram just under the 1,000,000-byte limit: one row per batch size, padded with blanks."""
    sizes = range(1, 513)
    pad = " " * (990_000 // len(sizes) - 12)
    text = "batch,count\n" + "".join(f"{b},{pad}{1 + (b * 7 + i) % 97}\n" for b in sizes)
    path = folder / f"hist{i}.csv"
    path.write_text(text)
    return path


def upload(page, path: Path) -> None:
    harness.rerun_after(page, lambda: page.locator(UPLOAD_INPUT).first.set_input_files(str(path)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args(argv)
    missing = harness.missing_requirements()
    if missing:
        print(f"cannot run: {missing}")
        return 2
    with tempfile.TemporaryDirectory() as tmp, harness.app_server_process() as (base, proc):
        folder = Path(tmp)
        with harness.chromium() as browser:
            contexts = []
            first = harness.new_context(browser)
            contexts.append(first)
            warm = first.new_page()  # every tab the uploads touch, once, without an upload
            harness.open_app(warm, base, wait_for="[data-testid=stPlotlyChart]")
            harness.open_app(warm, base, "tab=Live+GPU+probe", wait_for="[data-testid=stPlotlyChart]")
            harness.open_app(warm, base, "tab=Bucketing&bk_workload=uploaded+CSV")
            start, _ = harness.rss_mb(proc.pid)
            print(
                f"after one session opened the Simulator, Live GPU probe and Bucketing tabs: RSS {start:,.0f} MB"
            )
            previous = start
            for i in range(args.sessions):
                context = harness.new_context(browser)
                contexts.append(context)
                page = context.new_page()
                harness.open_app(page, base, "tab=Live+GPU+probe", wait_for="[data-testid=stPlotlyChart]")
                upload(page, probe_file(folder, i))
                errors = page.locator("[data-testid=stAlertContentError]").count()
                harness.open_app(page, base, "tab=Bucketing&bk_workload=uploaded+CSV")
                upload(page, csv_file(folder, i))
                rss, _ = harness.rss_mb(proc.pid)
                print(
                    f"session {i + 1}: probe result + CSV uploaded{' (an upload was refused)' if errors else ''}, "
                    f"RSS {rss:,.0f} MB (+{rss - previous:,.0f} MB)"
                )
                previous = rss
            rss, peak = harness.rss_mb(proc.pid)
            for context in contexts:
                context.close()
    per = (rss - start) / max(args.sessions, 1)
    print(
        f"{args.sessions} sessions with uploads: RSS {start:,.0f} -> {rss:,.0f} MB, {per:,.0f} MB per session; "
        f"peak {peak:,.0f} MB (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
