"""Warp's own examples as a compatibility suite (issue 38, item 1): tools/warp_examples_compat.py.

The full run is opt-in and slow (about an hour on 2 cores: every ``example_*.py`` of
the wheel is built on the CPU, one step captured with stock Warp, replayed by stock
Warp in a fresh process as the truth, then every wrpkit route run on it)::

    WRPKIT_WARP_EXAMPLES=1 .venv/bin/pytest -q tests/compat/test_warp_examples.py

It asserts that every route passes on every example that stock Warp captures and
replays (skipped examples say why in the matrix; ``docs/warp-examples.md`` is the
last run's matrix).  The quick test below runs always: the tool on one small core
example, so that the tool itself does not rot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from proc_helpers import ROOT

TOOL = ROOT / "tools" / "warp_examples_compat.py"

#: The fastest core example that captures on the CPU (a 128x128 wave grid, two kernels).
SMALL_EXAMPLE = "core/example_wave"


def _tool(*args, timeout=7200):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


def _failures(matrix: dict) -> list:
    return [f"{e['example']} / {r}: {v['reason']} ({v['command']})"
            for e in matrix["examples"] if e["status"] == "ran"
            for r, v in e["routes"].items() if v["verdict"] == "FAIL"]


def test_the_tool_finds_the_wheels_examples():
    p = _tool("--list", timeout=120)
    assert p.returncode == 0, p.stderr
    names = p.stdout.split()
    assert SMALL_EXAMPLE in names
    assert len(names) >= 40 and all("/example_" in n for n in names)


@pytest.mark.slow  # every route on one example (about 12 s)
def test_every_route_passes_on_one_small_example(tmp_path):
    out = tmp_path / "matrix.json"
    md = tmp_path / "matrix.md"
    p = _tool("--only", SMALL_EXAMPLE, "--json", out, "--markdown", md, "--keep", tmp_path / "keep", timeout=600)
    matrix = json.loads(out.read_text())
    (case,) = matrix["examples"]
    assert case["status"] == "ran", case["reason"]
    assert set(case["routes"]) == set(matrix["routes"])
    assert not _failures(matrix), _failures(matrix)
    assert all(v["verdict"] == "pass" for v in case["routes"].values()), case["routes"]
    assert case["bindings"] == ["sim_grid0", "sim_grid1", "sim_verts"]  # the state rule
    assert p.returncode == 0, p.stderr[-3000:]
    text = md.read_text()
    assert f"`{SMALL_EXAMPLE}`" in text and matrix["warp"] in text
    assert (tmp_path / "keep" / "core__example_wave" / "stock.npz").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("WRPKIT_WARP_EXAMPLES"),
                    reason="opt-in: set WRPKIT_WARP_EXAMPLES=1 (runs every Warp example, about an hour)")
def test_every_route_passes_on_every_example_stock_warp_captures_and_replays(tmp_path):
    keep = Path(os.environ.get("WRPKIT_WARP_EXAMPLES_KEEP") or tmp_path / "keep")
    out = tmp_path / "matrix.json"
    p = _tool("--jobs", "2", "--json", out, "--markdown", tmp_path / "matrix.md", "--keep", keep)
    matrix = json.loads(out.read_text())
    ran = [e for e in matrix["examples"] if e["status"] == "ran"]
    assert ran, "no example was captured and replayed by stock Warp"
    assert not _failures(matrix), "\n".join(_failures(matrix))
    assert p.returncode == 0, p.stderr[-3000:]
