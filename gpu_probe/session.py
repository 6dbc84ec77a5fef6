"""What a probe run measures with, built once: the model and its KV pool, a batch of random
sequences, the captured CUDA graphs per variant, and the checks made when they were captured.

The CLI builds one per run; the page keeps one per server (st.cache_resource), so a second
"Measure on this GPU" neither rebuilds the model nor recaptures graphs. How a mode's step is built and
captured is its kernel set's object (`gpu_probe.kernel_sets`); what a set builds beside the model (the
persistent kernel's decoder, torch.compile's peer) is kept here too (`decoders`). `measure_into` builds every
(mode, batch)'s step first, times them all taking turns over many short rounds (with any steps given
beside them, the Hugging Face reference's), with the host's speed measured just before and just after,
then profiles each. Not thread-safe: the
graphs' static buffers are shared, so callers serialise capture and replay with one lock.
Errors never escape: an out-of-memory error while building or measuring is recorded and the
rest goes on, so what was gathered is still written.
"""

from __future__ import annotations

import torch

from core.step_plan import FUSED_GRAPH, Mode, bucket_for
from core.step_plan import mode as mode_named
from gpu_probe import measure as m
from gpu_probe import padding
from gpu_probe.config import ProbeModelConfig, get_config
from gpu_probe.decode_batch import make_batch
from gpu_probe.graph_runner import GraphRunner
from gpu_probe.kernel_sets import kernel_set
from gpu_probe.model import UNFUSED_OPS, ProbeModel


def record_failure(errors: list[str], where: str, err: Exception, say) -> None:
    first = (str(err).splitlines() or [""])[0][:200]
    if isinstance(err, torch.cuda.OutOfMemoryError):
        errors.append(f"{where}: CUDA out of memory ({first})")
        torch.cuda.empty_cache()
    else:
        errors.append(f"{where}: {type(err).__name__}: {first}")
    say(errors[-1])


def run_check(checks: dict, errors: list[str], name: str, say, fn, *args) -> None:
    """Merge fn(*args)'s check results into `checks`; a check that raises is a failed check, not a lost run."""
    try:
        checks.update(fn(*args))
    except Exception as err:
        record_failure(errors, f"check {name}", err, say)
        checks[name] = {"passed": False, "detail": f"raised {type(err).__name__}"}


