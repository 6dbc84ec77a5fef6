"""Issue 22, item 4 in Chromium: comparing two traces on the "Your trace" tab draws them side by side and
below them the before/after diff by kernel family; picking another trace to compare with redraws it."""

from __future__ import annotations

import pytest
from harness import eventually, open_app, rerun_after

pytestmark = pytest.mark.browser

DIFF = ".st-key-tr_diff"


def _row(page, table: int, first_cell: str) -> list[str]:
    """The cells of the row of the diff's `table`-th table whose first cell is `first_cell`, as shown."""
    frame = page.locator(f"{DIFF} .lb-table").nth(table)
    row = frame.locator("tr").filter(has=page.locator("td:first-child", has_text=first_cell))
    return row.first.evaluate("r => Array.from(r.querySelectorAll('td')).map(c => c.textContent)")


def test_eager_against_compile_then_against_the_graph(page, app_url):
    open_app(page, app_url, "tab=Your+trace&tr_compare=HF+Llama-1B+torch.compile", wait_for=DIFF)
    # The two traces on one time axis, the diff below them.
    page.locator(".st-key-tr_lanes .main-svg").first.wait_for()
    assert page.locator(".st-key-tr_compare_lanes").count()
    page.get_by_text("Before → after, by kernel family").first.wait_for()
    elementwise = eventually(lambda: _row(page, 0, "elementwise"))
    assert elementwise[:4] == ["elementwise", "598", "0", "−598"]
    triton = _row(page, 0, "Triton generated")
    assert triton[1] == "0" and int(triton[2]) > 100
    assert _row(page, 0, "graph launches")[1:3] == ["0", "1"]
    page.get_by_text("Merged into fused kernels").first.wait_for()
    assert _row(page, 1, "at::native::elementwise_kernel")[1:4] == ["elementwise", "178", "0"]
    page.get_by_text("triton_poi_fused_add_copy__18").first.wait_for(state="attached")  # a cell: appeared

    # The same model replayed as a CUDA graph: the same kernels, their launches gone.
    select = page.locator(".st-key-tr_compare input[role=combobox]")
    select.click()
    rerun_after(page, lambda: page.get_by_role("option", name="HF Llama-1B CUDA graph").click())
    page.get_by_text("The same kernels, as many times per step").first.wait_for()

    def redrawn():  # the table is replaced a moment after the text above it
        row = _row(page, 0, "elementwise")
        assert row[1:4] == ["598", "598", "0"], row
        return row

    elementwise = eventually(redrawn)
    assert elementwise[8] == "0"  # no host time after
    assert page.get_by_text("Merged into fused kernels").count() == 0
    assert page.locator("[data-testid=stException]").count() == 0
