"""Issue 22, items 4 and 5 on the "Your trace" tab through AppTest: the before/after diff under the two
traces drawn side by side, and a graph replay's per-kernel table."""

from __future__ import annotations

from app_pages import open_tab, tables  # tests/app_pages.py

TAB = "Your trace"
FAMILY_COLUMNS = ["family", "kernels before", "after", "change"]
KERNEL_COLUMNS = ["kernel", "kind", "calls", "total µs"]  # the per-kernel table


def _table(at, columns: list[str], contains: str):
    """The first table (a dataframe, or the page's HTML table) whose first columns are `columns` and that has a row
    starting with `contains`."""
    for frame in [*at.dataframe, *tables(at)]:
        value = frame.value
        if (
            list(value.columns)[: len(columns)] == columns
            and value.iloc[:, 0].astype(str).str.startswith(contains).any()
        ):
            return value
    raise AssertionError(f"no table with columns {columns} holding {contains!r}")


def test_comparing_eager_with_compile_shows_the_diff_by_family():
    at = open_tab(TAB, tr_compare="HF Llama-1B torch.compile")
    assert not at.exception, [e.value for e in at.exception]
    assert any(h.value == "Before → after, by kernel family" for h in at.subheader)
    families = _table(at, FAMILY_COLUMNS, "elementwise").set_index("family")
    assert families.loc["elementwise", "after"] == "0" and families.loc["elementwise", "change"].startswith(
        "−"
    )
    assert families.loc["Triton generated", "kernels before"] == "0"
    assert families.loc["graph launches", "after"] == "1" and "total" in families.index
    merged = _table(at, ["kernel", "family"], "at::native::elementwise_kernel")
    assert set(merged["after"]) == {"0"}
    appeared = _table(at, ["kernel", "family"], "triton_poi_fused")
    assert set(appeared["per step before"]) == {"0"}
    shown = " ".join(m.value for m in at.markdown)
    assert "Merged into fused kernels" in shown and "Appeared" in shown


def test_no_diff_without_a_trace_to_compare_with():
    at = open_tab(TAB)
    assert not at.exception
    assert not any(h.value == "Before → after, by kernel family" for h in at.subheader)


def test_a_graph_replays_kernel_table_shows_the_launch_once_and_gaps():
    at = open_tab(TAB, tr_trace="HF Llama-1B CUDA graph")
    assert not at.exception, [e.value for e in at.exception]
    table = _table(at, KERNEL_COLUMNS, "cudaGraphLaunch")
    assert table.iloc[0]["kernel"].startswith("cudaGraphLaunch") and table.iloc[0]["host µs / launch"] > 100
    copies = table["kernel"].str.startswith("Memcpy")  # the input copies and the token's copy back: eager
    kernels = table.iloc[1:][~copies.iloc[1:]]
    assert kernels["host µs / launch"].isna().all() and kernels["launch delay µs"].isna().all()
    # Nodes follow each other within a µs; the first waited for the graph launch (the input copies come first).
    assert kernels["gap µs (replayed)"].notna().all() and kernels["gap µs (replayed)"].median() < 5
    assert table[copies]["host µs / launch"].notna().all() and table[copies]["gap µs (replayed)"].isna().all()


def test_an_eager_kernel_table_has_no_gap_column():
    at = open_tab(TAB)
    table = _table(at, KERNEL_COLUMNS, "at::native::elementwise_kernel")
    assert "gap µs (replayed)" not in table.columns and table["host µs / launch"].notna().all()
