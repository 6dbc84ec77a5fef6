"""Shared test plumbing: CUDA detection, Triton's CPU interpreter, the cuda marker, and the page
tests' fixtures (tests/app_pages.py)."""

import os

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _cuda_available()

# Without a GPU the probe's Triton kernels still run, on the CPU, through Triton's
# interpreter. It must be chosen before triton is first imported.
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The page starts fitting the shipped run in a background process (ui/calibration_cache.py); tests
# that count fits want them inline. tests/test_app_calibrate.py tests the background fit itself.
os.environ.setdefault("LAUNCH_BOUND_NO_PREFIT", "1")

pytest_plugins = ["app_pages"]  # the `recorded` fixture


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
