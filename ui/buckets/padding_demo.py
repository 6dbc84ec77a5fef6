"""The padding-corruption bug, made on purpose (the chapter's third exercise), on the CPU.

The probe's `GraphRunner` runs a tiny decoder eagerly over its static buffers
(`use_graphs=False`: the same bookkeeping as graph replay). Its switch `pad_rows_to`
decides where the dummy rows of a padded batch write their K/V: the reserved scratch
block (safe), or a real sequence's first block (the bug). Every batch size 1..32 is run
through the chapter's buckets and compared with an unpadded eager step of the same
sequences: with the bug on, only batch sizes that need padding change, and only a little.

PyTorch is imported inside the functions below, so opening the layouts view, or any
other tab, never loads it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from ui.common import plain
from ui.tables import Column, show_table

PAD_CHOICES = ("the scratch block (safe)", "a real block (the bug)")
PAD_POLICY = {PAD_CHOICES[0]: "scratch", PAD_CHOICES[1]: "real"}
DEMO_BUCKETS = (1, 2, 4, 8, 16, 24, 32)  # the small end of the chapter's list
DEMO_MAX_BATCH = 32
CHANGED_ABOVE = 1e-4  # |Δlogit| below this is float noise from a different batch shape, not corruption
DEMO_PARAMS = {"bk_pad_to": ("choice", PAD_CHOICES)}


@dataclass(frozen=True, slots=True)
class DemoRow:
    batch: int
    bucket: int
    padded_rows: int
    max_abs_dlogit: float  # over every real row's logits, against the unpadded eager step
    rows_changed: tuple[int, ...]  # real rows whose logits moved beyond float noise
    argmax_changed: tuple[int, ...]  # real rows whose greedy next token flipped
    token_before: int  # row 0's greedy token in the unpadded step
    token_after: int  # ... and in the padded one
    assertion: str | None  # PaddingCorruption's message when the runner's check fired

    @property
    def hit(self) -> bool:
        return bool(self.rows_changed)


@st.cache_resource(show_spinner="Building the tiny decoder on the CPU…")
def tiny_model():
    """The probe's 2-layer decoder with random 'prefilled' KV, shared by every session (with a lock)."""
    from gpu_probe.model import ProbeModel

    model = ProbeModel("tiny", num_blocks=1 + DEMO_MAX_BATCH * 16)
    model.kv_cache.fill_random_(seed=1)
    return model, threading.Lock()


def run_demo(pad_rows_to: str, buckets=DEMO_BUCKETS, max_batch: int = DEMO_MAX_BATCH) -> list[DemoRow]:
    """Every batch size 1..max_batch through a GraphRunner on the CPU, against unpadded eager steps."""
    import torch

    from gpu_probe.decode_batch import DecodeBatch
    from gpu_probe.graph_runner import GraphRunner, PaddingCorruption

    model, lock = tiny_model()
    cache = model.kv_cache
    rows = []
    # The model and its KV cache are shared between sessions; one thread is faster for a model this small.
    with lock, torch.inference_mode():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        pristine = cache.kv.clone()
        runner = GraphRunner(model, buckets=buckets, use_graphs=False, pad_rows_to=pad_rows_to)
        gen = torch.Generator().manual_seed(7)
        try:
            for n in range(1, max_batch + 1):
                rows.append(_one_batch(model, runner, n, gen, pristine, DecodeBatch, PaddingCorruption))
        finally:
            cache.kv.copy_(pristine)
            torch.set_num_threads(threads)
    return rows


def _one_batch(model, runner, n, gen, pristine, DecodeBatch, PaddingCorruption) -> DemoRow:
    import torch

    cache = model.kv_cache
    seq_ids = [cache.add_sequence(model.cfg.prefill_len) for _ in range(n)]
    try:
        inputs = cache.decode_inputs(seq_ids, advance=False)
        ids = torch.randint(0, model.cfg.vocab, (n,), generator=gen)
        batch = DecodeBatch(input_ids=ids, **inputs)
        cache.kv.copy_(pristine)
        reference = model(batch).float().clone()  # unpadded, eager: the right answer
        cache.kv.copy_(pristine)
        padded = runner.run(batch).float().clone()  # what the user gets
        bucket = runner.last_bucket
        fired = None
        try:  # the runner's assertion: block table and slot mapping of the padded rows, before the step
            runner.load(batch, bucket)
            runner.check_padding(n, bucket)
        except PaddingCorruption as err:
            fired = str(err)
    finally:
        cache.kv.copy_(pristine)
        for seq_id in seq_ids:
            cache.free(seq_id)
    diff = (padded - reference).abs().amax(dim=-1)
    flipped = padded.argmax(-1) != reference.argmax(-1)
    return DemoRow(
        batch=n,
        bucket=int(bucket),
        padded_rows=int(bucket) - n,
        max_abs_dlogit=float(diff.max()),
        rows_changed=tuple(int(i) for i in torch.nonzero(diff > CHANGED_ABOVE).flatten()),
        argmax_changed=tuple(int(i) for i in torch.nonzero(flipped).flatten()),
        token_before=int(reference[0].argmax()),
        token_after=int(padded[0].argmax()),
        assertion=fired,
    )


@st.cache_data(max_entries=4, show_spinner="Running batch sizes 1–32 through the runner…")
def _cached_demo(pad_rows_to: str) -> list[DemoRow]:
    return run_demo(pad_rows_to)


