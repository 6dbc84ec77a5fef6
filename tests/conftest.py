"""Shared test plumbing: CUDA detection, Triton's CPU interpreter, the cuda marker, and the page
tests' fixtures (tests/app_pages.py)."""

import importlib.util
import os
import re
from pathlib import Path

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


# The page's packages: the GPU machine has torch and transformers but neither of these, so a test module that
# imports them (or the page's `ui`, which does) is not collected there rather than failing to import.
_PAGE_PACKAGES = ("streamlit", "plotly")


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):  # blocked (sys.modules[name] = None) or broken
        return True


_MISSING = [name for name in _PAGE_PACKAGES if _missing(name)]
_NEEDS_PAGE = re.compile(r"^\s*(?:import|from)\s+(?:streamlit|plotly|ui|app_pages)\b", re.MULTILINE)
_TEST_IMPORT = re.compile(r"^\s*from\s+(test_\w+|\w+_corpus|\w+_fuzz)\s+import", re.MULTILINE)


def _needs_page(path: Path, seen: set) -> bool:
    """Whether the module at `path`, or a test module it imports from, imports the page's packages."""
    if path in seen or not path.is_file():
        return False
    seen.add(path)
    source = path.read_text(encoding="utf-8")
    if _NEEDS_PAGE.search(source):
        return True
    return any(_needs_page(path.with_name(f"{name}.py"), seen) for name in _TEST_IMPORT.findall(source))


def pytest_ignore_collect(collection_path: Path, config):
    if not _MISSING or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    try:
        return True if _needs_page(collection_path, set()) else None
    except OSError:
        return None
