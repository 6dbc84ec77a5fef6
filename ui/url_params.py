"""Clean the URL's query parameters before any widget reads them.

Every control is bound to the URL (`bind="query-params"`), so a link is a view, and
anyone can edit a link. Left alone, Streamlit 1.67 quietly drops a bound value it
cannot use (`?batch=99999`, `?batch=abc`, `?batch=nan`, `?fusion=yes` all fall back
to the default, with no word to the reader) and keeps unknown keys in the URL.
`sanitise()` instead clamps what can be clamped, drops what cannot, drops unknown
keys, and says so in one `st.warning` that names each key.

Each tab declares its keys in a dict next to its widgets (`SIM_PARAMS` in
`ui/simulator/tab.py`, `BUCKET_PARAMS`, `PROBE_PARAMS`, `TRACE_PARAMS`, `CALIBRATE_PARAMS`), listed in
`SPEC_SOURCES`. A spec is one of
    ("int", lo, hi)   ("float", lo, hi)   ("bool",) or "bool"   ("choice", options[, {alias: option}])
    ("text", max_chars)  (free text the page parses itself: only its length is checked here)
(also accepted: "select"/"options"/"str" for choice, "number" for float, or a dict
with kind/min/max/options).

Widgets seed themselves from Streamlit's snapshot of the URL taken at the start of
the run, not from `st.query_params`, so a correction is written to both (that is
the one place this module reaches into Streamlit internals, pinned at 1.67); the
browser's address bar is updated to the corrected link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import streamlit as st

from ui import first_paint
from ui.buckets import tab as buckets_tab
from ui.calibration import tab as calibrate_tab
from ui.probe import tab as probe_tab
from ui.simulator import tab as sim_tab
from ui.trace import tab as trace_tab

# The app's tab labels; app.py binds `st.tabs(..., key="tab")` to these.
TAB_LABELS = ("Simulator", "Live GPU probe", "Your trace", "Bucketing", "Calibration", "Check yourself")
APP_PARAMS = {"tab": ("choice", TAB_LABELS)}
# Each tab's declared keys (key -> spec) and the prefix its keys carry (None: un-prefixed keys).
SPEC_SOURCES = (
    (sim_tab.SIM_PARAMS, None),
    (buckets_tab.BUCKET_PARAMS, "bk_"),
    (probe_tab.PROBE_PARAMS, "pr_"),
    (trace_tab.TRACE_PARAMS, "tr_"),
    (calibrate_tab.CALIBRATE_PARAMS, "cal_"),
)
# Streamlit's own keys (embedding); never touched.
RESERVED = frozenset({"embed", "embed_options"})
MAX_VALUE_CHARS = 100  # no legitimate value is longer; a 10 kB string is dropped, not parsed
SHOWN_CHARS = 24  # how much of a bad key or value the notice quotes
MAX_NOTICES = 8
LAST_NOTICES = "_link_notices"  # session key: the notices of the last run, for the run the report starts

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True, slots=True)
class Spec:
    kind: str  # "int" | "float" | "bool" | "choice" | "text" (hi: its longest allowed length)
    lo: float | None = None
    hi: float | None = None
    options: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()  # (other spelling, option): e.g. a preset's short key

    def __post_init__(self) -> None:
        if self.kind not in ("int", "float", "bool", "choice", "text"):
            raise ValueError(f"kind: unknown parameter kind {self.kind!r}")
        if self.kind in ("int", "float", "text") and not (
            self.lo is not None and self.hi is not None and self.lo <= self.hi
        ):
            raise ValueError("lo/hi: numeric parameters need lo <= hi")
        if self.kind == "choice" and not self.options:
            raise ValueError("options: a choice parameter needs options")
        if any(option not in self.options for _, option in self.aliases):
            raise ValueError("aliases: every alias must lead to one of the options")


def as_spec(raw) -> Spec:
    """Read one entry of a tab's *_PARAMS dict in any of the accepted shapes."""
    if isinstance(raw, Spec):
        return raw
    if isinstance(raw, str):
        raw = (raw,)
    if isinstance(raw, dict):
        kind = raw.get("kind", raw.get("type"))
        raw = (kind, raw["options"]) if "options" in raw else (kind, raw.get("min"), raw.get("max"))
    kind = str(raw[0]).lower()
    kind = {
        "select": "choice",
        "options": "choice",
        "str": "choice",
        "selectbox": "choice",
        "radio": "choice",
        "number": "float",
        "slider": "int",
        "toggle": "bool",
    }.get(kind, kind)
    if kind == "choice":
        aliases = raw[2] if len(raw) > 2 and isinstance(raw[2], dict) else {}
        return Spec(
            "choice",
            options=tuple(str(o) for o in raw[1]),
            aliases=tuple((str(a), str(o)) for a, o in aliases.items()),
        )
    if kind == "bool":
        return Spec("bool")
    if kind == "text":  # ("text", max_chars): free text the page itself parses
        return Spec("text", lo=0, hi=float(raw[1]) if len(raw) > 1 else MAX_VALUE_CHARS)
    return Spec(kind, lo=float(raw[1]), hi=float(raw[2]))


