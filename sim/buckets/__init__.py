"""Buckets: which batch sizes to capture as CUDA graphs, and what padding to the next one costs.

- `layouts`: the engines' bucket lists, padding waste, the optimal list (a dynamic programme);
- `workloads`: how often each batch size occurs (uniform, geometric, Poisson, an uploaded CSV);
- `memory`: the device memory a list of captured graphs pins;
- `report`: the layouts compared on a workload, as tables and text (`python -m sim buckets`).
"""
