"""What the simulator's timing model makes of a step read from a profiler trace (`core.trace` reads it).

- `whatif`: the step with CUDA graphs, with fusion, with both: its own kernels rescheduled by `sim.timing`.
- `untraced`: the step without the profiler: the recorder's measured figure, or the profiler's cost taken out.
- `report`: `python -m sim trace`, the text and JSON report of one trace or two.
"""