class ProbeSession:
    def __init__(self, preset, rows: int, buckets: list[int], graph_modes, progress=None):
        """preset: a preset's name, or the ProbeModelConfig to build (from a config.json)."""
        self.cfg = cfg = preset if isinstance(preset, ProbeModelConfig) else get_config(preset)
        self.rows, self.buckets = rows, list(buckets)
        self.graph_modes: list[str] = []  # those whose capture was tried (`capture`)
        self.num_blocks = cfg.pool_blocks(rows)
        self.errors: list[str] = []  # from building: copied into every result
        self.checks: dict = {}
        self.captures: list[dict] = []
        self.runners: dict[str, GraphRunner] = {}
        self.decoders: dict = {}  # what a kernel set built beside the model, by set name (gpu_probe.kernel_sets)
        self.static: dict[str, int] = {}
        self.model = self.batch = None
        self.model_info = {
            "config": cfg.to_dict(),
            "n_params": cfg.n_params,
            "weight_bytes": cfg.n_params * cfg.bytes_per_el,
            "read_bytes": cfg.weight_bytes,
        }
        self._padding_checked = False
        self._build(progress or (lambda msg: None), list(graph_modes))

    def serves(self, preset, rows: int, buckets) -> bool:
        """Whether this session's model and pool serve a run (`preset`: a name or a ProbeModelConfig); the graphs
        a run needs that are not captured yet are captured for it (`capture`)."""
        same = preset == self.cfg if isinstance(preset, ProbeModelConfig) else preset == self.cfg.name
        return same and rows <= self.rows and list(buckets) == self.buckets

    def describe(self) -> str:
        return f"preset {self.cfg.name}, {self.rows} rows, buckets {self.buckets}, graphs {self.graph_modes}"

    # ---- building ------------------------------------------------------------------------------
    def _check(self, name: str, say, fn, *args) -> None:
        run_check(self.checks, self.errors, name, say, fn, *args)

    def _build(self, say, graph_modes: list[str]) -> None:
        cfg = self.cfg
        say(f"building the {cfg.name} model ({cfg.n_layers} layers) with a KV pool for {self.rows} sequences")
        try:
            with torch.no_grad():
                model = ProbeModel(cfg, device="cuda", num_blocks=self.num_blocks)
                model.kv_cache.fill_random_(seed=cfg.seed + 1)
                self.batch = make_batch(model, self.rows, seed=cfg.seed + 2)
        except Exception as err:
            record_failure(
                self.errors, f"building the model and a KV pool for {self.rows} sequences", err, say
            )
            return
        self.model = model
        params = list(model.parameters())
        self.model_info = {
            "config": cfg.to_dict(),
            "n_params": sum(p.numel() for p in params),
            "weight_bytes": sum(p.numel() * p.element_size() for p in params),
            "read_bytes": model.weight_bytes,
            "fusions": model.fusion_report(),
            "unfused_kernels": list(UNFUSED_OPS),
        }
        self._check("fused_vs_unfused", say, m.check_fused_vs_unfused, model, self.batch)
        self.capture(graph_modes, say)

    def capture(self, graph_modes, say=None) -> None:
        """Capture the graphs of those of `graph_modes` whose capture was not tried yet: the CLI captures every
        graph mode of its run when it builds the session, the page those of its first part only (the rest when a
        later part needs them). The padding assertion is checked on the first runner captured."""
        say = say or (lambda msg: None)
        if self.model is None:
            return  # not built (recorded under errors)
        for name in graph_modes:
            if name not in self.graph_modes:
                self.graph_modes.append(name)
                self._capture(mode_named(name), say)
        if self.runners and not self._padding_checked:
            self._padding_checked = True
            runner = self.runners.get(FUSED_GRAPH.name) or next(iter(self.runners.values()))
            say("checking the padding assertion with the bug on and off")
            self._check("padding_assertion", say, padding.check_padding_assertion, runner, self.batch)
            # Allocated once outside the graph pool (inputs, logits, fused workspace): not in any graph_mem_bytes.
            self.static = {
                "static_buffer_bytes": runner.static_buffer_bytes,
                "static_logits_bytes": runner.static_logits_bytes,
                "static_workspace_bytes": runner.workspace_bytes,
            }

    def _capture(self, graph_mode: Mode, say) -> None:
        kernels = kernel_set(graph_mode)
        variant = kernels.name
        try:
            decoder, buckets = kernels.decoder(self, say)
            runner = GraphRunner(decoder, buckets=buckets, progress=lambda s: say(f"{variant}: {s}"))
        except Exception as err:
            record_failure(self.errors, f"capturing {variant} graphs", err, say)
            return
        self.runners[graph_mode.name] = runner
        self.captures += [dict(c.to_dict(), variant=variant) for c in runner.captures]
        say(f"{variant}: checking graph == eager and the KV canary for {len(runner.buckets)} buckets")
        try:
            for name, result in m.check_graph_vs_eager(runner, runner.model, self.batch).items():
                merged = self.checks.setdefault(name, {"passed": True, "detail": result["detail"]})
                merged["passed"] = merged["passed"] and result["passed"]
                merged[variant] = result
        except Exception as err:
            record_failure(self.errors, f"check graph_vs_eager ({variant})", err, say)
            self.checks["graph_vs_eager"] = {"passed": False, "detail": f"raised {type(err).__name__}"}
        kernels.after_capture(self, say)

    # ---- measuring -----------------------------------------------------------------------------
    def measure_into(self, out: dict, req: dict, say, trace_dir=None, checkpoint=None, beside=None) -> dict:
        """Time and profile every (mode, batch) of `req` into the result dict `out`, with the host's speed
        before and after the timing (`out["host"]`).

        Every step is built first (torch.compile's compile for each batch included), then all are timed
        taking turns over many short rounds (`measure.time_interleaved`), then each is profiled once and
        recorded (a checkpoint after each). `beside` ({key: step}, e.g. the Hugging Face reference's steps)
        is timed in the same rounds: returns {key: its timing, or the exception it raised}."""
        out["model"] = dict(self.model_info)
        out["errors"] += self.errors
        out["checks"].update({name: dict(check) for name, check in self.checks.items()})
        out["captures"] += [dict(c) for c in self.captures]
        from gpu_probe.kernels.linear import (  # Triton: where it runs
            TILE_MAX_ROWS,
            TILE_PDL,
            split_k_gemms,
            unpipelined_gemms,
        )

        out["settings"].update(
            context_len=self.cfg.prefill_len,
            num_blocks=self.num_blocks,
            unpipelined_gemms=unpipelined_gemms(self.cfg),
            split_k_gemms=split_k_gemms(self.cfg, self.model.device if self.model is not None else "cpu"),
            pdl_max_rows=TILE_MAX_ROWS if TILE_PDL else 4,  # the calibration's PDL chain
            **self.static,
        )
        items = self._steps(req, out["errors"], say) if self.model is not None else []
        steps = {(mode, n): step for mode, n, step, _, _ in items}
        steps.update(beside or {})
        host = self._host_speed(out["errors"], say)
        self._host_sample(host, "before", out["errors"], say)
        errors: dict = {}
        with torch.no_grad():
            timings = m.time_interleaved(
                steps, req["steps"], req["warmup"], req.get("rounds"), say=say, errors=errors
            )
        self._host_sample(host, "after", out["errors"], say)
        if host is not None:
            out["host"] = host.block()
            host.close()
        # Saved at once, so a run stopped while profiling keeps every timing (dropped once each run is whole).
        out["timed_not_yet_profiled"] = {
            f"{mode} b{n}": timings[(mode, n)] for mode, n, *_ in items if (mode, n) in timings
        }
        self._checkpoint(out, checkpoint, say)
        for mode, n, step, bucket, fallback in items:
            if (mode, n) in errors:
                record_failure(out["errors"], f"{mode} at batch {n}", errors[(mode, n)], say)
            else:
                self._profile_into(
                    out, mode, n, step, timings[(mode, n)], bucket, fallback, say, trace_dir, checkpoint
                )
        out.pop("timed_not_yet_profiled")
        by_set: dict = {}
        for run_mode in map(mode_named, req["modes"]):
            by_set.setdefault(kernel_set(run_mode), []).append(run_mode.name)
        for kernels, names in by_set.items():
            kernels.after_runs(self, out, names, say)
        return {key: timings.get(key, errors.get(key)) for key in beside or {}}

    def _steps(self, req: dict, errors: list[str], say) -> list[tuple]:
        """(mode, batch, step, bucket replayed, eager fallback) for every (mode, batch) of `req` that can run:
        a graph mode's replayed by its runner only where its graphs were captured, any other built by its
        kernel set's object (torch.compile's compiled for its batch)."""
        items = []
        for run_mode in map(mode_named, req["modes"]):
            kernels = kernel_set(run_mode)
            for n in req["batches"]:
                rows = self.batch.head(n)
                bucket, fallback = None, False
                if not (run_mode.graphs and kernels.captured):
                    step = kernels.step(self, rows, errors, say)
                    if step is None:
                        continue  # it could not be built: recorded under errors
                elif run_mode.name in self.runners:
                    runner = self.runners[run_mode.name]
                    bucket = bucket_for(n, runner.buckets)
                    fallback = bucket is None
                    step = lambda rows=rows, runner=runner: runner.run(rows)  # noqa: E731
                else:
                    continue  # its graphs could not be captured: recorded under errors
                items.append((run_mode.name, n, step, bucket, fallback))
        return items

    @staticmethod
    def _host_speed(errors: list[str], say):
        """The trivial launches the host's speed is measured with (None where they cannot be set up)."""
        from gpu_probe.host_speed import HostSpeed

        try:
            return HostSpeed()
        except Exception as err:
            record_failure(errors, "setting up the host speed index", err, say)
            return None

    @staticmethod
    def _host_sample(host, when: str, errors: list[str], say) -> None:
        if host is None:
            return
        say(f"measuring the host's launch costs ({when} the steps)")
        try:
            sample = host.sample(when)
        except Exception as err:
            record_failure(errors, f"the host speed index {when} the steps", err, say)
            return
        say(
            f"host {when} the steps: torch launch {sample['torch_launch_us']['median']:.1f} µs, "
            f"graph launch {sample['graph_fixed_us']:.1f} µs + {sample['graph_per_node_us']:.3f} µs a node"
        )

    def _profile_into(self, out, mode, n, step, timing, bucket, fallback, say, trace_dir, checkpoint) -> None:
        """One (mode, batch)'s profiled step, recorded with its timing into `out["runs"]`; then a checkpoint."""
        say(f"{mode}: profiling batch {n} (its timing done)")
        slug = f"{mode.replace('+', '_')}_b{n}.json"
        try:
            with torch.no_grad():
                traced = m.profile_step(
                    step, label=f"{mode} · batch {n}", trace_path=trace_dir / slug if trace_dir else None
                )
        except Exception as err:
            record_failure(out["errors"], f"{mode} at batch {n}", err, say)
            return
        record = m.run_record(mode, n, timing, traced, self.cfg.n_layers, bucket, fallback)
        kernels = kernel_set(mode_named(mode))
        if trace_dir is not None and kernels.extras and not fallback:
            try:
                record.update(kernels.profiled_extras(self, n))
            except Exception as err:
                record_failure(out["errors"], f"{mode} at batch {n}: {kernels.extras}", err, say)
        out["runs"].append(record)
        out.get("timed_not_yet_profiled", {}).pop(f"{mode} b{n}", None)
        self._checkpoint(out, checkpoint, say)

    @staticmethod
    def _checkpoint(out: dict, checkpoint, say) -> None:
        if checkpoint:
            try:
                checkpoint(out)
            except (OSError, ValueError) as err:
                say(f"could not save the partial result ({err})")
