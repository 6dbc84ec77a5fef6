"""Live probe: a small Llama-style decoder measured on a real GPU.

Eager, fused (Triton), bucketed CUDA-graph replay and the `torch.compile` peer, each
profiled into the same `core.timeline.Timeline` the simulator draws.

Kept import-free on purpose: `core.probe_result` must load without torch (the app shows
recorded results on machines without it). Import submodules directly:
`core.probe_result`, `gpu_probe.live`, `gpu_probe.graph_runner`, `gpu_probe.measure`.
"""
