"""Warp structures built before a capture (``wp.Mesh``): what replays, what is refused, and with which words.

Programs: ``tests/handles_program.py``, captured at test time with stock Warp and with
``wrpkit.capture``.  The truth is the same step run eagerly.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from proc_helpers import TESTS_DIR, run, wrp

PROGRAM = TESTS_DIR / "handles_program.py"


@pytest.fixture(scope="module")
def eager(tmp_path_factory) -> np.ndarray:
    d = tmp_path_factory.mktemp("eager")
    r = run(sys.executable, PROGRAM, "handle", "eager", d / "truth.npz")
    assert r.returncode == 0, r.stderr
    return np.load(d / "truth.npz")["out"]


@pytest.mark.parametrize("how", ["stock", "wrpkit"])
def test_a_mesh_passed_as_a_handle_replays_as_the_live_step(tmp_path, eager, how):
    path = tmp_path / "mesh.wrp"
    r = run(sys.executable, PROGRAM, "handle", how, path)
    assert r.returncode == 0, r.stdout + r.stderr
    got = tmp_path / "got.npz"
    r = wrp("replay", path, "--output", got)
    assert r.returncode == 0, r.stderr
    assert np.load(got)["out"].view(np.uint8).tobytes() == eager.view(np.uint8).tobytes()


def test_wrpkit_refuses_to_save_a_mesh_id_passed_as_uint64_and_names_the_line(tmp_path):
    path = tmp_path / "raw.wrp"
    r = run(sys.executable, PROGRAM, "uint64", "wrpkit", path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "REFUSED" in r.stdout and "closest" in r.stdout and "argument 0 (mesh)" in r.stdout
    assert "declare that kernel argument `wp.handle`" in r.stdout
    assert not path.exists() and not (tmp_path / "raw_modules").exists()


@pytest.mark.slow  # more than 3 s on two cores: the full suite runs it
def test_a_stock_raw_mesh_id_gets_one_hint_and_one_exit_code_everywhere(tmp_path):
    path = tmp_path / "raw.wrp"
    r = run(sys.executable, PROGRAM, "uint64", "stock", path)
    assert r.returncode == 0, r.stderr
    replay = wrp("replay", path)
    check = wrp("check", path)
    check_json = json.loads(wrp("check", path, "--json").stdout)
    assert replay.returncode == check.returncode == 3
    hint = "declare that kernel argument `wp.handle` instead of `wp.uint64`"
    assert hint in " ".join(replay.stderr.split()) and hint in " ".join(check.stdout.split())
    lint = [f for f in check_json["findings"] if f["check"] == "lint-pointer"]
    assert lint and hint in lint[0]["fix"]
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    native = run(native_paths().require_replayer(), path)
    assert native.returncode == 3 and hint in " ".join(native.stderr.split())


@pytest.mark.slow  # captures a mesh twice (about 4 s)
def test_mesh_refit_inside_a_cpu_capture_is_named_by_capture_and_check(tmp_path):
    path = tmp_path / "refit.wrp"
    r = run(sys.executable, "-W", "always", PROGRAM, "handle", "wrpkit", path, "refit")
    assert r.returncode == 0, r.stderr
    src = PROGRAM.read_text().splitlines()
    line = next(n for n, t in enumerate(src, 1) if t.strip() == "mesh.refit()")
    assert f"Mesh.refit() at {PROGRAM}:{line} in step() ran during this CPU capture" in " ".join(r.stderr.split())
    d = json.loads(wrp("check", path, "--json").stdout)
    found = [f for f in d["findings"] if f["check"] == "lint-unrecorded"]
    assert len(found) == 1 and f"Mesh.refit() at handles_program.py:{line} in step()" in found[0]["message"]
    assert found[0]["status"] == "warn"
    # A stock capture of the same step cannot know; check says so for a capture that uses meshes.
    stock = tmp_path / "refit_stock.wrp"
    assert run(sys.executable, PROGRAM, "handle", "stock", stock, "refit").returncode == 0
    d = json.loads(wrp("check", stock, "--json").stdout)
    found = [f for f in d["findings"] if f["check"] == "lint-unrecorded"]
    assert len(found) == 1 and "uses 1 wp.Mesh" in found[0]["message"]
    # A clean wrpkit capture has no such finding.
    clean = tmp_path / "clean.wrp"
    assert run(sys.executable, PROGRAM, "handle", "wrpkit", clean).returncode == 0
    d = json.loads(wrp("check", clean, "--json").stdout)
    assert not [f for f in d["findings"] if f["check"] == "lint-unrecorded"]
