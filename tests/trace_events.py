"""Hand-built torch.profiler events for the trace reader's tests: each helper is one event as Kineto writes it."""

from __future__ import annotations

import gzip
import json


def x(cat, name, ts, dur, corr=None, tid=1, pid=1, **args):
    """A complete ('X') event; `corr` becomes args.correlation."""
    a = dict(args)
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": a}


def launch(ts, corr, dur=4.0, tid=1, name="cudaLaunchKernel"):
    return x("cuda_runtime", name, ts, dur, corr=corr, tid=tid)


def kernel(ts, corr, name="elementwise_kernel", dur=2.0, stream=7):
    return x("kernel", name, ts, dur, corr=corr, tid=stream, pid=0, stream=stream, device=0)


def copy(ts, corr, kind="HtoD (Pinned -> Device)", dur=1.0, stream=7, nbytes=8):
    return x(
        "gpu_memcpy", f"Memcpy {kind}", ts, dur, corr=corr, tid=stream, pid=0, stream=stream, bytes=nbytes
    )


def sync(ts, dur=20.0, tid=1, name="cudaStreamSynchronize"):
    return x("cuda_runtime", name, ts, dur, tid=tid)


def step_range(name, ts, dur, tid=1):
    return x("user_annotation", name, ts, dur, tid=tid)


def trace(*events, device="NVIDIA H200"):
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": device}],
        "traceEvents": list(events),
        "traceName": "test",
    }


def as_bytes(data: dict, gz: bool = False) -> bytes:
    raw = json.dumps(data).encode()
    return gzip.compress(raw) if gz else raw


def eager_step(t0, corr0, n=3, host=10.0, gpu=2.0):
    """n launches `host` µs apart from t0, each running one `gpu` µs kernel as soon as it is submitted."""
    out = []
    for i in range(n):
        ts = t0 + i * host
        out.append(launch(ts + host - 4.0, corr0 + i))
        out.append(kernel(ts + host + 1.0, corr0 + i, dur=gpu))
    return out
