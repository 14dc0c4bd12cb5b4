"""A replay never takes its caller down: crash containment, stale pointers, launch extents.

Every capture is made here with stock Warp (or wrpkit), then damaged the way a
user would: a HashGrid id passed as uint64, a launch edited through the
``.json`` form to run past its arrays, flipped bits in a kernel's machine code.
Every replay route (``wrp replay`` with both engines, ``wrp-replay``,
``Program.run(isolate=True)`` and ``wrpkit.load(..., isolate=True)``) must end
with its documented exit code or exception and message, and write nothing.
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

import warp as wp
from proc_helpers import invoke_raising as wrp, native_or_skip
import wrpkit
from check_helpers import run_check, stock_grid_capture
from wrpkit.checks.elf import symbol_bytes
from wrpkit.run.replay.engines import native_paths
from wrpkit.errors import (CRASH_STAGES, EXIT_CRASH, EXIT_TIMEOUT, WrpCrashError, WrpError, WrpRuntimeError,
                           WrpTimeoutError, WrpValidationError, timeout_message)
from wrpkit.formats import jsonform, wrp1

pytestmark = pytest.mark.slow  # crashes and hangs child processes on purpose

wp.config.log_level = wp.LOG_WARNING
wp.init()
WARP_BIN = str(Path(wp.__file__).parent / "bin")
N = 256


@wp.kernel
def k_axpy(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = 2.0 * a[i] + b[i]


@wp.kernel
def k_query_grid(grid: wp.uint64, pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.int32)):
    i = wp.tid()
    q = wp.hash_grid_query(grid, pts[i], 0.5)
    n = int(0)
    for _j in q:
        n += 1
    out[i] = n


@wp.kernel
def k_accumulate(a: wp.array(dtype=wp.float32), acc: wp.array(dtype=wp.float32)):
    i = wp.tid()
    acc[i] = acc[i] + a[i]


@wp.kernel
def k_copy(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32)):
    i = wp.tid()
    dst[i] = src[i]


@wp.kernel
def k_scatter(idx: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[idx[i]] = float(i)


def native_exe():
    try:
        return native_paths().require_replayer()
    except wrpkit.WrpError:
        pytest.skip("wrp-replay is not built")


def wrp_replay(*args):
    return subprocess.run([str(native_exe()), *map(str, args), "--warp-lib-dir", WARP_BIN], capture_output=True,
                          text=True, errors="replace", timeout=300)


def _arrays():
    a = wp.array(np.arange(N, dtype=np.float32), device="cpu")
    b = wp.array(np.ones(N, dtype=np.float32), device="cpu")
    out = wp.zeros(N, dtype=wp.float32, device="cpu")
    return a, b, out


@pytest.fixture(scope="module")
def axpy(tmp_path_factory) -> Path:
    """A wrpkit capture (with module digests and kernel signatures) of one launch over 256-element arrays."""
    d = tmp_path_factory.mktemp("axpy")
    a, b, out = _arrays()
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_axpy, dim=N, inputs=[a, b, out], device="cpu")
    return rec.save(d / "axpy.wrp", inputs={"a": a, "b": b}, outputs={"out": out})


def _edited_json(src: Path, dst: Path, threads: int, declare: bool = False, op_index: int = 0) -> Path:
    """Export ``src`` to JSON and edit launch ``op_index`` to run ``threads`` threads, as a user would."""
    r = wrp("convert", src, dst)
    assert r.exit_code == 0, r.output
    data = json.loads(dst.read_text())
    op = data["ops"][op_index]
    assert op["op"] == "KERNEL_LAUNCH" and op["size"] == N
    op["shape"] = [threads, 0, 0, 0] if isinstance(op["shape"], list) else op["shape"]
    op["size"] = op["dim"] = threads
    if declare:
        data["launch_extents_exceeded"] = [f"ops[{op_index}]"]
    dst.write_text(json.dumps(data))
    return dst


def _as_wrp(edited_json: Path, dst: Path) -> Path:
    """The edited JSON as a .wrp, through the library (``wrp convert`` refuses the edit)."""
    prog, modules = jsonform.loads(edited_json.read_bytes())
    dst.write_bytes(wrp1.encode_wrp1(prog))
    mdir = dst.with_name(dst.stem + "_modules")
    mdir.mkdir()
    for name, data in modules.items():
        (mdir / name).write_bytes(data)
    return dst


@pytest.fixture(scope="module")
def huge_launch(axpy, tmp_path_factory) -> Path:
    """The axpy capture with its launch edited through .json to 2^22 threads."""
    d = tmp_path_factory.mktemp("huge")
    return _as_wrp(_edited_json(axpy, d / "edit.json", 1 << 22), d / "huge.wrp")


@pytest.fixture(scope="module")
def corrupt_code(tmp_path_factory) -> Path:
    """A stock-saved capture (no digests) whose kernel's first instruction has flipped bits."""
    d = tmp_path_factory.mktemp("corrupt")
    a, b, out = _arrays()
    wp.launch(k_axpy, dim=N, inputs=[a, b, out], device="cpu")  # compile outside the capture
    wp.capture_begin("cpu", apic=True)
    wp.launch(k_axpy, dim=N, inputs=[a, b, out], device="cpu")
    g = wp.capture_end()
    path = d / "corrupt.wrp"
    wp.capture_save(g, str(path), inputs={"a": a, "b": b}, outputs={"out": out})
    prog = wrpkit.open_capture(path).program
    kernel = prog.kernels[0]
    mod = next(m for m in prog.modules if m.module_hash == kernel.module_hash)
    obj = path.with_name("corrupt_modules") / mod.binary_filename
    data = bytearray(obj.read_bytes())
    at, size = symbol_bytes(data, kernel.forward_name, obj.name)
    assert size >= 4
    # Flip the bits that make the function's first instruction an illegal one
    # (x86-64 ud2 = 0f 0b; AArch64 udf #0 = 00 00 00 00).
    want = b"\x0f\x0b" if os.uname().machine in ("x86_64", "AMD64") else b"\x00\x00\x00\x00"
    for i, byte in enumerate(want):
        data[at + i] ^= data[at + i] ^ byte
    obj.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def grid_capture(tmp_path_factory) -> Path:
    """A stock capture whose kernel queries a HashGrid through its uint64 id (a stale pointer in any other process)."""
    d = tmp_path_factory.mktemp("grid")
    rng = np.random.default_rng(5)
    pts = wp.array(rng.random((64, 3)).astype(np.float32), dtype=wp.vec3, device="cpu")
    out = wp.zeros(64, dtype=wp.int32, device="cpu")
    grid = wp.HashGrid(4, 4, 4, device="cpu")
    grid.build(pts, 0.5)
    wp.launch(k_query_grid, dim=64, inputs=[grid.id, pts, out], device="cpu")
    wp.capture_begin("cpu", apic=True)
    wp.launch(k_query_grid, dim=64, inputs=[grid.id, pts, out], device="cpu")
    g = wp.capture_end()
    path = d / "grid.wrp"
    wp.capture_save(g, str(path), inputs={"pts": pts}, outputs={"out": out})
    return path


