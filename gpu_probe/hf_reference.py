"""What naive eager code of the probe's shape costs: Hugging Face transformers' own Llama, measured beside it.

This is the one harness that builds Hugging Face decoders in the repository: the probe's reference
(`python -m gpu_probe ... --reference hf`: `ReferenceSteps`, timed in the same rounds as the probe's own
steps; `measure_reference` on its own) and the tools that trace Hugging Face
steps (`tools/hf_traces.py`, `tools/profiler_cost.py`) all build them here.

- `HFShape` is a decoder's shape in transformers' terms; `SHAPES` holds the published ones the tools
  trace (`named_shape` shrinks one to the `TINY` toy or changes its layer count), and `shape_of` turns
  a probe preset into one (same layers, widths, heads, vocabulary, RoPE base and tied embeddings).
- `build_model` makes the model with random weights (seeded), in bf16 on a GPU, with SDPA attention.
- `hf_config_dict` writes the probe's model (`gpu_probe.config.ProbeModelConfig`: a preset or a config.json's
  decoder) back as a config.json's fields, and `model_from_config` builds Hugging Face's model of it
  (LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM, by `model_type`) with random weights: the
  probe's reference (`ReferenceSteps`) is built that way, so a Qwen2 config's reference has its bias on q, k
  and v and a Llama 3.1 config's its RoPE scaling. `core.hf_config.from_dict` of the dict gives the same
  decoder back (tested without transformers, which this machine lacks; the import is in the functions).
- `Decoder` is `batch` sequences decoding in lockstep against a `StaticCache` after a prefill of
  `context` tokens. `step` re-decodes on device inputs (the probe's timing); `loop_step` is the step
  as a server's loop runs it: `submit` writes the token ids and position into host memory, copies them
  to the device and runs the model, `finish` reads the sampled tokens back (a synchronisation) and
  moves the position on. `GraphDecoder` captures the model once with `torch.cuda.graph` and replays
  it; `CompiledDecoder` runs it under `torch.compile` (default mode: Inductor's kernels launched one
  by one; `mode="reduce-overhead"`: replayed as CUDA graphs).

The reference is context to show, not a target: transformers' static cache has fixed shapes, so its
attention reads every one of the cache's positions (masked past the context), and its layer is
whatever its modules launch (about 52 kernels a layer for Llama in eager mode). transformers is not a
dependency of the app or the probe: without it `available()` is None and the reference is skipped
with a one-line note.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import torch

# Cache positions past the prompt. transformers 5's StaticCache writes each step at its own counter
# (`cumulative_length`), whatever `cache_position` says, so a decoder runs at most this many steps before
# `rewind` puts the counters back at the prompt's end.
DEFAULT_SLACK = 128


@dataclass(frozen=True, slots=True)
class HFShape:
    """A decoder's shape as transformers' configs name it."""

    arch: str  # "llama" or "qwen2": the config and model classes
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    rope_theta: float
    tie_word_embeddings: bool
    head_dim: int | None = None


SHAPES = {
    "llama": HFShape("llama", 2048, 8192, 16, 32, 8, 128256, 500000.0, True, 64),  # Llama-3.2-1B
    "qwen2": HFShape("qwen2", 896, 4864, 24, 14, 2, 151936, 1000000.0, True),  # Qwen2.5-0.5B
    "tinyllama": HFShape("llama", 2048, 5632, 22, 32, 4, 32000, 10000.0, False, 64),  # TinyLlama-1.1B
}
TINY = dict(  # a 2-layer toy of any shape, for CPU runs of the tools
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    vocab_size=512,
)


def named_shape(name: str, *, tiny: bool = False, layers: int | None = None) -> HFShape:
    """`SHAPES[name]`, as the `TINY` toy if `tiny`, with `layers` layers if given."""
    shape = SHAPES[name]
    if tiny:
        shape = replace(shape, **TINY)
    if layers:
        shape = replace(shape, num_hidden_layers=layers)
    return shape


_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
}
MAX_POSITION = 4096  # max_position_embeddings of a preset's model, which has none of its own


def available() -> str | None:
    """transformers' version where it can be imported, else None."""
    try:
        import transformers
    except ImportError:
        return None
    return str(transformers.__version__)


def shape_of(cfg) -> HFShape:
    """The probe preset `cfg` (gpu_probe.config.ProbeModelConfig) as a transformers Llama."""
    return HFShape(
        "llama",
        cfg.hidden,
        cfg.ffn,
        cfg.n_layers,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.vocab,
        float(cfg.rope_theta),
        bool(cfg.tie_embeddings),
        cfg.head_dim,
    )


