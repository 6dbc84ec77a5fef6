"""One name per mode (issue 36, item 4): in the code, a mode of several words is written as `Mode.name`
("fused+graph": files, keys, URLs, the CLI) or as `Mode.title` ("fusion + graphs": the page), and nowhere in any
other spelling. `Mode.slug` ("fused_graph", for file names) is derived from the name, never typed.

The check reads every string literal of the product's code (f-strings' constant parts and docstrings included)
and looks for the words of each such mode joined in any other way: another separator, another word form
("fusion"/"fused", "graphs"/"graph"/"CUDA graph"), capitals."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from core.step_plan import MODES, TITLE_WORDS

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("app.py", "core", "sim", "ui", "gpu_probe", "bench", "tools")

# Spellings that stay, each with why. A recorded GPU result of 2026-12-03 spells the persistent mode so; reading it
# needs the old name until it is re-recorded on a GPU (bench/persistent_speed.py maps it to today's name).
# `Mode.slug`'s docstring shows what it gives.
KNOWN = {("bench/persistent_speed.py", "persistent+graph"), ("core/step_plan.py", "fused_graph")}

# The word forms a mode's words are written in, loosely: "fused" as "fusion", "graph" as "graphs" or "CUDA graph".
WORD_FORMS = {
    "fused": r"fus(?:ed|ion)",
    "graph": r"(?:cuda\s*)?graphs?",
    "persistent": r"persistent(?:\s+kernel)?",
}


def _forms(word: str) -> str:
    return (
        WORD_FORMS.get(word, re.escape(word))
        if word in WORD_FORMS
        else re.escape(TITLE_WORDS.get(word, word))
    )


def _variant_pattern(words: list[str]) -> re.Pattern:
    """The words in order, joined by '+', '_' or '-' (spaces around it or not), in any case. Prose that joins them
    with 'and' ("kernel fusion and CUDA graphs") names the two techniques, not the mode, and is left alone."""
    joined = r"\s*[+_-]\s*".join(_forms(w) for w in words)
    return re.compile(rf"(?<![a-z]){joined}(?![a-z])", re.IGNORECASE)


# One pattern for each mode of several words, plus the two former modes' words the tools once wrote.
PATTERNS = {m.name: _variant_pattern(m.name.split("+")) for m in MODES.values() if "+" in m.name}
PATTERNS["persistent+graph"] = _variant_pattern(["persistent", "graph"])


def _strings(path: Path):
    """(line, text) of every string constant in a module, f-strings' constant parts included."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _product_files() -> list[Path]:
    files = []
    for part in PRODUCT:
        path = ROOT / part
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f for f in files if ".venv" not in f.parts]


def misspellings() -> list[str]:
    # A title may open a sentence.
    allowed = {m.name for m in MODES.values()} | {
        t for m in MODES.values() for t in (m.title, m.title.capitalize())
    }
    found = []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, text in _strings(path):
            for name, pattern in PATTERNS.items():
                for match in pattern.finditer(text):
                    spelled = match.group(0)
                    if spelled in allowed or (rel, spelled) in KNOWN:
                        continue
                    found.append(f"{rel}:{line}: {spelled!r} (mode {name})")
    return found


def misspellings_in_docs() -> list[str]:
    """The same check over the README and docs/: prose too names a mode by its title (or its name as code)."""
    allowed = {m.name for m in MODES.values()} | {
        t for m in MODES.values() for t in (m.title, m.title.capitalize())
    }
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name, pattern in PATTERNS.items():
                found += [
                    f"{path.relative_to(ROOT).as_posix()}:{number}: {m.group(0)!r} (mode {name})"
                    for m in pattern.finditer(line)
                    if m.group(0) not in allowed
                ]
    return found


def test_the_readme_and_docs_spell_each_mode_one_way():
    found = misspellings_in_docs()
    assert not found, "other spellings of a mode than its name and its title:\n" + "\n".join(found)


def test_every_mode_has_one_spelling_in_the_code():
    found = misspellings()
    assert not found, "other spellings of a mode than its name and its title:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    ["fused + graph at batch 1", "Fused + CUDA graph", "fusion_graphs", "fused_graph_b1", "Fused-graph"],
)
def test_the_check_sees_each_kind_of_other_spelling(text):
    assert PATTERNS["fused+graph"].search(text)


@pytest.mark.parametrize(
    "text",
    ["fused+graph", "fusion + graphs", "fused kernels replayed as a graph", "kernel fusion and CUDA graphs"],
)
def test_the_check_leaves_the_name_the_title_and_prose_alone(text):
    match = PATTERNS["fused+graph"].search(text)
    assert match is None or match.group(0) in {"fused+graph", "fusion + graphs"}