def _no_outputs(d: Path, before: set):
    assert set(os.listdir(d)) == before, "an error wrote a file"


def _every_cli_engine_contains(path, tmp_path, kernel: str, verified: bool, *extra):
    """``wrp replay`` with both engines ends with exit 4 and the crash message, and writes no output."""
    for engine in ("python", "native"):
        if engine == "native":
            native_exe()
        r = wrp("replay", path, "--engine", engine, "--output", tmp_path / "out.npz", *extra)
        assert r.exit_code == EXIT_CRASH, r.output
        _assert_crash_message(r.stderr, kernel, verified)


def _assert_crash_message(text: str, kernel: str, verified: bool):
    assert "the replay crashed with SIG" in text and "nothing was written" in text, text
    assert "op 0 (KERNEL_LAUNCH" in text and repr(kernel) in text, text
    if verified:
        assert "was verified before it ran" in text, text
    else:
        assert "cannot be caught before it runs" in text and "wrp convert FILE out.wrpk" in text, text


# ---------------------------------------------------------------------------
# Stale process pointers
# ---------------------------------------------------------------------------


def test_hashgrid_id_is_refused_by_every_route(tmp_path):
    g, out, _grid = stock_grid_capture()
    path = tmp_path / "grid.wrp"
    wp.capture_save(g, str(path), outputs={"out": out})
    before = set(os.listdir(tmp_path))
    code, data = run_check(path)
    assert code == 3 and not data["loadable"]  # the code every replay route gives it below
    assert [f for f in data["findings"] if f["check"] == "lint-pointer" and f["status"] == "fail"]
    for engine in ("python", "native"):
        if engine == "native":
            native_exe()
        r = wrp("replay", path, "--engine", engine, "--output", tmp_path / "o.npz")
        assert r.exit_code == 3, r.output
        assert "k_uses_grid_id" in r.stderr and "argument 0" in r.stderr and "HashGrid" in r.stderr
        assert "--allow-raw-pointers" in r.stderr
    res = wrp_replay(path, "--output", f"out={tmp_path / 'o.npy'}")
    assert res.returncode == 3 and "k_uses_grid_id" in res.stderr and "HashGrid" in res.stderr, res.stderr
    with pytest.raises(WrpValidationError, match="k_uses_grid_id.*argument 0.*HashGrid"):
        wrpkit.load(path)
    with pytest.raises(WrpValidationError):
        wrpkit.load(path, isolate=True)
    _no_outputs(tmp_path, before)
    # Allowed on request: this kernel never dereferences the id, so it replays.
    prog = wrpkit.load(path, allow_raw_pointers=True)
    np.testing.assert_array_equal(prog.run()["out"].view(np.float32), np.arange(4, dtype=np.float32))
    assert wrp("replay", path, "--allow-raw-pointers").exit_code == 0
    assert wrp_replay(path, "--allow-raw-pointers").returncode == 0


