"""A kernel set on the probe's side: how a step of it is built and captured, one object per name the modes
table gives (`Mode.kernels`).

A mode's row (`core.step_plan.MODES`) names its kernel set; everything the probe's session does differently
for a set is that set's object in `SETS`, and nothing else in `gpu_probe` branches on it:

- `decoder`: what runs a step of the set, called like the model with a `DecodeBatch` (the model itself with
  one of its two forwards picked, or a decoder of the set's own built over it), and the buckets its graphs
  are captured at; the probe's `GraphRunner` captures it and replays it for the set's graph modes;
- `captured`: whether those graphs are the probe's own; a set that replays graphs of its own (Inductor's
  cudagraph trees) is not captured by the runner, and `step` builds all of its modes' steps;
- `step`: a step of a mode the runner does not replay (launched eagerly, or through the set's own graphs);
- `refusal`: why it cannot run a model of a config, in one sentence naming the field (None: it can); a run
  leaves such a set's modes out, or refuses a request that names them, before anything is built;
- what it checks or records of its own: `after_capture` (checks once its graphs are captured),
  `profiled_extras` (fields recorded beside a traced step: the persistent kernel's in-kernel stamps, named
  by `extras`), `after_runs` (checks once its runs are measured).

What a set builds beside the model (a decoder, a compiled peer) is kept in the session (`decoders`, by set
name), so the page's session reuses it. A new kernel set is its name and rows in `core.step_plan`, its
simulator object (`sim.step.kernel_sets`) and one object here (`tests/test_a_new_mode.py` adds a toy one from
outside these files). Imports no torch at module level: `gpu_probe.live` reads `captured` without it.
"""

from __future__ import annotations

from core.step_plan import FUSED_KERNELS, INDUCTOR_KERNELS, PERSISTENT_KERNELS, UNFUSED_KERNELS, Mode


class ProbeKernelSet:
    """The probe's side of a kernel set. The default: a decoder that the graph runner captures, launched
    eagerly by calling it."""

    name: str
    captured: bool = True  # its graph modes replay graphs the probe's GraphRunner captured of `decoder`
    # What `profiled_extras` records beside a traced step, as an error names it ("": nothing).
    extras: str = ""

    def refusal(self, cfg) -> str | None:
        """Why this set cannot run a model of `cfg` (a ProbeModelConfig), one sentence; None where it can."""
        return None

    def held_bytes(self, cfg, rows: int, pool_bytes: int) -> int:
        """GPU memory it holds beside the model and the graph runner's own, at up to `rows` rows with a KV pool
        of `pool_bytes` (`gpu_probe.footprint` adds it up before anything is allocated)."""
        return 0

    def decoder(self, session, say) -> tuple:
        """(what runs a step, called with a DecodeBatch; the buckets its graphs are captured at)."""
        raise NotImplementedError

    def step(self, session, rows, errors: list[str], say):
        """A step at these rows of a mode the runner does not replay; None where it cannot run (recorded)."""
        decoder, _ = self.decoder(session, say)
        return lambda: decoder(rows)

    def after_capture(self, session, say) -> None:
        """Checks of its own once its graphs are captured (into `session.checks`)."""

    def profiled_extras(self, session, n: int) -> dict:
        """Fields recorded beside a traced step at batch n that replayed its graphs or ran eagerly (`extras`)."""
        return {}

    def after_runs(self, session, out: dict, modes: list[str], say) -> None:
        """Checks of its own once `modes` (its modes of the run) are measured, into `out`."""


class ModelForward(ProbeKernelSet):
    """One of the probe model's own two forwards (`ProbeModel.fused` picks which): its PyTorch ops and Triton
    kernels one per op, or its fused Triton kernels. The model is shared by every mode, so a step sets the
    flag each time (the steps take turns); a graph runner keeps the flag it captured with."""

    def __init__(self, name: str, fused: bool):
        self.name, self.fused = name, fused

    def decoder(self, session, say) -> tuple:
        session.model.fused = self.fused
        return session.model, session.buckets

    def step(self, session, rows, errors: list[str], say):
        model, fused = session.model, self.fused

        def step():
            model.fused = fused
            return model(rows)

        return step


def persistent_refusal(cfg) -> str | None:
    """Why the persistent kernel cannot run a model of `cfg`, one sentence naming the field; None where it can.
    No bias on q, k and v (Qwen2) in the kernel: refused rather than computed without it. RoPE's scaling is no
    reason: the kernel reads the model's RoPE tables, where the scaling is (`gpu_probe.model.rope_tables`)."""
    if cfg.n_heads * cfg.head_dim != cfg.hidden:
        return "the persistent kernel needs n_heads * head_dim == hidden"
    if getattr(cfg, "qkv_bias", False):
        return (
            f"the persistent kernel has no bias on q, k and v, and {cfg.name} has one "
            f"(qkv_bias, model_type {getattr(cfg, 'model_type', '?')})"
        )
    return None


