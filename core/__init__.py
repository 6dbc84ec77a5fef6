"""What the simulator, the live probe and the page share, and import from neither.

`timeline` is the one step type all three produce and one chart function draws;
`probe_result` is the probe's result-file format, which the simulator's calibration and
the page read without torch; `trace/` reads a profiler trace into timelines, for the probe's
own profiled steps and for any trace a user brings.
"""