@pytest.mark.parametrize("address", [0x356CCB80, 0x55D15E5EF6C0, 0x7F3A2C001000])
def test_python_and_native_refuse_the_same_pointers(tmp_path, address):
    # Heap addresses of a non-PIE interpreter lie low, of a PIE one near 2^46: both sides must agree.
    g, out, _grid = stock_grid_capture()
    src = tmp_path / "src.wrp"
    wp.capture_save(g, str(src), outputs={"out": out})
    prog = wrp1.decode_wrp1(src.read_bytes())
    launch = prog.ops[0]
    p = launch.params[0]
    data = bytearray(launch.value_data)
    data[p.value_offset:p.value_offset + 8] = address.to_bytes(8, "little")
    launch.value_data = bytes(data)
    path = tmp_path / "grid.wrp"
    path.write_bytes(wrp1.encode_wrp1(prog))
    shutil.copytree(tmp_path / "src_modules", tmp_path / "grid_modules")
    with pytest.raises(WrpValidationError, match=f"{address:#x}"):
        wrpkit.load(path)
    res = wrp_replay(path)
    assert res.returncode == 3 and f"{address:#x}" in res.stderr, res.stderr


def test_hashgrid_query_with_raw_pointers_allowed_is_contained(grid_capture, tmp_path):
    before = set(os.listdir(tmp_path))
    _every_cli_engine_contains(grid_capture, tmp_path, "k_query_grid", False, "--allow-raw-pointers")
    res = wrp_replay(grid_capture, "--allow-raw-pointers", "--output", f"out={tmp_path / 'o.npy'}")
    assert res.returncode == EXIT_CRASH and "the replay crashed with SIGSEGV" in res.stderr, res.stderr
    prog = wrpkit.load(grid_capture, allow_raw_pointers=True, isolate=True)
    with pytest.raises(WrpCrashError) as e:
        prog.run()
    assert isinstance(e.value, WrpRuntimeError) and e.value.op_index == 0 and e.value.kernel == "k_query_grid"
    assert e.value.digest_verified is False
    _no_outputs(tmp_path, before)


# ---------------------------------------------------------------------------
# Launch extents
# ---------------------------------------------------------------------------


def test_launch_edited_to_300_threads_is_a_lint_and_refused_by_convert(axpy, tmp_path):
    edited = _edited_json(axpy, tmp_path / "edit.json", 300)
    before = set(os.listdir(tmp_path))
    r = wrp("convert", edited, tmp_path / "back.wrp")
    assert r.exit_code == 3, r.output
    assert "ops[0]" in r.stderr and "300 threads" in r.stderr and "256 elements" in r.stderr
    _no_outputs(tmp_path, before)
    # Declared as known in the JSON (as an export of such a file says), it converts; then it is a lint.
    declared = _edited_json(axpy, tmp_path / "declared.json", 300, declare=True)
    assert wrp("convert", declared, tmp_path / "back.wrp").exit_code == 0
    v = wrp("validate", tmp_path / "back.wrp")
    assert v.exit_code == 0 and "300 threads" in v.output, v.output
    code, data = run_check(tmp_path / "back.wrp")
    lint = [f for f in data["findings"] if f["check"] == "lint-extent"]
    assert code == 0 and lint and lint[0]["status"] == "warn" and "256 elements" in lint[0]["message"]
    # The export of that file lists the launch, so a round trip through JSON is accepted.
    assert wrp("convert", tmp_path / "back.wrp", tmp_path / "again.json").exit_code == 0
    assert json.loads((tmp_path / "again.json").read_text())["launch_extents_exceeded"] == ["ops[0]"]
    assert wrp("convert", tmp_path / "again.json", tmp_path / "again.wrp").exit_code == 0


def _python_extent_lints(path) -> list:
    from wrpkit.checks.validate import validate_capture

    with wrpkit.open_capture(path) as cap:
        return [f"{p.where}: {p.message}" for p in validate_capture(cap)
                if getattr(p, "severity", "error") == "warning" and "threads but its largest array" in p.message]


