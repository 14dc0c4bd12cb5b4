"""Shared by the tests of ``wrp check`` (inspect_validate_check/test_check.py) and of replay containment
(replay/test_contain.py): ``wrp check --json`` in this process, and a stock capture that passes a live
HashGrid id as a ``uint64`` (what the portability lint flags)."""

from __future__ import annotations

import json

import warp as wp
from click.testing import CliRunner

from wrpkit.cli import main


def run_check(path, *args):
    """``wrp check PATH --json ARGS``: ``(exit code, the JSON report)``."""
    res = CliRunner().invoke(main, ["check", str(path), "--json", *args])
    data = json.loads(res.stdout)
    return res.exit_code, data


@wp.kernel
def k_uses_grid_id(grid: wp.uint64, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = float(i)


def stock_grid_capture():
    """A plain wp.capture_begin graph that passes a live HashGrid id as uint64; returns (graph, out, grid)."""
    wp.init()  # HashGrid needs the runtime, which a launch would otherwise start
    grid = wp.HashGrid(4, 4, 4, device="cpu")
    out = wp.zeros(4, dtype=wp.float32, device="cpu")
    wp.capture_begin("cpu", apic=True)
    wp.launch(k_uses_grid_id, dim=4, inputs=[grid.id, out], device="cpu")
    return wp.capture_end(), out, grid
