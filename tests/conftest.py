"""Shared test plumbing: CUDA detection, Triton's CPU interpreter, the cuda marker, and the page
tests' fixtures (tests/app_pages.py)."""

import os

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        # The CPU tests' tensors are tiny: on the shared 2-core box more intra-op threads only spin
        # against each other and the other processes (the probe tests ran about 13 % faster on one).
        torch.set_num_threads(1)
        return False
    return True


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
