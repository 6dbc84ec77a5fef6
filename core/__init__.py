"""What the simulator, the live probe and the trace reader share, and import from neither.

`timeline` is the one step type all three produce and one chart function draws;
`probe_result` is the probe's result-file format, which the simulator's calibration and
the page read without torch.
"""
