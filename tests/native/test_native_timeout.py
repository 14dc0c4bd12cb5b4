"""wrp-replay --timeout: a valid file whose WHILE loops never end in practice
(tests/replay_cases.py endless_while) is stopped, a normal replay is not
disturbed, and the value is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from native_helpers import ROOT, WARP_BIN, run

pytestmark = pytest.mark.slow  # every test here builds native/ with CMake first


NATIVE_TIMEOUT_MESSAGE = "the replay did not finish within 1 s (a WHILE loop that does not end?); no output was written"


def _endless(caps, dst_dir) -> Path:
    import replay_cases  # noqa: PLC0415

    path = replay_cases.rewrite_capture(caps["capture_while"], dst_dir, replay_cases.endless_while)
    py_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-m", "wrpkit.cli", "validate", str(path)], capture_output=True, text=True,
                         env=py_env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr  # structurally valid: only a timeout can stop it
    return path


def test_timeout_stops_an_endless_while(native, caps, tmp_path):
    path = _endless(caps, tmp_path / "f")
    run(native.exe, path, "--list", check_rc=0)
    for extra in ([], ["--json"]):
        out_dir = tmp_path / f"o{len(extra)}"
        out_dir.mkdir()
        t0 = time.monotonic()
        res = run(native.exe, path, "--timeout", "1", "--output", f"counter={out_dir / 'out.npy'}", "--output",
                  f"x={out_dir / 'x.npy'}", "--warp-lib-dir", WARP_BIN, *extra, check_rc=124)
        assert time.monotonic() - t0 < 30
        assert f"wrp-replay: error: {NATIVE_TIMEOUT_MESSAGE}\n" == res.stderr, res.stderr
        if extra:
            assert json.loads(res.stdout) == {"error": NATIVE_TIMEOUT_MESSAGE, "exit_code": 124}
        else:
            assert res.stdout == ""
        assert list(out_dir.iterdir()) == [], "no output and no temporary file may be left"


def test_timeout_stops_an_endless_while_through_wrp_engine_native(native, caps, tmp_path):
    path = _endless(caps, tmp_path / "f")
    work, tmp = tmp_path / "o", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    env = {**os.environ, "WRP_REPLAY": str(native.exe), "TMPDIR": str(tmp),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "wrpkit.cli", "replay", str(path), "--engine", "native", "--timeout",
                          "1", "--output", "out.npz"], capture_output=True, text=True, env=env, cwd=work, timeout=120)
    assert time.monotonic() - t0 < 30
    assert res.returncode == 124, (res.returncode, res.stdout, res.stderr)
    assert f"error: {NATIVE_TIMEOUT_MESSAGE}" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == [], "no output and no temporary file may be left"


def test_timeout_does_not_disturb_a_normal_replay(native, caps, tmp_path):
    name = "capture_while" if "capture_while" in caps else "local_saxpb"
    binding = "x" if name == "capture_while" else "y"
    outs = []
    for extra in ([], ["--timeout", "30"]):
        out = tmp_path / f"out{len(extra)}.npy"
        res = run(native.exe, caps[name], "--output", f"{binding}={out}", "--warp-lib-dir", WARP_BIN, *extra,
                  check_rc=0)
        assert "error" not in res.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out0.npy", "out2.npy"]


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf", ""])
def test_timeout_must_be_a_positive_number(native, caps, value, tmp_path):
    out = tmp_path / "y.npy"
    res = run(native.exe, caps["local_saxpb"], "--timeout", value, "--output", f"y={out}", "--warp-lib-dir", WARP_BIN,
              check_rc=2)
    assert "--timeout needs a number of seconds above 0" in res.stderr, res.stderr
    assert not out.exists()