def hf_config_dict(cfg) -> dict:
    """The probe's model `cfg` (a ProbeModelConfig) as a config.json of its architecture would write it: the
    shape, tied embeddings, RoPE's base and Llama 3 scaling, the norm's epsilon, the bias on q, k and v (Qwen2
    always has one; Llama's `attention_bias` says), no sliding window."""
    scaling = cfg.rope_scaling
    config = {
        "architectures": [_CLASSES[cfg.model_type][1]],
        "model_type": cfg.model_type,
        "hidden_size": cfg.hidden,
        "intermediate_size": cfg.ffn,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": float(cfg.rope_theta),
        "rope_scaling": None
        if scaling is None
        else {
            "rope_type": "llama3",
            "factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_position,
        },
        "tie_word_embeddings": bool(cfg.tie_embeddings),
        # transformers checks that llama3 scaling's original context is below this (a warning on the 8B run of
        # 2026-12-07, 8192 against 4096); the frequencies never read it: the context the scaling stretches to.
        "max_position_embeddings": max(
            MAX_POSITION,
            cfg.max_context,
            0 if scaling is None else round(scaling.original_max_position * scaling.factor),
        ),
        "torch_dtype": cfg.dtype,
    }
    if cfg.model_type == "llama":
        config["attention_bias"] = bool(cfg.qkv_bias)
        config["mlp_bias"] = False
    elif cfg.qkv_bias != (cfg.model_type == "qwen2"):
        raise ValueError(
            f"{cfg.name}: Hugging Face's {cfg.model_type} has {'a' if cfg.model_type == 'qwen2' else 'no'} bias on "
            f"q, k and v, and this model {'has' if cfg.qkv_bias else 'has not'}"
        )
    if cfg.model_type in ("qwen2", "mistral"):
        config.update(sliding_window=None, use_sliding_window=False)
    return config


def model_from_config(config: dict, device, dtype=None, seed: int = 0):
    """Hugging Face's model of a config.json's fields (`hf_config_dict`), random weights (seeded), SDPA attention,
    in eval mode (bf16 on a GPU, else fp32). The RoPE settings are given as a config.json has them (what
    transformers reads from the files people have), and again as transformers 5's `rope_parameters` where the
    config it built holds others; RuntimeError where neither gives the base and scaling asked for."""
    import transformers

    config_name, model_name = _CLASSES[config["model_type"]]
    config_class = getattr(transformers, config_name)
    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")}
    hf_config = config_class(attn_implementation="sdpa", **fields)
    if _rope_differs(hf_config, config):
        legacy = {k: v for k, v in fields.items() if k not in ("rope_theta", "rope_scaling")}
        hf_config = config_class(
            attn_implementation="sdpa", rope_parameters=rope_parameters(config), **legacy
        )
        wrong = _rope_differs(hf_config, config)
        if wrong:
            raise RuntimeError(wrong)
    device = torch.device(device)
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    torch.manual_seed(seed)
    with torch.device(device):
        return getattr(transformers, model_name)(hf_config).to(dtype).eval()


def rope_parameters(config: dict) -> dict:
    """The dict's RoPE base and scaling as transformers 5 names them (`rope_parameters`)."""
    scaling = dict(config["rope_scaling"] or {"rope_type": "default"})
    return {**scaling, "rope_theta": config["rope_theta"]}


def _rope_differs(hf_config, config: dict) -> str | None:
    """What transformers' config holds of RoPE where it is not the dict's base and scaling (None where it is),
    read from transformers 5's `rope_parameters` or the older `rope_theta` and `rope_scaling`."""
    params = getattr(hf_config, "rope_parameters", None)
    if not isinstance(params, dict):
        older = getattr(hf_config, "rope_scaling", None) or {}
        params = {**older, "rope_theta": getattr(hf_config, "rope_theta", None)}
    keys = ("rope_theta", "rope_type", "factor", "low_freq_factor", "high_freq_factor")
    built = {k: params.get(k) for k in keys}
    built["rope_type"] = built["rope_type"] or params.get("type") or "default"
    wanted = rope_parameters(config)
    wanted = {k: wanted.get(k) for k in keys}
    if built == wanted:
        return None
    return f"transformers built RoPE {built}; the config gives {wanted}"


def build_model(shape: HFShape, device, dtype=None, seed: int = 0):
    """The model of `shape` with random weights, SDPA attention, in eval mode (bf16 on a GPU, else fp32)."""
    import transformers

    config_name, model_name = _CLASSES[shape.arch]
    fields = {k: v for k, v in asdict(shape).items() if k != "arch" and v is not None}
    config = getattr(transformers, config_name)(
        max_position_embeddings=4096, attn_implementation="sdpa", **fields
    )
    device = torch.device(device)
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    torch.manual_seed(seed)
    with torch.device(device):
        return getattr(transformers, model_name)(config).to(dtype).eval()