def all_specs() -> dict[str, Spec]:
    """key -> Spec for every declared key of the page."""
    specs = {key: as_spec(v) for key, v in APP_PARAMS.items()}
    for declared, _prefix in SPEC_SOURCES:
        for key, raw in declared.items():
            try:
                specs[str(key)] = as_spec(raw)
            except (ValueError, TypeError, IndexError, KeyError):
                continue  # a malformed declaration must not take the page down; the key stays unchecked
    return specs


def _number(text: str) -> str:
    # The way Streamlit itself writes numbers into the URL: 5.0 -> "5".
    value = float(text)
    return str(int(value)) if value == int(value) else repr(value)


def check(spec: Spec, value: str) -> tuple[str | None, str | None]:
    """(value to keep or None to drop, why it changed or None if it is fine as it is)."""
    if spec.kind == "text":
        # Free text is the page's to parse and explain; here only its length and control characters.
        cleaned = "".join(ch for ch in value if ch.isprintable())
        if len(cleaned) > spec.hi:
            return None, f"is {len(value):,} characters long (at most {int(spec.hi)})"
        return (cleaned, None) if cleaned == value else (cleaned, "had control characters, removed")
    text = value.strip()
    if not text:
        return None, "is empty"
    if len(text) > MAX_VALUE_CHARS:
        return None, f"is {len(text):,} characters long"
    if spec.kind == "bool":
        low = text.lower()
        if low in _TRUE or low in _FALSE:
            kept = "true" if low in _TRUE else "false"
            return kept, None if low in ("true", "false") else f"read as {kept}"
        return None, "is not true or false"
    if spec.kind == "choice":
        if text in spec.options:
            return text, None
        # Forgive case, dashes and underscores: ?tab=check-yourself opens "Check yourself".
        fold = text.casefold().replace("-", " ").replace("_", " ")
        for spelling, option in [(o, o) for o in spec.options] + list(spec.aliases):
            if spelling.casefold().replace("-", " ").replace("_", " ") == fold:
                return option, None
        return None, "is not one of " + ", ".join(_quote(o) for o in spec.options[:6]) + (
            ", …" if len(spec.options) > 6 else ""
        )
    try:
        number = float(text)
    except ValueError:
        return None, "is not a number"
    if math.isnan(number):
        return None, "is not a number"
    reason = None
    if spec.kind == "int" and math.isfinite(number) and number != round(number):
        number, reason = float(math.floor(number + 0.5)), "is not a whole number, rounded"
    if number < spec.lo:
        number, reason = spec.lo, f"is below the minimum {_number(str(spec.lo))}"
    elif number > spec.hi:
        number, reason = spec.hi, f"is above the maximum {_number(str(spec.hi))}"
    return _number(str(number)), reason


def _quote(text: str) -> str:
    # Quote untrusted text in a code span: no markdown, links or HTML from a URL reach the page.
    short = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
    short = short.replace("`", "'").replace("\n", " ").replace("\r", " ")
    return f"`{short}`" if short.strip() else "`(empty)`"


def _plan(params: dict[str, list[str]], specs: dict[str, Spec]):
    """Corrections as {key: new value or None (drop)} and notices for the reader."""
    changes: dict[str, str | None] = {}
    notices: list[str] = []
    for key, values in params.items():
        if key.lower() in RESERVED:
            continue
        spec = specs.get(key)
        if spec is None:
            changes[key] = None
            notices.append(f"{_quote(key)} is not a setting of this page; ignored")
            continue
        value = values[-1] if values else ""
        kept, reason = check(spec, value)
        if len(values) > 1:
            reason = f"appears {len(values)} times; kept the last" + (f", which {reason}" if reason else "")
        said = f"{_quote(key)}: {_quote(value)}" if value.strip() else _quote(key)
        if kept is None:
            changes[key] = None
            notices.append(f"{said} {reason}; using the default")
        elif reason:
            changes[key] = kept
            notices.append(f"{said} {reason}; using {_quote(kept)}")
        elif kept != value:
            changes[key] = kept  # same value, tidier spelling (" 5", "5.0", "TRUE"): no notice needed
    return changes, notices


