"""The step model: one decode step of a model on a GPU, from its kernels to its two lanes.

- `ops`: the work of each logical op (bytes, FLOPs), written once, the fusions, and the layers built
  from them;
- `kernel_sets`: one object per kernel set of the modes table: its layer, how the host submits it,
  and the probe's kernels of it as the calibration reads them;
- `kernels`: which kernels a step launches and the work of each, from its kernel set's layer,
  sharded over several GPUs with their all-reduces;
- `submission`: how the host hands them to the GPU (a launch or a node per kernel, or one kernel);
- `schedule`: one step as a timeline (`simulate_step`) and many batches at once (`sweep`);
- `tensor_parallel`: the all-reduce's published and fitted costs, what one GPU holds.

Each kernel's time and the stream's recurrence are the one timing model's (`sim.timing`).
"""
