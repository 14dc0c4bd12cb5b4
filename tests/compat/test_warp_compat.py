"""Never over-refuse: every file stock Warp's own APIC tests save and stock Warp loads (issue 23, item 5).

Opt-in and slow (several minutes: it runs the wheel's ``warp/tests/test_apic*.py``
on the CPU, then every wrpkit route on each file they saved)::

    WRPKIT_WARP_COMPAT=1 .venv/bin/pytest -q tests/compat/test_warp_compat.py

See tests/warp_compat.py for how the files are kept and replayed.
tests/warp_compat_cases.txt lists the Warp tests whose saves stock Warp loads
(with how many files each), as the suite found them with warp-lang 1.19.0;
refresh it with ``python tests/warp_compat.py list KEEP_DIR`` after a run
that keeps its folder (``WRPKIT_WARP_COMPAT_KEEP=DIR``).

The quick test below runs always: the five files the issue names (a graph
saved more than once repeats its binding names) are made here the way Warp's
tests make them and must be accepted by every route.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import warp_compat as wc
from proc_helpers import ROOT, TESTS_DIR

pytestmark = pytest.mark.slow  # runs the wheel's own APIC tests, then every route on each file

CASES_FILE = TESTS_DIR / "warp_compat_cases.txt"


def _script(*args, cwd=None, timeout=3000):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(TESTS_DIR / "warp_compat.py"), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


@pytest.mark.skipif(not os.environ.get("WRPKIT_WARP_COMPAT"), reason="opt-in: set WRPKIT_WARP_COMPAT=1 (slow)")
def test_every_file_stock_warp_loads_is_accepted_and_replayed_identically(tmp_path, replayer):
    keep = Path(os.environ.get("WRPKIT_WARP_COMPAT_KEEP") or tmp_path / "keep")
    p = _script("collect", keep, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((keep / "cases.json").read_text())
    assert summary["failures"] == 0 and summary["errors"] == 0, "Warp's own tests failed on this machine"
    p = _script("stock-all", keep, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    p = _script("check-all", keep, replayer, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    # The suite did not shrink: every Warp test of the committed list still saves a file stock Warp loads.
    found = {line.split()[0] for line in wc.case_list(keep).splitlines()}
    listed = {line.split()[0] for line in CASES_FILE.read_text().splitlines() if line.strip()}
    assert listed <= found, f"Warp tests that no longer save a loadable file: {sorted(listed - found)}"


def test_the_committed_list_names_the_cases_the_issue_names():
    listed = dict(line.split() for line in CASES_FILE.read_text().splitlines() if line.strip())
    assert listed["warp.tests.test_apic_mesh.TestApicMesh.test_load_rejects_out_of_bounds_handle_locations"] == "6"
    assert "warp.tests.test_apic.TestApic.test_capture_save_failed_overwrite_remains_replayable_cpu" in listed


def test_a_graph_saved_over_and_over_is_accepted_by_every_route(tmp_path, replayer):
    """What test_load_rejects_out_of_bounds_handle_locations does before it edits each file: six saves of one
    empty graph with outputs={"handles": ...}; the later files repeat the name (Warp's state keeps every save's)."""
    import warp as wp  # noqa: PLC0415

    handles = wp.zeros(2, dtype=wp.handle, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        pass
    paths = []
    for i in range(4):
        d = tmp_path / f"save{i}"
        d.mkdir()
        wp.capture_save(capture.graph, str(d / "capture.wrp"), outputs={"handles": handles})
        paths.append(d)
    last = paths[-1]
    stock = wc.stock_replay(last / "capture.wrp", last / "stock.npz")
    assert stock["loaded"], stock
    (last / "stock.json").write_text(json.dumps(stock))
    from wrpkit.formats import wrp1  # noqa: PLC0415

    names = [b.name for b in wrp1.decode_wrp1((last / "capture.wrp").read_bytes()).bindings]
    assert names == ["handles"] * 4  # the repetition this test is about
    res = wc.check_case(last, replayer)
    assert res["ok"], res["problems"]
    assert res["warnings"], "a repeated binding name is reported as a warning"
    with np.load(last / "stock.npz") as z:
        assert z["handles"].nbytes == 16
