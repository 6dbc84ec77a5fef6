"""A ProbeSession on the CPU, the GPU's parts stood in for (tests/test_probe_session.py, tests/test_a_new_mode.py):
the tiny model with plain PyTorch ops, no graphs captured, the profiler and the host speed index replaced."""

from gpu_probe import host_speed, measure
from gpu_probe import session as session_module
from gpu_probe.config import get_config
from gpu_probe.decode_batch import make_batch
from gpu_probe.model import ProbeModel


class FakeHostSpeed:
    def __init__(self):
        self.whens = []

    def sample(self, when):
        self.whens.append(when)
        return {"torch_launch_us": {"median": 6.0}, "graph_fixed_us": 4.0, "graph_per_node_us": 0.02}

    def block(self):
        return {"samples": list(self.whens)}

    def close(self):
        pass


def a_session(rows: int = 4, buckets=(1, 2, 4)):
    """A ProbeSession over the tiny model on the CPU (plain PyTorch ops) with a KV pool for `rows` sequences,
    nothing captured yet (`_capture` needs `GraphRunner` stood in for: `cpu_runners`)."""
    session = object.__new__(session_module.ProbeSession)
    cfg = get_config("tiny")
    model = ProbeModel(cfg, num_blocks=1 + rows * -(-cfg.prefill_len // cfg.block_size))
    model.kv_cache.fill_random_(seed=1)
    session.cfg, session.model, session.batch = cfg, model, make_batch(model, rows, seed=2)
    session.num_blocks, session.rows, session.buckets = model.kv_cache.num_blocks, rows, list(buckets)
    session.errors, session.checks, session.captures, session.runners, session.static = [], {}, [], {}, {}
    session.decoders = {}
    session.model_info = {"config": cfg.to_dict()}
    return session


def cpu_runners(monkeypatch) -> None:
    """The session's graph runners run their bookkeeping eagerly (`use_graphs=False`): no CUDA needed."""
    runner = session_module.GraphRunner
    monkeypatch.setattr(session_module, "GraphRunner", lambda *a, **k: runner(*a, use_graphs=False, **k))


def stand_in(monkeypatch) -> tuple[list, list]:
    """The GPU-only parts of measuring: the profiler (the step run once) and the host speed index.
    (the labels profiled, the host speed indexes made)."""
    profiled, hosts = [], []

    def profile_step(step, label, trace_path=None):
        profiled.append(label)
        step()
        return label

    def run_record(mode, batch, timing, traced, n_layers, bucket=None, fallback=False):
        return {"mode": mode, "batch": batch, "profiled": traced, "bucket": bucket, **timing}

    def host():
        hosts.append(FakeHostSpeed())
        return hosts[-1]

    monkeypatch.setattr(measure, "profile_step", profile_step)
    monkeypatch.setattr(measure, "run_record", run_record)
    monkeypatch.setattr(host_speed, "HostSpeed", host)
    return profiled, hosts


def empty_result() -> dict:
    return {"runs": [], "captures": [], "checks": {}, "errors": [], "settings": {}}
