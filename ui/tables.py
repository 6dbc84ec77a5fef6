"""The page's tables: HTML that wraps, so that no cell is ever cut off at 1400 px.

`st.dataframe` draws its cells on a canvas, each column as wide as its heading or a width given in pixels: a
long kernel name, a check's detail or a column past the page's edge is cut where the column ends. These tables
are HTML instead: text wraps inside its cell (a long demangled name breaks, whole, at the cell's edge), numbers
stay on one line and align right, a heading's help is its tooltip, and a long table scrolls inside a fixed
height with its headings kept in view.

Every cell carries the value it was formatted from (`data-v`, JSON) and every heading its key (`data-col`), so a
test reads a table back as the numbers it was made from (tests/app_pages.py `tables`). Text from files is
escaped here (`html.escape`): it never becomes markup.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

MISSING = "—"
ROW_PX = 31  # a one-line row as drawn: for the height of a long table's scroll box

_STYLE = """<style>
.lb-table{overflow:auto;border:1px solid #e8e5e2;border-radius:0.5rem;margin:0 0 0.5rem 0;max-width:100%}
.lb-table table{border-collapse:collapse;font-size:0.875rem;line-height:1.35;color:#31333f}
.lb-table.stretch table{width:100%}
.lb-table th{position:sticky;top:0;z-index:1;background:#f7f7f6;font-weight:400;color:rgba(49,51,63,0.75);
  text-align:left;vertical-align:bottom;padding:0.35rem 0.5rem;border-bottom:1px solid #e8e5e2}
.lb-table th[title]{text-decoration:underline dotted rgba(49,51,63,0.4);cursor:help}
.lb-table td{padding:0.3rem 0.5rem;border-top:1px solid #f0efed;vertical-align:top;overflow-wrap:break-word}
.lb-table td.long{overflow-wrap:anywhere;min-width:12em}
.lb-table td.num,.lb-table th.num{text-align:right}
.lb-table td.num{white-space:nowrap;font-variant-numeric:tabular-nums}
.lb-table td.num.wrap{white-space:normal}
.lb-table tr.faded td{color:rgba(49,51,63,0.6);font-style:italic}
</style>"""


@dataclass(frozen=True)
class Column:
    """How a table shows one key of its rows: its heading, how a value is written, its help (the heading's
    tooltip). `fmt` is a format spec ("{:,.1f}") or a function of the value; numbers align right."""

    label: str
    fmt: str | Callable | None = None
    help: str = ""
    numeric: bool | None = None  # None: decided by the values (numbers align right, stay on one line)
    long: bool = False  # long identifiers (kernel names): broken anywhere to fit, not only at spaces
    wrap: bool = False  # a number that may break at its spaces ('7,210 – 8,105': a span), still aligned right


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def cell_text(value, fmt=None) -> str:
    """A value as a cell shows it: '—' for nothing, 'yes'/'no', thousands separated, one decimal by default."""
    if _missing(value):
        return MISSING
    if callable(fmt):
        return str(fmt(value))
    if fmt is not None:
        return fmt.format(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def _raw(value) -> str:
    """The value a cell was written from, for tests and copies: JSON, NaN as null."""
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    try:
        return json.dumps(value)
    except TypeError:
        return json.dumps(str(value))


def table_html(
    rows: list[dict],
    columns: dict[str, Column | str] | None = None,
    *,
    key: str = "",
    height: int | None = None,
    stretch: bool = True,
    faded: Callable[[dict], bool] | None = None,
) -> str:
    """The table as HTML: one row per dict, a column per key of `columns` (default: the first row's keys, each
    its own heading). `height` (px): the most the table takes before it scrolls; `faded(row)`: rows drawn grey
    and italic (a fallback, a reference)."""
    if columns is None:
        columns = {k: k for k in (rows[0] if rows else {})}
    cols = {k: c if isinstance(c, Column) else Column(str(c)) for k, c in columns.items()}
    numeric = {
        k: c.numeric
        if c.numeric is not None
        else any(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in rows)
        and all(_missing(r.get(k)) or isinstance(r.get(k), (int, float)) for r in rows)
        for k, c in cols.items()
    }
    head = "".join(
        f'<th data-col="{html.escape(k)}"'
        + (' class="num"' if numeric[k] else "")
        + (f' title="{html.escape(c.help)}"' if c.help else "")
        + f">{html.escape(c.label)}</th>"
        for k, c in cols.items()
    )
    kind = {
        k: f' class="num{" wrap" if c.wrap else ""}"' if numeric[k] else ' class="long"' if c.long else ""
        for k, c in cols.items()
    }
    body = []
    for row in rows:
        cells = "".join(
            f"<td{kind[k]} data-v='{html.escape(_raw(row.get(k)), quote=True)}'>"
            f"{html.escape(cell_text(row.get(k), c.fmt))}</td>"
            for k, c in cols.items()
        )
        grey = ' class="faded"' if faded and faded(row) else ""
        body.append(f"<tr{grey}>{cells}</tr>")
    box = f"max-height:{int(height)}px;" if height else ""
    return (
        f'{_STYLE}<div class="lb-table{" stretch" if stretch else ""}" data-table="{html.escape(key)}" '
        f'style="{box}"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )


def show_table(rows: list[dict], columns: dict[str, Column | str] | None = None, **options) -> None:
    """Draw `table_html(rows, columns, **options)`; a table of more than 14 rows scrolls at 14 unless
    `height` says otherwise."""
    if "height" not in options and len(rows) > 14:
        options["height"] = ROW_PX * 15
    st.html(table_html(rows, columns, **options))
