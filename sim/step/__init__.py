"""The step model: one decode step of a model on a GPU, from its kernels to its two lanes.

- `kernels`: which kernels a step launches and the work of each (bytes, FLOPs), per kernel set,
  sharded over several GPUs with their all-reduces;
- `submission`: how the host hands them to the GPU, derived from the mode once;
- `schedule`: one step as a timeline (`simulate_step`) and many batches at once (`sweep`);
- `tensor_parallel`: the all-reduce's published and fitted costs, what one GPU holds.

Each kernel's time and the stream's recurrence are the one timing model's (`sim.timing`).
"""
