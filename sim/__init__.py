"""Timeline simulator of one LLM decode step (numpy only).

`config` (models, GPUs, presets) and `timing` (the one timing model) serve every part: the step
model (`step`), the bucket lists (`buckets`), the calibration to a probe run (`calibration`) and
the what-ifs on a step read from a trace (`trace`). `python -m sim` is `__main__`, its step report `report`.
"""
