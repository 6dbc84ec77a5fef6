"""The probe's decoder from a Hugging Face config.json (issue 39 item 1): each shipped config builds and passes
the probe's own checks, Llama 3's RoPE scaling and Qwen2's bias on q, k and v are computed, a config or a run the
probe cannot do is refused before anything is built, naming the field.

CPU: each shipped config at one layer and at the narrowest width that keeps what its kernels see (its head dim,
its GQA group over one KV head, its bias, RoPE base and scaling, tied LM head, norm epsilon), fp32 through
Triton's interpreter (conftest sets TRITON_INTERPRET=1): a step there costs ~0.7 s at 512 wide, so each config
gets one fused-vs-unfused size and one padded bucket. CUDA (marked): the configs at their full width in bf16.
"""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.hf_config import from_dict as decoder_from_dict
from core.hf_config import shipped
from core.probe_result import parse_config
from gpu_probe import footprint
from gpu_probe.config import PRESETS, ProbeModelConfig, from_file, preset_vs_config
from gpu_probe.decode_batch import DecodeBatch, make_batch
from gpu_probe.graph_runner import GraphRunner
from gpu_probe.hf_reference import hf_config_dict
from gpu_probe.live import check_memory, validate_request
from gpu_probe.measure import check_fused_vs_unfused, check_graph_vs_eager, rel_err
from gpu_probe.model import ProbeModel, llama3_scaled, rope_tables
from gpu_probe.padding import check_padding_assertion

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = shipped()
GB = 10**9


def narrow(cfg: ProbeModelConfig, **probe) -> ProbeModelConfig:
    """`cfg` at one layer, its GQA group over one KV head (its head dim kept), a small FFN and vocabulary, fp32,
    and a short paged cache: what the interpreter can run in about a second a step."""
    group = cfg.n_heads // cfg.n_kv_heads
    shape = dict(n_layers=1, n_heads=group, n_kv_heads=1, hidden=group * cfg.head_dim, ffn=24, vocab=40)
    cache = dict(block_size=4, max_context=32, prefill_len=6, max_batch=8)
    return replace(cfg, **shape, dtype="float32", **{**cache, **probe})


def built(cfg: ProbeModelConfig, rows: int, device="cpu") -> tuple:
    model = ProbeModel(cfg, device=device, num_blocks=cfg.pool_blocks(rows), fused=True)
    model.kv_cache.fill_random_(seed=1)
    return model, make_batch(model, rows, seed=2)


# ---- reading a config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_config_becomes_the_probe_decoder_with_what_its_layer_computes(name):
    cfg = from_file(CONFIGS[name])
    raw = json.loads(CONFIGS[name].read_text())
    assert (cfg.name, cfg.source, cfg.model_type) == (name, f"{name}.json", raw["model_type"])
    assert (cfg.n_layers, cfg.hidden, cfg.n_heads, cfg.ffn, cfg.vocab) == (
        raw["num_hidden_layers"],
        raw["hidden_size"],
        raw["num_attention_heads"],
        raw["intermediate_size"],
        raw["vocab_size"],
    )
    assert cfg.n_kv_heads == raw["num_key_value_heads"] and cfg.head_dim in (64, 128)
    assert cfg.tie_embeddings == raw.get("tie_word_embeddings", False)
    assert cfg.qkv_bias == (raw["model_type"] == "qwen2")
    assert (cfg.rope_scaling is not None) == (raw.get("rope_scaling") is not None)
    assert cfg.rope_theta == raw["rope_theta"] and cfg.norm_eps == raw["rms_norm_eps"]
    assert cfg.dtype == "bfloat16"
    # What a result file records of it is what the page's schema reads back.
    assert parse_config(json.loads(json.dumps(cfg.to_dict()))) == cfg.n_layers
    # Written back as a config.json (what --reference hf gives transformers), it reads as the same decoder.
    again = decoder_from_dict(hf_config_dict(cfg), name)
    assert {
        f: getattr(again, f) for f in ("qkv_bias", "rope_scaling", "rope_theta", "norm_eps", "model_type")
    } == {f: getattr(cfg, f) for f in ("qkv_bias", "rope_scaling", "rope_theta", "norm_eps", "model_type")}
    assert again.n_params == cfg.n_params
    written = hf_config_dict(
        cfg
    )  # transformers refuses llama3 scaling whose original context is not below it
    if written["rope_scaling"]:
        assert (
            written["max_position_embeddings"] > written["rope_scaling"]["original_max_position_embeddings"]
        )


def test_the_presets_are_decoders_of_a_config():
    """A preset is written as a config's decoder; the 1b preset is Llama-3.2-1B but for its RoPE scaling (its
    recorded runs were measured without it)."""
    assert all(p.model_type == "llama" and p.source == "" and not p.qkv_bias for p in PRESETS.values())
    diff = preset_vs_config(PRESETS["1b"], from_file(CONFIGS["llama-3.2-1b"]))
    assert list(diff) == ["rope_scaling"] and diff["rope_scaling"][0] is None


