"""The compile peer on the CPU: Inductor writes the per-layer KV cache in place.

On the H200 (torch 2.11) a cache write through a flat *view* of the buffer made Inductor copy
the whole layer buffer twice per write. The model now writes with an index_put_ on the buffer
itself; here Inductor's C++ output must allocate nothing as large as a layer's cache.
"""

import re

import torch

from gpu_probe.compile_peer import COMPILE_OPS, with_per_layer_cache
from gpu_probe.config import get_config
from gpu_probe.decode_batch import make_batch
from gpu_probe.model import ProbeModel


def _allocated_shapes(code: str) -> set[tuple[int, ...]]:
    return {
        tuple(int(x) for x in dims.split(",") if x.strip())
        for dims in re.findall(r"empty_strided\w*\(\(([\d, ]+)\)", code)
    }


def test_inductor_writes_the_kv_cache_in_place_and_matches_eager():
    from torch._inductor.utils import run_and_get_code

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops on a shared 2-core box
    try:
        model = ProbeModel(get_config("tiny", n_layers=1), num_blocks=40)  # one layer: half the compile time
        model.kv_cache.fill_random_(seed=1)
        batch = make_batch(model, 3, seed=2)
        twin = with_per_layer_cache(model)
        k_before, v_before = (t.clone() for t in twin.kv_cache.layer(0))
        with torch.no_grad():
            eager = model.unfused_forward(batch)
            compiled = torch.compile(twin.unfused_forward, fullgraph=True)
            out, codes = run_and_get_code(compiled, batch, ops=COMPILE_OPS)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    k_after, v_after = twin.kv_cache.layer(0)
    for before, after in ((k_before, k_after), (v_before, v_after)):
        changed = (after != before).flatten(0, 1).flatten(1).any(-1)  # per slot
        assert sorted(torch.nonzero(changed).flatten().tolist()) == sorted(batch.slot_mapping.tolist())
    code = "\n".join(codes)
    big = [s for s in _allocated_shapes(code) if torch.Size(s).numel() >= k_after.numel()]
    assert not big, f"Inductor allocates cache-sized buffers {big} around the KV write"
    assert "index_put" in code  # the write is a scatter of the batch's rows