def demo_figure(rows: list[DemoRow]) -> go.Figure:
    """Largest logit change per batch size; batch sizes that need padding shaded, flipped tokens marked."""
    x = np.array([r.batch for r in rows])
    y = np.array([r.max_abs_dlogit for r in rows])
    padded = np.array([r.padded_rows > 0 for r in rows])
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=x[padded],
            y=y[padded],
            name="needs padding",
            marker_color="#d62728",
            customdata=[[r.bucket, r.padded_rows] for r in rows if r.padded_rows],
            hovertemplate="batch %{x} → bucket %{customdata[0]} (%{customdata[1]} padded)"
            "<br>max |Δlogit| %{y:.3g}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x[~padded],
            y=y[~padded],
            mode="markers",
            name="exactly a bucket (no padding)",
            marker=dict(symbol="circle", size=9, color="#2ca02c"),
            hovertemplate="batch %{x}: no padding<br>max |Δlogit| %{y:.3g}<extra></extra>",
        )
    )
    flips = [r for r in rows if r.argmax_changed]
    if flips:
        fig.add_trace(
            go.Scatter(
                x=[r.batch for r in flips],
                y=[r.max_abs_dlogit for r in flips],
                mode="markers",
                name="greedy token changed",
                marker=dict(symbol="x", size=10, color="black"),
                hovertemplate="batch %{x}: next token changed<extra></extra>",
            )
        )
    fig.update_layout(
        height=320,
        margin=dict(l=10, r=10, t=30, b=10),
        barmode="overlay",
        xaxis=dict(title="real batch size", dtick=4),
        # A floor on the range keeps float rounding (~1e-6) looking like the nothing it is.
        yaxis=dict(title="max |Δlogit| vs unpadded step", range=[0, max(0.1, 1.15 * float(y.max()))]),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig


def _table(rows: list[DemoRow]) -> list[dict]:
    return [
        {
            "batch": r.batch,
            "bucket": r.bucket,
            "padded rows": r.padded_rows,
            "max |Δlogit|": float(f"{r.max_abs_dlogit:.3g}"),
            "real rows changed": ", ".join(map(str, r.rows_changed)) or "—",
            "row 0 token (right → got)": f"{r.token_before} → {r.token_after}",
            "assertion": "fired" if r.assertion else "quiet",
        }
        for r in rows
    ]


def render() -> None:
    st.markdown(
        "The dummy rows of a padded batch run every kernel, the KV-cache write included. Engines make them "
        "harmless: vLLM gives them slot −1 (`PAD_SLOT_ID`, the write is skipped), nano-vllm fills their "
        "slot mapping with −1, SGLang points them at a reserved slot 0. Here the probe's runner, on a tiny "
        "2-layer decoder on the CPU, runs every batch size 1–32 through the buckets "
        f"{', '.join(map(str, DEMO_BUCKETS))} and compares each real sequence's logits with an unpadded "
        "step."
    )
    choice = st.radio(
        "Padded rows write to", PAD_CHOICES, key="bk_pad_to", bind="query-params", horizontal=True
    )
    try:
        rows = _cached_demo(PAD_POLICY[choice])
    except ImportError:
        st.warning(
            "The demo needs PyTorch (`pip install -r requirements.txt`); the rest of this tab "
            "works without it."
        )
        return
    except Exception as err:
        st.error(f"The demo could not run: {type(err).__name__}: {plain(err)}")
        return
    _verdict(rows, PAD_POLICY[choice])
    st.plotly_chart(demo_figure(rows), width="stretch", key="bk_demo_chart")
    with st.expander("Every batch size"):
        show_table(
            _table(rows),
            {**{k: k for k in _table(rows[:1])[0]}, "max |Δlogit|": Column("max |Δlogit|", "{:.3g}")},
            key="bk_demo",
        )


def _verdict(rows: list, policy: str) -> None:
    """The demo's three readouts and what they mean for this policy: nothing changed, or where and how the
    padding corrupted a real sequence and whether the runner's check caught it."""
    hits = [r for r in rows if r.hit]
    padded = [r for r in rows if r.padded_rows > 0]
    fired = [r for r in rows if r.assertion]
    a, b, c = st.columns(3)
    a.metric(
        "Batch sizes with wrong output",
        f"{len(hits)} of {len(rows)}",
        help=f"{len(padded)} of the {len(rows)} sizes need padding.",
    )
    b.metric(
        "Largest |Δlogit|",
        f"{max(r.max_abs_dlogit for r in rows):.3g}",
        help=f"Against an unpadded eager step of the same sequences. Below {CHANGED_ABOVE:g} it is "
        "float rounding from a different batch shape, not corruption.",
    )
    c.metric("Greedy token changed at", f"{sum(1 for r in rows if r.argmax_changed)} sizes")
    if policy == "scratch":
        st.success(
            f"Padding writes only the scratch block: no real sequence's output changed at any of the "
            f"{len(rows)} batch sizes, and the runner's check stayed quiet ({len(fired)} firings)."
        )
    else:
        only_padded = all(r.padded_rows > 0 for r in hits)
        st.error(
            f"Real outputs changed at {len(hits)} batch sizes"
            + (", every one of them a size that needs padding" if only_padded else "")
            + f"; the {len(rows) - len(padded)} sizes that are exactly a bucket are untouched. It lands "
            "on one sequence (row 0, whose first block the padding overwrote) and looks plausible: its "
            "logits move by "
            f"up to {max(r.max_abs_dlogit for r in rows):.3g}, yet its greedy token changes at only "
            f"{sum(1 for r in rows if r.argmax_changed)} batch sizes. Intermittent, batch-size dependent, "
            "plausible: the worst kind of bug to chase."
        )
        if fired:
            unpadded_firings = sum(1 for r in fired if r.padded_rows == 0)
            st.markdown(
                "**The runner's assertion** (block table and slot mapping checked before the step, "
                f"a canary over the real blocks after) fired at {len(fired)} of {len(padded)} padded "
                f"sizes and at {unpadded_firings} unpadded ones. The first message:"
            )
            st.code(f"PaddingCorruption: {fired[0].assertion}", language=None, wrap_lines=True)
