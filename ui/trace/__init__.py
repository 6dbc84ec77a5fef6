"""The Your trace tab: `tab` (a trace picked, its step drawn, its readouts and kernels), `sources` (the traces that
ship with the app and this session's uploads, within the server's byte budget), `analysis` (what the tab draws
from a trace, cached on it), `whatif_view` (the step without the profiler, and with graphs or fusion),
`diff_view` (two traces compared by kernel family)."""