def _apply(changes: dict[str, str | None]) -> None:
    from streamlit.runtime.state.session_state_proxy import get_session_state

    with get_session_state().query_params() as qp:
        current = getattr(qp, "_query_params", None)
        initial = getattr(qp, "_initial_query_params", None)
        if isinstance(current, dict) and isinstance(initial, dict):
            for key, kept in changes.items():
                if kept is None:
                    current.pop(key, None)
                    initial.pop(key, None)
                else:
                    current[key] = kept
                    initial[key] = [kept]
            qp._send_query_param_msg()  # rewrite the address bar to the cleaned link
            return
    # A Streamlit without those internals: the public API fixes the address bar for unbound keys,
    # and each widget's own check (silent fallback to its default) still keeps the page alive.
    for key, kept in changes.items():
        try:
            if kept is None:
                del st.query_params[key]
            else:
                st.query_params[key] = kept
        except Exception:
            pass


def read_params() -> dict[str, list[str]]:
    """Every query parameter as key -> all its values (repeated keys keep every value)."""
    return {key: st.query_params.get_all(key) for key in st.query_params}


def sanitise(specs: dict | None = None) -> list[str]:
    """Clamp or drop hostile query parameters and show one notice naming them. Never raises.

    `specs` (key -> spec) replaces the tabs' declarations; by default they are read from the tabs.
    Returns the notices shown.
    """
    try:
        specs = all_specs() if specs is None else {k: as_spec(v) for k, v in specs.items()}
        changes, notices = _plan(read_params(), specs)
        if changes:
            _apply(changes)
    except Exception as err:
        notices = [f"the link's settings could not be read ({type(err).__name__}); showing the defaults"]
        try:
            st.query_params.clear()
        except Exception:
            pass
    if first_paint.just_reported() and not notices:
        # The link was cleaned in the first screen's run; its notice stays on the whole page.
        notices = st.session_state.get(LAST_NOTICES, [])
    st.session_state[LAST_NOTICES] = notices
    if notices:
        shown = notices[:MAX_NOTICES]
        if len(notices) > MAX_NOTICES:
            shown.append(f"… and {len(notices) - MAX_NOTICES} more")
        st.warning(
            "**Some settings in this link were changed:**\n\n" + "\n".join(f"- {n}" for n in shown),
            icon=":material/warning:",
        )
    return notices


# A button that copies the address bar, which every bound control keeps current (the server's copy of
# the query string is not refreshed on reruns, so the link is read in the browser). Static HTML: nothing
# from the URL or the user is put into it; st.iframe runs it same-origin with clipboard-write allowed.
COPY_LINK_HTML = """<!doctype html><html><head><style>
body { margin: 0; font-family: "Source Sans", "Source Sans Pro", sans-serif; }
button { display: inline-flex; align-items: center; gap: 0.35rem; padding: 0.3rem 0.75rem; font: inherit;
  font-size: 0.95rem; color: rgb(49, 51, 63); background: #fff; border: 1px solid rgba(49, 51, 63, 0.2);
  border-radius: 0.5rem; cursor: pointer; white-space: nowrap; }
button:hover { border-color: rgb(255, 75, 75); color: rgb(255, 75, 75); }
svg { width: 1.1rem; height: 1.1rem; fill: currentColor; }
</style></head><body>
<button id="copy" type="button" title="Copy a link that reopens this view, every control and the tab included">
<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M3.9 12c0-1.71 1.39-3.1 3.1-3.1h4V7H7c-2.76 0-5 2.24-5 5s2.24
5 5 5h4v-1.9H7c-1.71 0-3.1-1.39-3.1-3.1zM8 13h8v-2H8v2zm9-6h-4v1.9h4c1.71 0 3.1 1.39 3.1 3.1s-1.39 3.1-3.1
3.1h-4V17h4c2.76 0 5-2.24 5-5s-2.24-5-5-5z"/></svg><span id="label">Copy link</span></button>
<script>
const label = document.getElementById("label");
document.getElementById("copy").addEventListener("click", async () => {
  const url = window.parent.location.href;
  let copied = false;
  try { await navigator.clipboard.writeText(url); copied = true; } catch (err) {
    const area = document.createElement("textarea");
    area.value = url; document.body.appendChild(area); area.select();
    try { copied = document.execCommand("copy"); } catch (err2) { copied = false; }
    area.remove();
  }
  document.body.dataset.copied = copied ? url : "";
  label.textContent = copied ? "Link copied" : "Copy failed: copy the address bar";
  setTimeout(() => { label.textContent = "Copy link"; }, 2500);
});
</script></body></html>"""


def copy_link_button() -> None:
    """A visible "Copy link" control: the current URL (every control, the tab included) to the clipboard."""
    st.iframe(COPY_LINK_HTML, width="stretch", height=40, alt="Copy a link to this view")