class PersistentKernel(ProbeKernelSet):
    """The whole step as one persistent Triton kernel (`gpu_probe.kernels.persistent`), over the model's
    weights; above its largest batch it runs the fused forward."""

    name = PERSISTENT_KERNELS
    extras = "in-kernel stamps"

    def refusal(self, cfg) -> str | None:
        return persistent_refusal(cfg)

    def held_bytes(self, cfg, rows: int, pool_bytes: int) -> int:
        """Its stacked copies of the layers' packed weights (`PersistentDecoder.repack`), and 64 MB for its
        workspace, scratch and state."""
        per_layer = cfg.hidden * (2 * cfg.q_dim + 2 * cfg.kv_dim + 3 * cfg.ffn)
        return cfg.n_layers * per_layer * cfg.bytes_per_el + (64 << 20)

    def decoder(self, session, say) -> tuple:
        """The persistent kernel over the model, its kernels compiled in parallel first: (decoder, buckets)."""
        from gpu_probe.kernels.persistent import MAX_ROWS, PersistentDecoder, precompile_in_workers

        refused = self.refusal(session.cfg)
        if refused:
            raise ValueError(refused)
        buckets = [b for b in session.buckets if b <= MAX_ROWS]  # above them the decoder runs the fused path
        decoder = session.decoders.get(self.name)
        if decoder is None:
            decoder = PersistentDecoder(session.model)
            say(f"persistent: compiling its kernels for buckets {buckets} in worker processes")
            for err in precompile_in_workers(
                session.cfg, buckets, session.num_blocks, decoder.programs, trace=True
            ):
                say(f"persistent: a precompile failed ({err}); the launch compiles it instead")
            session.decoders[self.name] = decoder
        return decoder, buckets

    def after_capture(self, session, say) -> None:
        from gpu_probe.session import run_check

        decoder = session.decoders[self.name]
        run_check(session.checks, session.errors, "persistent_barriers", say, self._barrier_check, decoder)

    @staticmethod
    def _barrier_check(decoder) -> dict:
        """No barrier wait of the persistent kernel gave up while it was captured and checked."""
        phase = decoder.error_phase()
        detail = (
            "every grid-barrier wait completed" if phase is None else f"a wait gave up before {phase.name}"
        )
        return {"persistent_barriers": {"passed": phase is None, "detail": detail}}

    def profiled_extras(self, session, n: int) -> dict:
        """The kernel's in-kernel phase stamps at batch n (a few traced steps, the last kept)."""
        import torch

        from gpu_probe.kernels.persistent_trace import compact, read_trace

        decoder = session.decoders[self.name]
        rows = session.batch.head(n)
        with torch.no_grad():
            for _ in range(3):
                decoder(rows, trace=True)
        torch.cuda.synchronize()
        return {"phases": compact(read_trace(decoder.trace_buffer, decoder.phases))}


class Inductor(ProbeKernelSet):
    """torch.compile's kernels of the unfused forward (`gpu_probe.compile_peer`): Inductor compiles a step per
    batch and replays it from CUDA graphs of its own, so the probe's runner captures none."""

    name = INDUCTOR_KERNELS
    captured = False

    def held_bytes(self, cfg, rows: int, pool_bytes: int) -> int:
        """Its copy of the KV pool (one buffer a layer: `compile_peer.PerLayerKVCache`) and the pool of its
        cudagraph trees (a step's temporaries at `rows`)."""
        from gpu_probe.footprint import activation_bytes

        return pool_bytes + activation_bytes(cfg, rows)

    def step(self, session, rows, errors: list[str], say):
        from gpu_probe.compile_peer import CompilePeer
        from gpu_probe.session import record_failure

        peer = session.decoders.get(self.name)
        if peer is None:  # kept: torch.compile's graphs are reused by later runs
            peer = session.decoders[self.name] = CompilePeer(session.model)
        say(f"compile: compiling for batch {rows.size}")
        try:
            peer.warm(rows)
        except Exception as err:
            record_failure(errors, f"compile at batch {rows.size}", err, say)
            return None
        return lambda: peer(rows)

    def after_runs(self, session, out: dict, modes: list[str], say) -> None:
        """Whether Inductor really replayed graphs: no skip in its log, graph launches in the profiled steps."""
        peer = session.decoders.get(self.name)
        if peer is None:  # the peer exists once a compile was tried
            return
        seen = [r["graph_launches"] > 0 for r in out["runs"] if r["mode"] in modes]
        from gpu_probe.session import run_check

        run_check(
            out["checks"], out["errors"], "compile_cudagraphs", say, peer.check, all(seen) if seen else None
        )


SETS: dict[str, ProbeKernelSet] = {
    s.name: s
    for s in (
        ModelForward(UNFUSED_KERNELS, fused=False),
        ModelForward(FUSED_KERNELS, fused=True),
        Inductor(),
        PersistentKernel(),
    )
}


def kernel_set(m) -> ProbeKernelSet:
    """The probe's side of a mode's kernel set (a `Mode`, or a set's name), or ValueError naming those it has."""
    name = m.kernels if isinstance(m, Mode) else m
    found = SETS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"kernels: the probe runs {', '.join(SETS)}, not {name!r}")
    return found