def test_wrp_replay_says_the_same_extent_lint_as_wrp_validate(axpy, sixth_of_six, tmp_path):
    """The C++ validator finds the launches past their arrays that wrpkit's does, in the same words;
    wrp-replay prints them (--list and a replay) and never refuses a file for them."""
    declared = _edited_json(axpy, tmp_path / "declared.json", 300, declare=True)
    assert wrp("convert", declared, tmp_path / "past.wrp").exit_code == 0
    for path, n in ((tmp_path / "past.wrp", 1), (sixth_of_six, 1), (axpy, 0)):
        want = _python_extent_lints(path)
        assert len(want) == n, want
        res = wrp_replay(path, "--list", "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["warnings"] == want
        assert [line.removeprefix("wrp-replay: warning: ") for line in res.stderr.splitlines()
                if line.startswith("wrp-replay: warning:")] == want
    res = wrp_replay(tmp_path / "past.wrp", "--output", f"out={tmp_path / 'o.npy'}", "--json")
    assert "runs 300 threads but its largest array argument holds 256 elements" in res.stderr
    assert res.returncode in (0, EXIT_CRASH), res.stderr  # reading past the arrays may or may not fault
    if res.returncode == EXIT_CRASH:  # in the op, or (a heap it corrupted) as Warp released its memory
        crash = json.loads(res.stdout)["crash"]
        assert crash["op_index"] == 0 or "after its last op, as Warp released the graph's memory" in res.stderr, \
            res.stderr
        assert (crash["unknown"] is None) == (crash["op_index"] is not None), crash


def test_unedited_launch_has_no_extent_lint(axpy):
    code, data = run_check(axpy)
    assert code == 0 and not [f for f in data["findings"] if f["check"] == "lint-extent"]


def test_launch_edited_to_2_pow_22_threads_is_contained_everywhere(huge_launch, tmp_path):
    before = set(os.listdir(tmp_path))
    _every_cli_engine_contains(huge_launch, tmp_path, "k_axpy", True)
    r = wrp("replay", huge_launch, "--output", tmp_path / "out.npz", "--json")
    assert r.exit_code == EXIT_CRASH and "the replay crashed" in r.stderr
    res = wrp_replay(huge_launch, "--output", f"out={tmp_path / 'o.npy'}", "--json")
    assert res.returncode == EXIT_CRASH, res.stderr
    line = json.loads(res.stdout)
    assert line["exit_code"] == EXIT_CRASH and line["error"].startswith("the replay crashed with SIG")
    assert "was verified before it ran" in line["error"] or "Every module's SHA-256 was verified" in line["error"]
    prog = wrpkit.load(huge_launch, isolate=True)
    with pytest.raises(WrpCrashError) as e:
        prog.run({"a": np.zeros(N, np.float32)})
    assert (e.value.op_index, e.value.op_kind, e.value.kernel) == (0, "KERNEL_LAUNCH", "k_axpy")
    assert e.value.digest_verified is True and e.value.exit_code == EXIT_CRASH
    inproc = wrpkit.load(huge_launch)
    with pytest.raises(WrpCrashError):
        inproc.run(isolate=True)
    _no_outputs(tmp_path, before)


@pytest.fixture(scope="module")
def sixth_of_six(tmp_path_factory) -> Path:
    """Six axpy launches captured by wrpkit, the fourth (op 3) edited through .json to 2^22 threads."""
    d = tmp_path_factory.mktemp("six")
    a, b, out = _arrays()
    with wrpkit.capture(device="cpu") as rec:
        for _ in range(6):
            wp.launch(k_axpy, dim=N, inputs=[a, b, out], device="cpu")
    src = rec.save(d / "six.wrp", inputs={"a": a, "b": b}, outputs={"out": out})
    return _as_wrp(_edited_json(src, d / "edit.json", 1 << 22, op_index=3), d / "crash_at_3.wrp")


def test_wrp_replay_alone_names_the_op_that_crashed(sixth_of_six, tmp_path):
    """wrp-replay names the op itself (re-executed: one more run, with op slots), as `wrp replay` does."""
    before = set(os.listdir(tmp_path))
    res = wrp_replay(sixth_of_six, "--output", f"out={tmp_path / 'o.npy'}", "--repeat", "2")
    assert res.returncode == EXIT_CRASH, res.stderr
    assert "in op 3 (KERNEL_LAUNCH of kernel 'k_axpy', module '" in res.stderr, res.stderr
    assert "(named by its op slot in a second run)" in res.stderr and "was verified before it ran" in res.stderr
    assert "at path" not in res.stderr  # a top-level op
    res = wrp_replay(sixth_of_six, "--output", f"out={tmp_path / 'o.npy'}", "--json")
    assert res.returncode == EXIT_CRASH, res.stderr
    line = json.loads(res.stdout)
    assert line["exit_code"] == EXIT_CRASH and line["error"].startswith("the replay crashed with SIG")
    crash = line["crash"]
    assert (crash["op_index"], crash["op_kind"], crash["kernel"], crash["digest_verified"]) == (
        3, "KERNEL_LAUNCH", "k_axpy", True)
    assert crash["module"].endswith(".o") and crash["signal"].startswith("SIG") and crash["path"] == "3"
    assert crash["stage"] == "replaying"
    # The same op through both engines of `wrp replay`, and in an isolated library replay.
    for engine in ("python", "native"):
        r = wrp("replay", sixth_of_six, "--engine", engine, "--output", tmp_path / "out.npz")
        assert r.exit_code == EXIT_CRASH and "in op 3 (KERNEL_LAUNCH" in r.stderr, r.output
    with pytest.raises(WrpCrashError) as e:
        wrpkit.load(sixth_of_six, isolate=True).run()
    assert e.value.op_index == 3
    _no_outputs(tmp_path, before)


def test_a_crash_while_warp_loads_is_said_so_in_words_and_in_the_json(axpy, tmp_path):
    """A fatal signal while the file is being opened (here: delivered while wrp-replay waits for its
    approval, before anything is allocated) is reported with no op named, stage "loading" in --json's
    crash object, and `wrp replay --engine native` reads the stage and the signal from there."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([str(native_exe()), str(axpy), "--json", "--approve-fd", str(read_end), "--approve-above",
                             "0", "--warp-lib-dir", WARP_BIN], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, pass_fds=(read_end,))
    os.close(read_end)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # blocked in read(read_end): syscall 0 on x86-64, 63 on arm64
            try:
                call = Path(f"/proc/{proc.pid}/syscall").read_text().split()
            except OSError:
                call = []
            if len(call) > 1 and call[0] in ("0", "63") and int(call[1], 16) == read_end:
                break
            time.sleep(0.02)
        else:
            pytest.fail("wrp-replay never waited for its approval")
        os.kill(proc.pid, signal.SIGSEGV)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(write_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_CRASH, err
    line = json.loads(out)
    assert line["crash"] == {"signal": "SIGSEGV", "stage": "loading"}, line
    assert CRASH_STAGES["loading"] in line["error"] and "in op" not in line["error"]


def test_wrp_replay_locating_a_crash_keeps_to_its_timeout(sixth_of_six, tmp_path):
    """A --timeout that is spent while the op is named ends the second run, not the report: exit 4."""
    res = wrp_replay(sixth_of_six, "--timeout", "0.5", "--json")
    assert res.returncode == EXIT_CRASH, res.stderr
    crash = json.loads(res.stdout)["crash"]
    if crash["op_index"] is None:  # the machine was too slow to finish in 0.5 s: said so
        assert "the second run, with op slots, ran out of time" in res.stderr, res.stderr
    else:
        assert crash["op_index"] == 3, res.stderr


# ---------------------------------------------------------------------------
# Corrupt kernel code in a file without digests
# ---------------------------------------------------------------------------


def test_flipped_bits_in_kernel_code_are_contained_everywhere(corrupt_code, tmp_path):
    v = wrp("validate", corrupt_code)
    assert v.exit_code == 0  # nothing in the records can tell: it must be contained
    before = set(os.listdir(tmp_path))
    _every_cli_engine_contains(corrupt_code, tmp_path, "k_axpy", False)
    res = wrp_replay(corrupt_code, "--output", f"out={tmp_path / 'o.npy'}")
    assert res.returncode == EXIT_CRASH and "cannot be caught before it runs" in res.stderr, res.stderr
    with pytest.raises(WrpCrashError) as e:
        wrpkit.load(corrupt_code, isolate=True).run()
    assert e.value.kernel == "k_axpy" and e.value.digest_verified is False
    assert e.value.module and e.value.module.endswith(".o") and e.value.module in str(e.value)
    _no_outputs(tmp_path, before)


# ---------------------------------------------------------------------------
# wrp trace: stepped in a child process
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("capture, verified", [("corrupt_code", False), ("huge_launch", True)])
def test_trace_crash_is_contained_and_names_the_op(request, capture, verified, engine, tmp_path):
    native_or_skip(engine)
    path = request.getfixturevalue(capture)
    before = set(os.listdir(tmp_path))
    r = wrp("trace", path, "--engine", engine, "--save", tmp_path / "t.trace", "--dump", tmp_path / "dump",
            "--json")
    assert r.exit_code == EXIT_CRASH, r.output
    err = json.loads(r.stdout)  # stdout holds the JSON error object, nothing else
    assert err["exit_code"] == EXIT_CRASH and err["error"].startswith("the replay crashed with SIG"), err
    _assert_crash_message(r.stderr, "k_axpy", verified)
    assert "(the op the trace was running)" in r.stderr, r.stderr
    r = wrp("trace", path, "--engine", engine, "--dump", tmp_path / "dump")  # the table form too
    assert r.exit_code == EXIT_CRASH and "op 0 (KERNEL_LAUNCH" in r.stderr, r.output
    _no_outputs(tmp_path, before)
    with pytest.raises(WrpCrashError) as e:
        wrpkit.trace(path, engine=engine, isolate=True, dump=tmp_path / "dump")
    assert (e.value.op_index, e.value.path, e.value.iteration, e.value.op_kind, e.value.kernel) == (
        0, "0", None, "KERNEL_LAUNCH", "k_axpy")
    assert e.value.digest_verified is verified and e.value.module in str(e.value)
    _no_outputs(tmp_path, before)


def _never_ending_while(tmp_path: Path) -> list:
    """``wrp trace`` arguments for a WHILE whose counter starts at -1 (stepped, it runs for minutes before Warp's 2^24-iteration guard)."""
    import debug_programs as dp  # noqa: PLC0415

    path = dp.capture_while_nan(tmp_path / "forever.wrp")
    np.save(tmp_path / "counter.npy", np.array([-1], np.int32))
    return [path, "--input", f"counter={tmp_path / 'counter.npy'}"]


def test_trace_timeout_kills_a_never_ending_while(tmp_path):
    args = _never_ending_while(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    r = wrp("trace", *args, "--timeout", "2", "--save", out / "t.trace", "--dump", out / "dump", "--json")
    assert r.exit_code == EXIT_TIMEOUT, r.output
    assert json.loads(r.stdout)["exit_code"] == EXIT_TIMEOUT
    assert timeout_message(2) in " ".join(r.stderr.split()) and "raise --timeout" in r.stderr, r.stderr
    assert os.listdir(out) == []
    with pytest.raises(WrpTimeoutError):
        wrpkit.trace(args[0], inputs={"counter": np.array([-1], np.int32)}, timeout=1.5)


@pytest.mark.slow  # 2^24 iterations on each engine: about 5 s apiece
def test_a_while_stopped_by_warps_guard_is_explained_alike_by_both_engines(tmp_path):
    """Warp's CPU replay ends a WHILE after 2^24 iterations with an error whose Python text gives no reason
    (the reason is on stderr); both engines name the guard, Warp's line and what to do next."""
    args = _never_ending_while(tmp_path)
    said = {}
    for engine in ("python", "native"):
        r = wrp("replay", *args, "--engine", engine, "--timeout", "300", "--json")
        assert r.exit_code == 1, (engine, r.output)
        said[engine] = " ".join(r.stderr.split())
        assert "a WHILE loop ran 16,777,216 iterations (2^24)" in said[engine], said[engine]
        assert "Warp APIC error: APIC_OP_WHILE exceeded guard limit at operation 1" in said[engine], said[engine]
        assert "hint: Its condition never became 0 with these inputs" in said[engine]
        assert json.loads(r.stdout)["exit_code"] == 1
    assert said["python"].split("(")[0] == said["native"].split("(")[0]  # one explanation


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the child process")
def test_trace_ctrl_c_exits_130_and_kills_the_child(tmp_path):
    args = _never_ending_while(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "wrpkit.cli", "trace", *map(str, args), "--save",
                             str(out / "t.trace")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    try:
        kids = []
        for _ in range(600):  # the child starts once the parent has validated the file
            kids = child_pids(proc.pid, b"wrpkit.run.contain.child") if proc.poll() is None else []
            if kids:
                break
            time.sleep(0.1)
        assert kids, "the trace child never started"
        time.sleep(1.0)  # stepping the loop
        proc.send_signal(signal.SIGINT)  # to the parent only, not the process group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    for k in kids:
        assert not Path(f"/proc/{k}").exists(), "the child outlived the interrupted trace"
    assert os.listdir(out) == []


def test_crash_message_names_a_nested_op_by_path_and_iteration(tmp_path):
    import debug_programs as dp  # noqa: PLC0415
    from wrpkit.run.contain.crash import crash_error  # noqa: PLC0415
    from wrpkit.run.load.prepare import prepare  # noqa: PLC0415

    prep = prepare(dp.capture_while_nan(tmp_path / "w.wrp"))  # op 1 is a WHILE: [k_decrement, k_sqrt]
    e = crash_error(prep, signal.SIGSEGV, "replaying", 1, path="1.1", iteration=2)
    assert (e.op_index, e.path, e.iteration, e.op_kind, e.kernel, e.digest_verified) == (
        1, "1.1", 2, "KERNEL_LAUNCH", "k_sqrt", True)
    assert "in op 1 (KERNEL_LAUNCH of kernel 'k_sqrt'" in e.message and "at path 1.1, WHILE iteration 2" in e.message
    assert "was verified before it ran" in e.message


@wp.kernel
def k_countdown(left: wp.array(dtype=wp.int32)):
    left[0] = left[0] - 1


@wp.kernel
def k_poke(values: wp.array(dtype=wp.float32), at: wp.array(dtype=wp.int64)):
    values[at[0]] = 1.0  # no bounds check: a wild index from the inputs is a wild write


@pytest.fixture(scope="module")
def poke_in_while(tmp_path_factory) -> Path:
    """Stock Warp: a capture_while whose body counts down, then writes ``values[at[0]]``."""
    d = tmp_path_factory.mktemp("poke")
    left = wp.array([3], dtype=wp.int32, device="cpu")
    values = wp.zeros(8, dtype=wp.float32, device="cpu")
    at = wp.array([2], dtype=wp.int64, device="cpu")

    def body():
        wp.launch(k_countdown, dim=1, inputs=[left], device="cpu")
        wp.launch(k_poke, dim=1, inputs=[values, at], device="cpu")

    wp.capture_begin(device="cpu", apic=True)
    try:
        wp.launch(k_axpy, dim=8, inputs=[values, values, values], device="cpu")
        wp.capture_while(left, body)
    finally:
        graph = wp.capture_end(device="cpu")
    wp.capture_save(graph, str(d / "poke.wrp"), inputs={"left": left, "at": at}, outputs={"values": values})
    return d / "poke.wrp"


def test_a_wild_write_inside_a_while_is_named_by_its_path_on_every_route(poke_in_while, tmp_path):
    """A planted bug: the index comes from the inputs, the launch is nested in a WHILE.  Every whole-replay
    route names the nested op by its path (op 1, WHILE; path 1.1, the poke), from one run with op slots."""
    wild, three = tmp_path / "at.npy", tmp_path / "left.npy"
    np.save(wild, np.array([1 << 30], dtype=np.int64))
    np.save(three, np.array([3], dtype=np.int32))
    ok = wrp("replay", poke_in_while, "--input", f"left={three}", "--output", tmp_path / "ok.npz")
    assert ok.exit_code == 0, ok.output  # as captured, it replays
    res = wrp_replay(poke_in_while, "--input", f"left={three}", "--input", f"at={wild}", "--json")
    assert res.returncode == EXIT_CRASH, res.stderr
    crash = json.loads(res.stdout)["crash"]
    assert (crash["op_index"], crash["path"], crash["op_kind"], crash["kernel"]) == (1, "1.1", "KERNEL_LAUNCH",
                                                                                     "k_poke"), res.stderr
    said = res.stderr[res.stderr.index("crashed with"):]
    assert "in op 1 (KERNEL_LAUNCH of kernel 'k_poke'" in said, said
    assert "at path 1.1 (named by its op slot in a second run)" in said
    for engine in ("native", "python"):
        r = wrp("replay", poke_in_while, "--engine", engine, "--input", f"left={three}", "--input", f"at={wild}",
                "--json")
        assert r.exit_code == EXIT_CRASH, r.output
        # the same words as wrp-replay's, from the same slot
        assert said.split("; nothing was written")[0] in r.stderr, (said, r.stderr)
    with pytest.raises(WrpCrashError) as e:
        wrpkit.load(poke_in_while, isolate=True).run({"left": np.array([3], dtype=np.int32),
                                                      "at": np.array([1 << 30], dtype=np.int64)})
    assert (e.value.op_index, e.value.path, e.value.kernel, e.value.iteration) == (1, "1.1", "k_poke", None)
    assert e.value.digest_verified is False and crash["digest_verified"] is False  # stock: no digests
    # Bundled, the module's checksum was verified before it ran: both routes say so.
    bundle = tmp_path / "poke.wrpk"
    assert wrp("convert", poke_in_while, bundle).exit_code == 0
    res = wrp_replay(bundle, "--input", f"left={three}", "--input", f"at={wild}", "--json")
    crash = json.loads(res.stdout)["crash"]
    assert (res.returncode, crash["path"], crash["digest_verified"]) == (EXIT_CRASH, "1.1", True), res.stderr
    r = wrp("replay", bundle, "--engine", "python", "--input", f"left={three}", "--input", f"at={wild}")
    assert r.exit_code == EXIT_CRASH and "its SHA-256 recorded in the bundle was verified" in r.stderr, r.stderr


def test_isolated_run_matches_in_process(axpy):
    x = np.linspace(0, 1, N, dtype=np.float32)
    want = wrpkit.load(axpy).run({"a": x})
    iso = wrpkit.load(axpy, isolate=True)
    got = iso.run({"a": x})
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_allclose(got["out"], 2 * x + 1)
    prog = wrpkit.load(axpy)
    prog.set("a", x)
    np.testing.assert_array_equal(prog.run(isolate=True)["out"], want["out"])
    np.testing.assert_array_equal(prog.numpy("out"), want["out"])  # written back into the graph


def test_an_isolated_program_is_a_program_and_says_what_needs_the_graph_here(axpy):
    """``load(isolate=True)`` gives the one Program type; what only a graph in this process has is
    refused in words, its bindings and reset behave as in-process, and it pickles as isolated."""
    import pickle  # noqa: PLC0415

    x = np.linspace(0, 1, N, dtype=np.float32)
    iso, inproc = wrpkit.load(axpy, isolate=True), wrpkit.load(axpy)
    try:
        assert type(iso) is type(inproc) is wrpkit.Program and iso.isolated and not inproc.isolated
        assert "in a child process" in repr(iso) and iso.bindings == inproc.bindings
        for call in (iso.launch, lambda: iso.array("out"), iso.release_captured):
            with pytest.raises(WrpError, match="needs the graph in this process") as e:
                call()
            assert "isolate=True" in e.value.hint
        with pytest.raises(WrpError, match="isolate=True"):
            iso.run(isolate=False)
        np.testing.assert_array_equal(iso.numpy("out"), inproc.numpy("out"))  # the captured bytes
        want = inproc.run({"a": x})["out"]
        views = iso.run({"a": x}, copy=False)
        np.testing.assert_array_equal(views["out"], want)
        again = pickle.loads(pickle.dumps(iso))  # a Dask or Ray task's copy: isolated too
        assert again.isolated and again is not iso
        np.testing.assert_array_equal(again.run({"a": x})["out"], want)
        again.close()
        iso.set("out", np.zeros(N, np.float32))
        iso.reset()  # the captured bytes again, here and (at the next run) in the child
        np.testing.assert_array_equal(iso.get("out"), wrpkit.load(axpy).get("out"))
        np.testing.assert_array_equal(iso.run({"a": x}, reset=True)["out"], want)
        iso.close()
        with pytest.raises(WrpError, match="closed"):
            iso.run()
    finally:
        iso.close()
        inproc.close()


def test_isolated_program_keeps_graph_memory_between_runs_like_a_program(tmp_path):
    """The replay child stays: memory that is no binding (an accumulator) persists from run to run,
    exactly as in an in-process Program, and a new input reaches it."""
    a = wp.array(np.arange(N, dtype=np.float32), device="cpu")
    acc = wp.zeros(N, dtype=wp.float32, device="cpu")  # internal: not saved as a binding
    out = wp.zeros(N, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_accumulate, dim=N, inputs=[a, acc], device="cpu")
        wp.launch(k_copy, dim=N, inputs=[acc, out], device="cpu")
    path = rec.save(tmp_path / "acc.wrp", inputs={"a": a}, outputs={"out": out})
    inproc, iso = wrpkit.load(path), wrpkit.load(path, isolate=True)
    try:
        for k in range(3):
            x = np.full(N, k + 1, np.float32) if k == 1 else None
            want = inproc.run({"a": x} if x is not None else None)["out"]
            got = iso.run({"a": x} if x is not None else None)["out"]
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, np.arange(N, dtype=np.float32) + 2 * np.full(N, 2, np.float32))
    finally:
        iso.close()


def test_isolated_program_runs_again_after_a_crash(tmp_path):
    """A crash ends that run's child, not the program: the next run starts a new child from the
    bindings the last successful run left, and the crash changed nothing here."""
    idx = wp.array(np.arange(N, dtype=np.int32), device="cpu")
    out = wp.zeros(N, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_scatter, dim=N, inputs=[idx, out], device="cpu")
    path = rec.save(tmp_path / "scatter.wrp", inputs={"idx": idx}, outputs={"out": out})
    iso = wrpkit.load(path, isolate=True)
    try:
        good = np.arange(N, dtype=np.int32)[::-1].copy()
        first = iso.run({"idx": good})["out"]
        np.testing.assert_array_equal(first, np.arange(N, dtype=np.float32)[::-1])
        far = np.full(N, 2**31 - 1, np.int32)  # out + 8 GiB: no memory of this process
        with pytest.raises(WrpCrashError) as e:
            iso.run({"idx": far})
        assert e.value.op_index == 0 and e.value.kernel == "k_scatter"
        np.testing.assert_array_equal(iso.get("idx"), good)  # the failed run's input was not kept...
        np.testing.assert_array_equal(iso.get("out"), first)  # ...nor anything else
        again = iso.run({"idx": np.arange(N, dtype=np.int32)})["out"]
        np.testing.assert_array_equal(again, np.arange(N, dtype=np.float32))
    finally:
        iso.close()


# ---------------------------------------------------------------------------
# Backward symbols: required only where a backward launch uses them
# ---------------------------------------------------------------------------


def test_unused_missing_backward_symbol_is_a_warning_and_replays(axpy, tmp_path):
    """Warp's test_load_missing_cpu_backward_symbol: a same-length, well-formed name not in the module."""
    src = axpy.read_bytes()
    prog = wrpkit.open_capture(axpy).program
    name = prog.kernels[0].backward_name.encode()
    assert name and src.count(name) == 1
    path = tmp_path / "nobwd.wrp"
    path.write_bytes(src.replace(name, b"x" * len(name)))
    shutil.copytree(axpy.with_name("axpy_modules"), tmp_path / "nobwd_modules")
    v = wrp("validate", path)
    assert v.exit_code == 0 and "never looked up" in " ".join(v.output.split()), v.output
    x = np.arange(N, dtype=np.float32)
    np.testing.assert_allclose(wrpkit.load(path).run({"a": x})["out"], 2 * x + 1)
    assert wrp("replay", path).exit_code == 0
    assert wrp("replay", path, "--engine", "native").exit_code == 0
    assert wrp_replay(path).returncode == 0
    # A malformed unused name is a warning too.
    bad = tmp_path / "badbwd.wrp"
    bad.write_bytes(src.replace(name, b"-" * len(name)))
    shutil.copytree(axpy.with_name("axpy_modules"), tmp_path / "badbwd_modules")
    v = wrp("validate", bad)
    assert v.exit_code == 0 and "not a C identifier" in " ".join(v.output.split())
    assert wrp_replay(bad).returncode == 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