class Decoder:
    """`batch` sequences decoding in lockstep against a static cache of `context + slack` positions."""

    def __init__(self, model, batch: int, context: int, device, slack: int = DEFAULT_SLACK):
        from transformers import StaticCache

        self.model, self.device, self.batch, self.slack = model, torch.device(device), batch, slack
        self.cache = StaticCache(config=model.config, max_cache_len=context + slack)
        pin = self.device.type == "cuda"
        self.host_ids = torch.zeros((batch, 1), dtype=torch.long, pin_memory=pin)
        self.host_pos = torch.zeros((1,), dtype=torch.long, pin_memory=pin)
        prompt = torch.randint(0, model.config.vocab_size, (batch, context), device=self.device)
        with torch.no_grad():
            out = model(
                input_ids=prompt,
                past_key_values=self.cache,
                use_cache=True,
                cache_position=torch.arange(context, device=self.device),
                logits_to_keep=1,  # the prompt's last logits only: a [batch, context, vocab] tensor is GBs
            )
        self.tokens = out.logits[:, -1].argmax(-1).cpu()
        self.context = self.position = context
        self.steps_since_rewind = 0
        # Device inputs of a step that re-decodes the same token at the same position, as the probe does.
        self.ids = self.tokens.view(batch, 1).to(self.device)
        self.pos = torch.full((1,), context, dtype=torch.long, device=self.device)

    def forward(self, ids, pos):
        """One decode step: the model on device inputs, the sampled tokens (greedy) on the device."""
        out = self.model(
            input_ids=ids,
            position_ids=pos.view(1, 1).expand(ids.shape[0], 1),
            cache_position=pos,
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits[:, -1].argmax(-1)

    def run(self, ids, pos):
        """What every step runs on its inputs (the graph and compiled decoders replace it)."""
        return self.forward(ids, pos)

    def step(self):
        """One decode step on the device inputs (no host round trip), rewinding the cache's counters
        between steps when its spare positions run out."""
        self.steps_since_rewind += 1
        if self.steps_since_rewind >= self.slack - 4:
            self.rewind()
        return self.run(self.ids, self.pos)

    def _host_inputs(self):
        self.host_ids[:, 0].copy_(self.tokens)
        self.host_pos.fill_(self.position)
        return (
            self.host_ids.to(self.device, non_blocking=True),
            self.host_pos.to(self.device, non_blocking=True),
        )

    def submit(self):
        """The step's inputs written into host memory and copied in, the model run: its sampled tokens,
        still on the device."""
        with torch.no_grad():
            return self.run(*self._host_inputs())

    def finish(self, out) -> None:
        """The sampled tokens back on the host (`.cpu()` waits for the step), the position one on; the
        cache rewound before its spare positions run out."""
        self.tokens = out.cpu() % self.model.config.vocab_size
        self.position += 1
        if self.position >= self.context + self.slack - 8:
            self.rewind()

    def loop_step(self) -> None:
        """One step as a server's loop sees it: inputs built and copied, the model, the tokens back."""
        self.finish(self.submit())

    def rewind(self):
        """Back to the prompt's end: the position and every layer's write counter."""
        self.position, self.steps_since_rewind = self.context, 0
        for layer in getattr(self.cache, "layers", ()):
            counter = getattr(layer, "cumulative_length", None)
            if isinstance(counter, torch.Tensor):
                counter.fill_(self.context)
            elif isinstance(counter, int):
                layer.cumulative_length = self.context


class GraphDecoder(Decoder):
    """The same step captured once with torch.cuda.graph; a step copies its inputs in and replays."""

    def __init__(self, model, batch, context, device, slack: int = DEFAULT_SLACK):
        super().__init__(model, batch, context, device, slack)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                self.forward(self.ids, self.pos)
        torch.cuda.current_stream().wait_stream(side)
        self.rewind()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.out = self.forward(self.ids, self.pos)
        self.rewind()

    def _host_inputs(self):  # straight into the graph's static buffers
        self.host_ids[:, 0].copy_(self.tokens)
        self.host_pos.fill_(self.position)
        self.ids.copy_(self.host_ids, non_blocking=True)
        self.pos.copy_(self.host_pos, non_blocking=True)
        return self.ids, self.pos

    def run(self, ids, pos):
        self.graph.replay()
        return self.out


class CompiledDecoder(Decoder):
    """The step under torch.compile. The default mode launches Inductor's kernels one by one;
    "reduce-overhead" (or "max-autotune") replays them as CUDA graphs, whose output each step clones
    since the next replay overwrites it."""

    def __init__(self, model, batch, context, device, slack: int = DEFAULT_SLACK, mode: str | None = None):
        super().__init__(model, batch, context, device, slack)
        self.cudagraphs = mode in ("reduce-overhead", "max-autotune")
        self.compiled = torch.compile(self.forward, mode=mode, dynamic=False, fullgraph=False)
        for _ in range(4 if self.cudagraphs else 3):  # cudagraph trees: warm up, record, then replay
            self.loop_step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def run(self, ids, pos):
        out = self.compiled(ids, pos)
        return out.clone() if self.cudagraphs else out


MAKERS = {"eager": Decoder, "graph": GraphDecoder, "compile": CompiledDecoder}  # the tools' names


class ReferenceSteps:
    """The probe's reference: Hugging Face's Llama of `cfg`'s shape, eager and one CUDA graph of its eager
    step, a decoder built for each (kind, batch) of `batches`. `steps()` are timed beside the probe's own
    (in the same rounds: `ProbeSession.measure_into`'s `beside`), `finish` profiles each and returns the
    result's `reference` block.

    Never raises: without transformers the block says so (`skipped`, no steps); a decoder that cannot be
    built or a step that fails (out of memory, an API change) is recorded under `errors` and the rest goes on."""

    def __init__(self, cfg, batches, progress=print):
        self.cfg, self.decoders, self.model = cfg, {}, None
        self.started = time.perf_counter()
        version = available()
        if version is None:
            self.block = {"skipped": "transformers is not installed: no Hugging Face reference in this run"}
            return
        config = hf_config_dict(cfg)
        architecture = config["architectures"][0]
        self.block = {
            "name": f"Hugging Face transformers {architecture}",
            "transformers": version,
            "attention": "sdpa",
            "cache": f"StaticCache of {cfg.prefill_len + DEFAULT_SLACK} positions after a {cfg.prefill_len}-token prefill",
            "runs": [],
            "errors": [],
        }
        progress(f"reference: building Hugging Face's {architecture} of the same config")
        try:
            self.model = model_from_config(config, "cuda", seed=cfg.seed)
        except Exception as err:  # an API change or out of memory: the probe's own results still stand
            self._failed("building the model", err)
            return
        from core.probe_result import REFERENCE_KINDS

        for kind in REFERENCE_KINDS:
            for batch in batches:
                progress(f"reference: Hugging Face {kind} at batch {batch}: prefill and warm-up")
                try:
                    with torch.no_grad():
                        self.decoders[(kind, batch)] = MAKERS[kind](
                            self.model, batch, cfg.prefill_len, "cuda"
                        )
                except Exception as err:
                    self._failed(f"{kind} at batch {batch}", err)

    def _failed(self, where: str, err: Exception) -> None:
        self.block["errors"].append(f"{where}: {type(err).__name__}: {str(err)[:200]}")
        if isinstance(err, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()

    def steps(self) -> dict:
        """{("hf", kind, batch): its decoder's step}, to time beside the probe's steps."""
        return {("hf", kind, batch): decoder.step for (kind, batch), decoder in self.decoders.items()}

    def finish(self, timings: dict, progress=print) -> dict:
        """The `reference` block: each decoder's timing (`timings[("hf", kind, batch)]`: the timing, or the
        exception its step raised) and one profiled step. Lets the model and decoders go."""
        if "skipped" in self.block:
            return self.block
        from gpu_probe import measure

        for (kind, batch), decoder in self.decoders.items():
            timing = timings.get(("hf", kind, batch))
            if not isinstance(timing, dict):
                self._failed(f"{kind} at batch {batch}", timing or RuntimeError("not timed"))
                continue
            progress(f"reference: profiling Hugging Face {kind} at batch {batch}")
            try:
                decoder.rewind()
                with torch.no_grad():
                    traced = measure.profile_step(decoder.step, label=f"Hugging Face {kind} · batch {batch}")
                record = measure.run_record(kind, batch, timing, traced, self.cfg.n_layers)
                del record["timeline"], record["bucket"], record["padded_rows"], record["eager_fallback"]
                self.block["runs"].append(record)
            except Exception as err:
                self._failed(f"{kind} at batch {batch}", err)
        self.block["seconds"] = round(time.perf_counter() - self.started, 1)
        self.close()
        return self.block

    def close(self) -> None:
        self.decoders.clear()
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def measure_reference(
    cfg, batches, steps: int, warmup: int, progress=print, rounds: int | None = None
) -> dict:
    """The `reference` block of a probe result on its own: `ReferenceSteps`, timed taking turns as the probe's
    modes are (`measure.time_interleaved`), then profiled. Never raises (see `ReferenceSteps`)."""
    reference = ReferenceSteps(cfg, batches, progress)
    if "skipped" in reference.block:
        return reference.block
    from gpu_probe import measure

    errors: dict = {}
    with torch.no_grad():
        timings = measure.time_interleaved(
            reference.steps(), steps, warmup, rounds, say=progress, errors=errors
        )
    return reference.finish({**timings, **errors}, progress)
