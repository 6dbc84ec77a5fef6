"""Shared by the page tests: open the app on one tab through AppTest, read its readouts, and a
synthetic probe run standing in for the recorded one (the `recorded` fixture).

Loaded by conftest for every test run, also on the GPU machine where streamlit is not installed:
streamlit is imported only inside the helpers that use it.
"""

import re
from pathlib import Path

import pytest
from synthetic_params import KNOWN_PARAMS  # tests/synthetic_params.py

import core.probe_result as probe_result
from sim.calibration import synthetic_result
from sim.config import PRESETS

APP = str(Path(__file__).resolve().parents[1] / "app.py")
MODEL = PRESETS["probe-0.5b-h200"].model.with_layers(4)  # small: the page logic is the same


def open_tab(tab: str, timeout: float = 120, **params):
    """The app with ?tab=<tab>&<params> (a streamlit AppTest), after its first run."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params["tab"] = tab
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def as_read(markdown: str) -> str:
    """Markdown source as a reader sees it: the page escapes strings from files (ui.common.plain)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def fake_run(device="NVIDIA Test GPU", noise=0.02) -> dict:
    data = synthetic_result(
        KNOWN_PARAMS,
        MODEL,
        noise=noise,
        device=device,
        modes=("eager", "fused", "graph", "fused+graph"),
    )
    data["checks"] = {
        "graph_vs_eager": {"passed": True, "detail": "4 buckets"},
        "kv_canary": {"passed": False, "detail": "block 7 changed"},
    }
    data["captures"] = [
        {"bucket": b, "capture_ms": 40.0, "graph_mem_bytes": 3 * 2**20} for b in (1, 8, 64, 256)
    ]
    return data


@pytest.fixture()
def recorded(monkeypatch):
    """A synthetic run served as the (only) recorded one, with Streamlit's caches cleared around it."""
    import streamlit as st

    import ui.probe_results

    res = probe_result.load_result(fake_run(), timeline_source="recorded")
    monkeypatch.setattr(probe_result, "recorded_result", lambda: res)
    monkeypatch.setattr(ui.probe_results, "MORE_RECORDED", ())  # the shipped 1b run
    st.cache_resource.clear()
    st.cache_data.clear()
    yield res
    st.cache_resource.clear()


class _TableReader:
    """The tables of one `ui.tables` HTML element, each as (key, column keys, rows of raw values)."""

    def __init__(self, body: str):
        from html.parser import HTMLParser

        self.tables: list[tuple[str, list[str], list[list]]] = []
        reader = self

        class Parser(HTMLParser):
            def handle_starttag(self, tag, attrs):
                a = dict(attrs)
                if tag == "div" and "data-table" in a:
                    reader.tables.append((a["data-table"], [], []))
                elif tag == "th" and "data-col" in a and reader.tables:
                    reader.tables[-1][1].append(a["data-col"])
                elif tag == "tr" and reader.tables and reader.tables[-1][1]:
                    reader.tables[-1][2].append([])
                elif tag == "td" and "data-v" in a and reader.tables:
                    import json

                    reader.tables[-1][2][-1].append(json.loads(a["data-v"]))

        Parser().feed(body)


class Table:
    """A `ui.tables` table read back: `key`, and `value`, a DataFrame of the values its cells were written from,
    one column per row key (as `st.dataframe`'s `.value` was)."""

    def __init__(self, key: str, columns: list[str], rows: list[list]):
        import pandas as pd

        self.key = key
        self.value = pd.DataFrame([r for r in rows if r], columns=columns)


def tables(at) -> list[Table]:
    """Every table the page drew with `ui.tables` (HTML), in page order."""
    out = []
    for element in at.get("html"):
        for key, columns, rows in _TableReader(element.proto.body).tables:
            out.append(Table(key, columns, rows))
    return out