def test_a_bad_result_config_field_is_named():
    config = from_file(CONFIGS["llama-3.1-8b"]).to_dict()
    with pytest.raises(ValueError, match="model.config.rope_scaling.factor"):
        parse_config({**config, "rope_scaling": {**config["rope_scaling"], "factor": "x"}})
    with pytest.raises(ValueError, match="model.config.qkv_bias"):
        parse_config({**config, "qkv_bias": 1})


# ---- refusals, before anything is built ---------------------------------------------------------------------
LLAMA = json.loads(CONFIGS["llama-3.1-8b"].read_text())


@pytest.mark.parametrize(
    "change, named",
    [
        ({"num_local_experts": 8}, "num_local_experts = 8"),
        ({"model_type": "mistral", "sliding_window": 256}, "sliding_window = 256"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"num_attention_heads": 128}, "head_dim 32"),
        ({"num_hidden_layers": 0}, "num_hidden_layers must be from 1"),
        ({"num_attention_heads": 10**9}, "num_attention_heads must be from 1"),
        ({"hidden_size": None}, "hidden_size is missing"),
        (None, "500.0 MB is not a config.json"),
    ],
)
def test_cli_refuses_a_config_naming_the_field(tmp_path, capsys, change, named):
    from gpu_probe.__main__ import main

    path, out = tmp_path / "config.json", tmp_path / "r.json"
    if change is None:  # an upload of 500 MB: refused by its size, unread (a sparse file)
        with path.open("wb") as f:
            f.truncate(500 * 2**20)
    else:
        path.write_text(json.dumps({k: v for k, v in {**LLAMA, **change}.items() if v is not None}))
    assert main(["--config", str(path), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_probe: error: config.json: "), lines
    assert named in lines[0] and not out.exists()


def test_cli_refuses_a_config_before_torch_is_imported(tmp_path):
    path, out = tmp_path / "config.json", tmp_path / "r.json"
    path.write_text(json.dumps({**LLAMA, "num_experts": 64}))
    code = (
        "import sys; from gpu_probe.__main__ import main; "
        f"rc = main(['--config', {str(path)!r}, '--out', {str(out)!r}]); print(rc, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
    assert "num_experts = 64" in proc.stderr


def test_cli_with_a_good_config_gets_as_far_as_the_gpu(tmp_path, capsys, monkeypatch):
    import gpu_probe.live
    from gpu_probe.__main__ import main

    monkeypatch.setattr(gpu_probe.live, "cuda_available", lambda: False)  # a GPU machine runs it otherwise
    out = tmp_path / "r.json"
    assert main(["--config", str(CONFIGS["qwen2.5-0.5b"]), "--batch", "1", "--out", str(out)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert main(["--config", str(CONFIGS["qwen2.5-0.5b"]), "--tp", "2", "--out", str(out)]) == 2
    assert "--config runs on one GPU" in capsys.readouterr().err
    assert main(["--config", str(CONFIGS["qwen2.5-0.5b"]), "--modes", "persistent", "--out", str(out)]) == 2
    assert "mode persistent: the persistent kernel has no bias" in capsys.readouterr().err
    assert not out.exists()


def test_a_mode_whose_kernels_cannot_run_the_model_is_refused_by_name_and_left_out_of_all():
    qwen = from_file(CONFIGS["qwen2.5-0.5b"])
    with pytest.raises(ValueError, match="mode persistent: .*qkv_bias"):
        validate_request(qwen, [1], ["eager", "persistent"], [1, 2], 100, 10)
    req = validate_request(qwen, [1], "all", [1, 2], 100, 10)
    assert "persistent" not in req["modes"] and "qkv_bias" in req["modes_left_out"]["persistent"]
    llama = validate_request(from_file(CONFIGS["llama-3.1-8b"]), [1], "all", [1, 2], 100, 10)
    assert "persistent" in llama["modes"] and "modes_left_out" not in llama


def test_a_run_too_large_for_the_gpu_is_refused_naming_the_figures():
    cfg = from_file(CONFIGS["llama-3.1-8b"])
    buckets = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    req = validate_request(cfg, [1, 8, 64, 256], "all", buckets, 100, 10)
    need = check_memory(cfg, req, free_bytes=80 * GB)  # an H100
    # Weights (8.03 B parameters in bf16) and the KV pool of 256 sequences of 512 tokens are in it.
    assert need.parts["weights"] == cfg.n_params * 2 and 16.0 * GB < need.parts["weights"] < 16.1 * GB
    assert need.parts["KV pool"] == 2 * 32 * 1024 * 2 * (256 * 512 + 16)
    with pytest.raises(ValueError, match=r"llama-3.1-8b at 256 rows is too large .* GB is free"):
        check_memory(cfg, req, free_bytes=40 * GB)
    said = []
    check_memory(cfg, {**req, "reference": "hf"}, free_bytes=80 * GB, say=said.append)
    assert len(said) == 1 and "Hugging Face reference" in said[0]
    # The footprint grows with the batch: the same model at batch 1 fits in 40 GB.
    small = validate_request(cfg, [1], ["eager", "fused+graph"], [1], 100, 10)
    assert footprint.check_fits(cfg, 1, small["modes"], 40 * GB).total < 30 * GB


# ---- Llama 3's RoPE scaling ---------------------------------------------------------------------------------
def test_llama3_scaling_keeps_short_wavelengths_divides_long_ones_and_blends_between():
    cfg = from_file(CONFIGS["llama-3.1-8b"])
    scaling = cfg.rope_scaling  # factor 8, low 1, high 4, original 8192
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
    scaled = llama3_scaled(inv_freq, scaling)
    wavelength = 2 * torch.pi / inv_freq
    short, long = wavelength < 8192 / 4, wavelength > 8192 / 1
    assert short.any() and long.any() and (~short & ~long).any()
    assert torch.equal(scaled[short], inv_freq[short])
    assert torch.allclose(scaled[long], inv_freq[long] / 8, rtol=1e-15)  # float64 division, exact to rounding
    between = ~short & ~long
    assert bool(((scaled[between] < inv_freq[between]) & (scaled[between] > inv_freq[between] / 8)).all())
    # The tables every path reads carry it: a config's RoPE differs from its unscaled twin only in the long
    # wavelengths (at position 31, cos of the unscaled lowest frequency is ~1 - 1e-11: compared exactly).
    cos, _ = rope_tables(narrow(cfg))
    plain, _ = rope_tables(replace(narrow(cfg), rope_scaling=None))
    assert torch.equal(cos[:, short], plain[:, short]) and not torch.equal(cos[:, ~short], plain[:, ~short])


def test_llama3_scaling_matches_transformers():
    pytest.importorskip("transformers")
    from gpu_probe.hf_reference import model_from_config

    cfg = narrow(from_file(CONFIGS["llama-3.2-1b"]))
    hf = model_from_config(hf_config_dict(cfg), "cpu")
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
    # transformers keeps inv_freq in fp32: agreement to fp32's rounding.
    assert torch.allclose(
        hf.model.rotary_emb.inv_freq.double(), llama3_scaled(inv_freq, cfg.rope_scaling), rtol=1e-6
    )


# ---- the probe's checks, in the interpreter -------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny ops on a shared 2-core box: more threads only spin against each other.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_passes_the_probe_checks_on_cpu(name):
    """Fused == unfused, graph == eager (bucket 2, batch 1 padded) with the KV canary quiet, and the padding
    assertion and canary firing for the padded size with the bug on (the session's checks, `use_graphs=False`)."""
    cfg = narrow(from_file(CONFIGS[name]))
    model, batch = built(cfg, 2)
    fused = check_fused_vs_unfused(model, batch, sizes=(2,))["fused_vs_unfused"]
    assert fused["passed"], fused
    runner = GraphRunner(model, buckets=(2,), use_graphs=False)
    checks = check_graph_vs_eager(runner, model, batch)
    assert checks["graph_vs_eager"]["passed"] and checks["kv_canary"]["passed"], checks
    pad = check_padding_assertion(runner, batch)["padding_assertion"]
    assert pad["passed"] and pad["fired_with_bug"] == 1 and pad["canary_fired"] == [1], pad


def test_the_fused_path_without_the_bias_fails_the_check_on_cpu():
    """The check above can fail: the bias is large enough that a fused step dropping it is caught."""
    cfg = narrow(from_file(CONFIGS["qwen2.5-0.5b"]))
    model, batch = built(cfg, 2)
    for layer in model.layers:
        layer.b_qkv.zero_()
    assert not check_fused_vs_unfused(model, batch, sizes=(2,))["fused_vs_unfused"]["passed"]


# ---- CUDA ---------------------------------------------------------------------------------------------------
cuda = pytest.mark.cuda


@cuda
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_passes_the_probe_checks_on_cuda(name):
    """Full width, bf16, four layers (the 8B's 32 take a minute to draw): fused == unfused at 1, 8 and 64 rows
    (GEMV, tile) and 80 (the wide path, cuBLAS GEMMs with the bias added in the attention), then captured
    graphs == eager per bucket with the canary quiet, and the padding assertion."""
    cfg = replace(from_file(CONFIGS[name]), n_layers=4)
    model, batch = built(cfg, 80, device="cuda")
    fused = check_fused_vs_unfused(model, batch, sizes=(1, 8, 64, 80))["fused_vs_unfused"]
    assert fused["passed"], fused
    runner = GraphRunner(model, buckets=(1, 2, 4, 8, 16, 64, 80))
    checks = check_graph_vs_eager(runner, model, batch)
    assert checks["graph_vs_eager"]["passed"] and checks["kv_canary"]["passed"], checks
    assert check_padding_assertion(runner, batch)["padding_assertion"]["passed"]


@cuda
@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.2-1b", "mistral-7b-v0.3"])
def test_the_persistent_kernel_runs_each_config_it_accepts_on_cuda(name):
    from gpu_probe.kernels.persistent import MAX_ROWS, PersistentDecoder
    from gpu_probe.measure import logit_tolerance

    cfg = replace(from_file(CONFIGS[name]), n_layers=4)
    model, batch = built(cfg, MAX_ROWS, device="cuda")
    decoder = PersistentDecoder(model)
    for n in (1, MAX_ROWS):
        before = model.kv_cache.kv.clone()
        fused = model.fused_forward(batch.head(n)).clone()
        model.kv_cache.kv.copy_(before)
        out = decoder(batch.head(n))
        decoder.check_error()
        assert rel_err(out, fused) <= logit_tolerance(model), (name, n)


def decode_tokens(model: ProbeModel, ids: list[int], fused: bool) -> torch.Tensor:
    """The logits after the last of `ids`, decoded one token at a time from an empty sequence (the probe has no
    prefill: each step writes its token's K and V and attends over those before it)."""
    cache = model.kv_cache
    seq = cache.add_sequence(0)
    model.fused = fused
    with torch.no_grad():
        for token in ids:
            inputs = DecodeBatch(torch.tensor([token], device=model.device), **cache.decode_inputs([seq]))
            logits = model(inputs)
    cache.free(seq)
    return logits[0].float()


@cuda
@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3.1-8b", "mistral-7b-v0.3"])
def test_the_probe_and_transformers_agree_on_a_config_on_cuda(name):
    """The probe's step (unfused and fused) and Hugging Face's model of the same config (`--reference hf`'s),
    with the same weights, 200 tokens in: Qwen2's bias, Llama 3.1's RoPE scaling and Mistral's theta are
    theirs. Two layers at a narrow width (the head dim and group kept) in fp32, where the paths agree to
    ~1e-6 and a RoPE without the scaling misses by more than 1e-3 (checked below)."""
    pytest.importorskip("transformers")
    from gpu_probe.hf_reference import model_from_config

    cfg = replace(narrow(from_file(CONFIGS[name]), max_context=256), n_layers=2, vocab=512, ffn=256)
    ids = torch.randint(0, cfg.vocab, (200,), generator=torch.Generator().manual_seed(0))
    theirs = model_from_config(hf_config_dict(cfg), "cuda", dtype=torch.float32)
    blocks = 1 + cfg.max_context // cfg.block_size  # one sequence of up to max_context tokens
    ours = ProbeModel(cfg, device="cuda", num_blocks=blocks)
    _copy_weights(ours, theirs)
    with torch.no_grad():
        want = theirs(ids[None].cuda()).logits[0, -1].float()
    for fused in (False, True):
        assert rel_err(decode_tokens(ours, ids.tolist(), fused), want) < 1e-4, (name, fused)
    if cfg.rope_scaling is not None:  # the comparison sees the scaling
        unscaled = ProbeModel(replace(cfg, rope_scaling=None), device="cuda", num_blocks=blocks)
        assert rel_err(decode_tokens(unscaled, ids.tolist(), False), want) > 1e-3


def _copy_weights(ours: ProbeModel, theirs) -> None:
    """The probe's weights into Hugging Face's model (both nn.Linear's [out, in] layout)."""
    m = theirs.model
    with torch.no_grad():
        m.embed_tokens.weight.copy_(ours.tok_embeddings)
        m.norm.weight.copy_(ours.final_norm)
        theirs.lm_head.weight.copy_(ours.lm_head)  # the embedding again where tied
        for mine, layer in zip(ours.layers, m.layers):
            a = layer.self_attn
            for proj, w in ((a.q_proj, "q"), (a.k_proj, "k"), (a.v_proj, "v")):
                proj.weight.copy_(getattr(mine, f"w{w}"))
                if proj.bias is not None:
                    proj.bias.copy_(getattr(mine, f"b{w}"))
            a.o_proj.weight.copy_(mine.wo)
            layer.mlp.gate_proj.weight.copy_(mine.w_gate)
            layer.mlp.up_proj.weight.copy_(mine.w_up)
            layer.mlp.down_proj.weight.copy_(mine.w_down)
            layer.input_layernorm.weight.copy_(mine.attn_norm)
            layer.post_attention_layernorm.weight.copy_(mine.ffn_norm)
