"""The page's widgets and charts: a package per tab, and at the top what the tabs share.

Tabs (each `tab.py` has the tab's `render()` and the URL keys its widgets bind): `simulator`, `probe`,
`trace`, `buckets`, `calibration`, `quiz`. A tab imports the shared modules, never another tab.

Shared: `charts` (the lanes and the sweep), `common` (readouts, text made safe), `tables` (every table, HTML
that wraps), `throughput` (tokens/s and where a mode saturates), `url_params` (the URL
cleaned before any widget reads it: it reads every tab's keys), `first_paint`, `warmup`, `uploads` (an
upload's bytes and the server's byte budget), `probe_results` (the probe's result files: the recorded runs and
this session's uploads), `calibration_cache` (each result's fit, shared by every session).
"""
