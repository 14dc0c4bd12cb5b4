"""A command line that tells the truth, the same way everywhere (issue 13, items 4-8).

Every test runs the real programs (``wrp`` as ``python -m wrpkit.cli`` and the
installed ``wrp-replay``) on real captures made by stock Warp at test time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import child_pids, interruptible
from proc_helpers import ROOT, wrp_module as wrp  # ``wrp ARGS`` in a fresh process, as a user runs it

import replay_cases as rc
import warp as wp
from wrpkit.errors import EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_USAGE

WARP_BIN = Path(wp.__file__).parent / "bin"
CUDA_WARNING = "Could not find or load the NVIDIA CUDA driver"


def native(exe, *args, env=None, timeout=300):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory) -> Path:
    """samples/saxpy.py run as a user runs it (stock capture_save; y is input and output)."""
    out = tmp_path_factory.mktemp("saxpy")
    subprocess.run([sys.executable, str(ROOT / "samples" / "saxpy.py"), str(out)], check=True, capture_output=True)
    return out / "saxpy.wrp"


def _other_version(src: Path, dst_dir: Path) -> Path:
    return rc.rewrite_capture(src, dst_dir, lambda p: setattr(p, "warp_version", "1.18.2"))


def _json_error(stdout: str) -> dict:
    """The one JSON object a --json failure prints (the last line: wrp check/validate print an indented report)."""
    text = stdout.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.splitlines()[-1])


# ---------------------------------------------------------------------------
# 4. One exit-code table, every route
# ---------------------------------------------------------------------------


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_each_failure_class_has_one_exit_code_in_every_route(saxpy, replayer, tmp_path):
    old = _other_version(saxpy, tmp_path / "old")
    missing = tmp_path / "missing.wrp"
    ro = tmp_path / "ro"
    ro.mkdir()
    # A directory nobody can write: mode 0555, or for root (who ignores modes) sysfs, which refuses new files.
    if os.geteuid() == 0:
        ro = Path("/sys")
    else:
        ro.chmod(0o555)
    routes = {
        "wrp replay": lambda f, *a: wrp("replay", f, *a),
        "wrp replay --engine native": lambda f, *a: wrp("replay", f, "--engine", "native", *a),
        "wrp-replay": lambda f, *a: native(replayer, f, *[x.replace("--output=", "--output=y=") for x in a]),
    }
    cases = [  # (failure class, file, extra args, exit code, words in the message)
        ("Warp version mismatch", old, [], EXIT_INVALID, "1.18.2"),
        ("missing file", missing, [], EXIT_USAGE, "missing.wrp"),
        ("wrong device", saxpy, ["--device", "cuda:0"], EXIT_USAGE, "cuda"),
    ]
    for route, run in routes.items():
        for what, f, extra, code, words in cases:
            p = run(f, *extra)
            assert p.returncode == code, (route, what, p.returncode, p.stderr)
            assert words in p.stderr and "Traceback" not in p.stderr, (route, what, p.stderr)
        ext = ".npy" if route == "wrp-replay" else ".npz"
        p = run(saxpy, f"--output={ro / ('out' + ext)}")
        assert p.returncode == EXIT_FAILED, (route, p.returncode, p.stderr)
        assert "cannot write" in p.stderr and "internal error" not in p.stderr, (route, p.stderr)
    # wrp check says the same for the same failures.
    assert wrp("check", old).returncode == EXIT_INVALID
    assert wrp("check", missing).returncode == EXIT_USAGE
    assert wrp("check", saxpy, "--device", "cuda:0").returncode == EXIT_USAGE
    p = wrp("convert", saxpy, ro / "x.wrpk")
    assert p.returncode == EXIT_FAILED and "cannot write" in p.stderr, p.stderr
    # One table, documented in both programs' --help.
    for text in (wrp("--help").stdout, native(replayer, "--help").stdout):
        for code_, meaning in EXIT_CODES.items():
            assert f"{code_:<4} {meaning}" in text, (code_, text)


# ---------------------------------------------------------------------------
# 5. --json: JSON on stdout, failures included; summary timings
# ---------------------------------------------------------------------------


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_json_failures_are_json_on_stdout_in_every_command(saxpy, tmp_path):
    missing = tmp_path / "nope.wrp"
    cases = [
        (["inspect", missing, "--json"], EXIT_USAGE),
        (["validate", missing, "--json"], EXIT_USAGE),
        (["check", missing, "--json"], EXIT_USAGE),
        (["convert", missing, tmp_path / "x.wrpk", "--json"], EXIT_USAGE),
        (["replay", missing, "--json"], EXIT_USAGE),
        (["replay", saxpy, "--bogus", "--json"], EXIT_USAGE),  # click's own usage error
        (["no-such-command", "--json"], EXIT_USAGE),
        (["replay", saxpy, "--input", "zz=nothing.npy", "--json"], EXIT_USAGE),
        (["replay", _other_version(saxpy, tmp_path / "v"), "--json"], EXIT_INVALID),
        (["export-runtime", Path("/sys") / "wrpkit-no-such-dir" if os.geteuid() == 0 else Path("/proc/1/rt"),
          "--json"], EXIT_FAILED),  # a place that takes no new folder (a missing parent is created)
    ]
    for args, code in cases:
        p = wrp(*args)
        assert p.returncode == code, (args, p.returncode, p.stderr)
        obj = _json_error(p.stdout)
        assert obj["exit_code"] == code and obj["error"], (args, p.stdout)
        assert "Traceback" not in p.stderr


def test_native_json_repeat_prints_a_summary_not_every_time(saxpy, replayer):
    p = native(replayer, saxpy, "--repeat", "20000", "--json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["timings"]
    assert "replays_ms" not in t and len(p.stdout) < 4096
    assert t["count"] == 20000
    assert t["min_ms"] <= t["p5_ms"] <= t["median_ms"] <= t["p95_ms"] <= t["max_ms"]
    assert t["min_ms"] <= t["mean_ms"] <= t["max_ms"]
    p = native(replayer, saxpy, "--repeat", "50", "--json", "--raw-times")
    t = json.loads(p.stdout)["timings"]
    assert len(t["replays_ms"]) == 50 and min(t["replays_ms"]) == t["min_ms"]
    p = native(replayer, saxpy, "--repeat", "0", "--json")
    assert p.returncode == EXIT_USAGE and json.loads(p.stdout)["exit_code"] == EXIT_USAGE


# ---------------------------------------------------------------------------
# 6. Output a person can read
# ---------------------------------------------------------------------------


def test_inspect_reads_well(saxpy, tmp_path):
    info = json.loads(wrp("inspect", saxpy, "--json").stdout)
    # One row per binding with its roles: y is saxpy's in-place input and output.
    assert [(b["name"], b["input"], b["output"]) for b in info["bindings"]] == [("x", True, False), ("y", True, True)]
    text = wrp("inspect", saxpy, env=dict(os.environ, COLUMNS="200")).stdout
    rows = [ln for ln in text.splitlines() if ln.startswith(("x ", "y "))]
    assert len(rows) == 2 and "input, output" in rows[1]
    assert "1 op (" in text and "1 kernel," in text and "1 module" in text and "1 kernels" not in text
    assert "target arch: 0 (CPU)" in text and "has adjoint" in text
    assert CUDA_WARNING not in text
    # Sizes agree between convert and inspect.
    p = wrp("convert", saxpy, tmp_path / "s.wrpk")
    assert p.returncode == 0
    size_text = json.loads(wrp("inspect", tmp_path / "s.wrpk", "--json").stdout)["file_size"]
    from wrpkit.cli.output import size  # noqa: PLC0415

    assert f"({'wrpk'}, {size(size_text)}" in p.stdout and size_text == (tmp_path / "s.wrpk").stat().st_size
    # --ops names the binding each pointer argument points to.
    ops = wrp("inspect", saxpy, "--ops", env=dict(os.environ, COLUMNS="200")).stdout
    assert "arg1=touches@r1(x)" in ops and "arg2=touches@r2(y)" in ops and "dim=(1024,)" in ops


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_titles_do_not_wrap_and_numbers_are_not_cut(tmp_path):
    path = rc.wrpkit_capture(rc.program_names()[0])
    wide = wrp("replay", path, "--repeat", "3", env=dict(os.environ, COLUMNS="200")).stdout
    title = next(ln for ln in wide.splitlines() if " on cpu (" in ln)
    assert title.endswith("warmup)"), wide  # the whole title on one line
    narrow = wrp("replay", path, env=dict(os.environ, COLUMNS="80"))
    assert narrow.returncode == 0
    rep = json.loads(wrp("replay", path, "--json").stdout)
    from wrpkit.cli.replay import _fmt  # noqa: PLC0415

    for s in rep["outputs"].values():
        for key in ("min", "max", "mean"):
            if s[key] is not None:
                assert _fmt(s[key]) in narrow.stdout, (key, _fmt(s[key]), narrow.stdout)
    assert all(len(ln) <= 80 for ln in narrow.stdout.splitlines())


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_untyped_bytes_have_no_statistics_and_cpu_work_has_no_cuda_warning(saxpy):
    p = wrp("replay", saxpy, "--json")  # stock file, no inputs: x and y are raw bytes
    assert p.returncode == 0, p.stderr
    y = json.loads(p.stdout)["outputs"]["y"]
    assert y["raw"] is True and y["dtype"] == "raw bytes" and y["min"] is None and y["mean"] is None
    assert CUDA_WARNING not in p.stderr
    text = wrp("replay", saxpy)
    assert "raw bytes" in text.stdout and CUDA_WARNING not in text.stderr
    p = wrp("check", saxpy)
    assert p.returncode == 0 and CUDA_WARNING not in p.stderr + p.stdout


@pytest.mark.slow
def test_capture_saved_twice_is_a_warning_and_resolves_as_warp_does(tmp_path, replayer):
    """Warp's APIC state keeps every save's binding names, so a graph saved twice repeats them.

    Stock Warp loads and replays such a file (a name resolves to its last
    record), so every wrpkit route accepts it with a warning and reads each
    name as Warp's loader does: here ``y`` was saved a second time naming
    another array, and the replayed ``y`` is that array's, as stock Warp's.
    """
    @wp.kernel
    def twice_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = x[i] + 1.0

    x = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    y = wp.zeros(8, dtype=float, device="cpu")
    wp.load_module(device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(twice_k, dim=8, inputs=[x, y], device="cpu")
    graph = wp.capture_end(device="cpu")
    once = tmp_path / "once.wrp"
    wp.capture_save(graph, str(once), inputs={"x": x, "y": y}, outputs={"y": y})
    p = wrp("validate", once)
    assert p.returncode == 0 and "repeat" not in p.stdout + p.stderr, p.stdout + p.stderr
    twice = tmp_path / "twice.wrp"
    wp.capture_save(graph, str(twice), inputs={"x": x}, outputs={"y": x})  # y now names x's region
    p = wrp("validate", twice)
    assert p.returncode == 0 and "binding names repeat" in p.stdout + p.stderr, p.stdout + p.stderr
    assert "Warp uses the last" in p.stdout + p.stderr, p.stdout + p.stderr
    p = native(replayer, twice, "--list")
    assert p.returncode == 0, p.stderr
    # Stock Warp's answer, from its own loader.
    loaded = wp.capture_load(str(twice), device="cpu")
    wp.capture_launch(loaded)
    stock = {n: wp.zeros(8, dtype=float, device="cpu") for n in ("x", "y")}
    for n, a in stock.items():
        loaded.get_param(n, a)
    stock = {n: a.numpy() for n, a in stock.items()}
    assert np.array_equal(stock["y"], stock["x"])  # one region under two names
    for engine in ("python", "native"):
        out = tmp_path / f"{engine}.npz"
        p = wrp("replay", twice, "--engine", engine, "--output", out)
        assert p.returncode == 0, (engine, p.stderr)
        with np.load(out) as z:
            for n in ("x", "y"):
                assert z[n].tobytes() == stock[n].tobytes(), (engine, n, z[n], stock[n])
    p = native(replayer, twice, f"--output=y={tmp_path / 'y.npy'}")
    assert p.returncode == 0, p.stderr
    assert np.load(tmp_path / "y.npy").tobytes() == stock["y"].tobytes()


# ---------------------------------------------------------------------------
# 7. Ctrl-C stops a long replay in the python engine
# ---------------------------------------------------------------------------


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_ctrl_c_stops_a_long_python_replay_and_its_child(tmp_path):
    """Ctrl-C inside Warp's native WHILE loop (which never ends here): exit 130 with one line,
    the replay's child killed, nothing written.  The WHILE never ends, so a replay that waited
    for it would never return: the 30 s bound only keeps a broken build from hanging the run."""
    path = rc.rewrite_capture(rc.stock_capture("capture_while"), tmp_path / "f", rc.endless_while)
    work = tmp_path / "o"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "wrpkit.cli", "replay", str(path), "--engine", "python", "--output",
                             "out.npz", "--json"],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    try:
        kids = []
        for _ in range(600):  # the child is started first; then the parent validates and sends the load
            kids = child_pids(proc.pid, b"wrpkit.run.contain.child") if proc.poll() is None else []
            if kids:
                break
            time.sleep(0.1)
        assert kids, proc.communicate()
        time.sleep(10)  # loaded, validated and deep inside Warp's native WHILE loop (slow machines too)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)  # to the parent only, as the test of trace does
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, (proc.returncode, err)
    assert "interrupted" in err and json.loads(out)["exit_code"] == EXIT_INTERRUPTED
    for k in kids:
        assert not Path(f"/proc/{k}").exists(), "the replay's child outlived the interrupted replay"
    assert list(work.iterdir()) == []


# ---------------------------------------------------------------------------
# 8. wrp-replay on a machine without Python
# ---------------------------------------------------------------------------


def test_exported_runtime_runs_from_a_copy_with_an_empty_environment(saxpy, replayer, tmp_path):
    p = wrp("export-runtime", tmp_path / "rt", "--json")
    assert p.returncode == 0, p.stderr
    files = set(json.loads(p.stdout)["files"])
    assert {"wrp-replay", "warp.so", "warp-clang.so", "README.txt"} <= files
    copy = tmp_path / "elsewhere" / "replayer"
    shutil.copytree(tmp_path / "rt", copy)
    shutil.rmtree(tmp_path / "rt")
    inputs = np.load(saxpy.with_name("saxpy_inputs.npz"))
    expected = np.load(saxpy.with_name("saxpy_expected.npz"))
    for n in ("x", "y"):
        np.save(tmp_path / f"{n}.npy", inputs[n].view(np.uint8))
    args = [saxpy, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
            "--output", f"y={tmp_path / 'out.npy'}"]
    p = subprocess.run(["env", "-i", str(copy / "wrp-replay"), *map(str, args)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert np.array_equal(np.load(tmp_path / "out.npy").view(np.float32), expected["y"])
    # A lone copy of the installed binary finds Warp through the path recorded at build time.
    lone = tmp_path / "lone" / "wrp-replay"
    lone.parent.mkdir()
    shutil.copy2(replayer, lone)
    p = subprocess.run(["env", "-i", str(lone), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    # Writing into a non-empty folder needs --overwrite.
    p = wrp("export-runtime", copy)
    assert p.returncode != 0 and "not empty" in p.stderr
