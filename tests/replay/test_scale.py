"""Replays that scale with the capture (issue 24).

Containment without copies: a contained replay (``wrp replay``, either
engine, ``.wrp`` or ``.wrpk``) writes no file unless ``--output`` asks (seen
with strace), its child maps the user's file itself, and the outputs table is
computed where the data is, with the same figures in both engines as numpy
computes over an in-process replay.  Every capture is made with stock Warp
(or ``wrpkit.capture``) at test time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit
from wrpkit.checks.binding_stats import stats

wp.config.quiet = True
N = 4096
from proc_helpers import ROOT


@wp.kernel
def k_spin(pos: wp.array(dtype=wp.vec3), count: wp.array(dtype=wp.int32), scale: wp.float32):
    i = wp.tid()
    p = pos[i]
    pos[i] = wp.vec3(p[1], -p[0], p[2] * scale)
    wp.atomic_add(count, i % 7, 1)


@wp.kernel
def k_poison(pos: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    if i == 5:
        pos[i] = wp.vec3(wp.nan, wp.inf, 1.0)  # a planted bug: the table must count it


def _typed_capture(path: Path) -> Path:
    """A capture with a signature: vec3 positions (input/output) and an int32 counter."""
    rng = np.random.default_rng(7)
    pos = wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device="cpu")
    count = wp.zeros(7, dtype=wp.int32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_spin, dim=N, inputs=[pos, count, 1.5], device="cpu")
        wp.launch(k_poison, dim=N, inputs=[pos], device="cpu")
    rec.save(path, inputs={"pos": pos}, outputs={"pos": pos, "count": count})
    return path


def _stock_capture(path: Path) -> Path:
    """A stock capture_save (no signature): the outputs are raw bytes."""
    pos = wp.array(np.ones((N, 3), np.float32), dtype=wp.vec3, device="cpu")
    count = wp.zeros(7, dtype=wp.int32, device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(k_spin, dim=N, inputs=[pos, count, 2.0], device="cpu")
    graph = wp.capture_end(device="cpu")
    wp.capture_save(graph, str(path), inputs={"pos": pos}, outputs={"count": count})
    return path


@pytest.fixture(scope="module")
def typed(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("typed")
    wrp = _typed_capture(d / "typed.wrp")
    wrpk = d / "typed.wrpk"
    assert _cli("convert", wrp, wrpk).returncode == 0
    return {"wrp": wrp, "wrpk": wrpk}


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("stock")
    wrp = _stock_capture(d / "stock.wrp")
    wrpk = d / "stock.wrpk"
    assert _cli("convert", wrp, wrpk).returncode == 0
    return {"wrp": wrp, "wrpk": wrpk}


def _wrp_exe() -> str:
    exe = Path(sys.executable).parent / "wrp"
    return str(exe) if exe.is_file() else "wrp"


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([_wrp_exe(), *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)
    return proc


def _native_or_skip():
    try:
        from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

        native_paths().require_replayer()
    except wrpkit.WrpError:
        pytest.skip("wrp-replay is not built")


#: A system call that makes, changes or removes a file (as strace -f prints it).
_WRITES = re.compile(r"(open(at)?\(.*(O_WRONLY|O_RDWR|O_CREAT|O_TRUNC))|\b(creat|rename(at2?)?|unlink(at)?|"
                     r"mkdir(at)?|link(at)?|truncate)\(")


def _file_writes(trace: str) -> list:
    """The successful calls of ``trace`` that made, changed or removed a file on disk."""
    out = []
    for line in trace.splitlines():
        if not _WRITES.search(line) or re.search(r"= -1 E", line):
            continue
        if re.search(r'"/dev/(null|tty|pts/\d+)"', line):
            continue
        out.append(line)
    return out


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("kind", ["wrp", "wrpk"])
def test_contained_replay_writes_no_file(typed, engine, kind, tmp_path):
    """No temp folder, no private copy of the capture, no outputs file: bindings pass through memory."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    if engine == "native":
        _native_or_skip()
    log = tmp_path / "strace.txt"
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e",
                           "trace=open,openat,creat,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,"
                           "link,linkat,truncate", _wrp_exe(), "replay", str(typed[kind]), "--engine", engine,
                           "--json", "--repeat", "3"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["outputs"]["pos"]["nan"] == 1 and report["outputs"]["pos"]["inf"] == 1
    writes = _file_writes(log.read_text())
    assert writes == [], "\n".join(writes[:10])
    assert sorted(os.listdir(tmp_path)) == ["strace.txt"]


def test_output_is_the_only_file_written(typed, tmp_path):
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    log = tmp_path / "strace.txt"
    out = tmp_path / "out.npz"
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=openat,rename,renameat2,mkdir",
                           _wrp_exe(), "replay", str(typed["wrp"]), "--output", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    writes = _file_writes(log.read_text())
    assert writes and all(str(tmp_path) in w for w in writes), "\n".join(writes[:10])
    with np.load(out) as z:
        assert z["pos"].shape == (N, 3)


def _strace_cli(log: Path, cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e",
                           "trace=open,openat,creat,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,"
                           "link,linkat,truncate", _wrp_exe(), *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


@pytest.mark.parametrize("command", ["trace", "profile"])
@pytest.mark.parametrize("kind", ["wrp", "wrpk"])
def test_trace_and_profile_children_write_no_file_but_their_output(typed, command, kind, tmp_path):
    """The debug child maps the user's file too: no temp folder, no private copy, inputs through memory.

    The only file made is the one asked for (``--save`` / ``-o``, written atomically beside
    itself), and the results are those of the same run in process.
    """
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    src = typed[kind]
    pos = np.random.default_rng(3).standard_normal((N, 3)).astype(np.float32)
    np.save(tmp_path / "pos.npy", pos)
    out = tmp_path / ("t.trace" if command == "trace" else "p.json")
    log = tmp_path / "strace.txt"
    proc = _strace_cli(log, tmp_path, command, src, "--input", f"pos={tmp_path / 'pos.npy'}",
                       "--save" if command == "trace" else "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    writes = [w for w in _file_writes(log.read_text()) if "pos.npy" not in w]  # np.save above is not strace'd
    assert writes and all(str(tmp_path) in w for w in writes), "\n".join(writes[:10])
    assert sorted(os.listdir(tmp_path)) == sorted(["strace.txt", "pos.npy", out.name])
    report = json.loads(proc.stdout)
    if command == "trace":
        want = wrpkit.trace(src, inputs={"pos": pos}, isolate=False).to_json()
        assert report["ops"] == want["ops"] and len(want["ops"]) == 2
        assert report["ops"][1]["writes"][0]["nan"] == 1  # k_poison's planted NaN, seen in the child
        assert json.loads(out.read_text())["ops"] == want["ops"]
    else:
        want = wrpkit.profile(src, inputs={"pos": pos}, repeat=1, isolate=False)
        kernels = [op["kernel"] for op in report["ops"]]
        assert kernels == [op["kernel"] for op in want.ops] and len(kernels) == 2 and "k_poison" in kernels[1]
        assert out.stat().st_size > 0


def _strace_processes(log: Path, cwd: Path, *args) -> tuple:
    """``(exit code, strace lines)`` of ``wrp ARGS`` under ``strace -f`` (execve, openat and process ends)."""
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=execve,openat", _wrp_exe(),
                           *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd)
    return proc.returncode, log.read_text().splitlines()


def test_replay_starts_its_one_child_before_it_reads_the_capture(typed, tmp_path):
    """The python engine's child is started first, so that its ``import warp`` overlaps the validation."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    code, lines = _strace_processes(tmp_path / "strace.txt", tmp_path, "replay", typed["wrp"], "--engine", "python",
                                    "--json")
    assert code == 0
    parent = lines[0].split()[0]
    children = [i for i, ln in enumerate(lines) if "execve(" in ln and "wrpkit.run.contain.child" in ln]
    assert len(children) == 1, [lines[i] for i in children]
    opened = [i for i, ln in enumerate(lines) if ln.split()[0] == parent and "openat(" in ln
              and typed["wrp"].name in ln and "= -1" not in ln]
    assert opened and children[0] < opened[0]


def test_a_refused_replay_kills_the_child_it_started(edited, tmp_path):
    """The prestarted child of a replay refused before it runs is killed, not left importing Warp."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    code, lines = _strace_processes(tmp_path / "strace.txt", tmp_path, "replay", edited["huge"], "--engine", "python")
    assert code == 3
    children = [ln.split()[0] for ln in lines if "execve(" in ln and "wrpkit.run.contain.child" in ln]
    # strace pads a pid to five columns ("7802  +++ killed ..."), so compare words, not text
    ends = [ln.split() for ln in lines if "+++" in ln]
    assert len(children) == 1 and [children[0], "+++", "killed", "by", "SIGKILL", "+++"] in ends, children


def test_native_replay_starts_wrp_replay_before_it_reads_the_capture(typed, tmp_path):
    """``--engine native`` starts its one wrp-replay first: its start and Warp's libraries overlap the checks."""
    _native_or_skip()
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    code, lines = _strace_processes(tmp_path / "strace.txt", tmp_path, "replay", typed["wrp"], "--engine",
                                    "native", "--json")
    assert code == 0
    parent = lines[0].split()[0]
    children = [i for i, ln in enumerate(lines) if "execve(" in ln and "wrp-replay" in ln and "= 0" in ln]
    assert len(children) == 1, [lines[i] for i in children]
    opened = [i for i, ln in enumerate(lines) if ln.split()[0] == parent and "openat(" in ln
              and typed["wrp"].name in ln and "= -1" not in ln]
    assert opened and children[0] < opened[0]


@pytest.mark.parametrize("extra", [(), ("--json",), ("--repeat", "2", "--warmup=1", "--no-verify", "--engine", "native")])
def test_the_default_replay_starts_wrp_replay_before_click_and_uses_it(typed, tmp_path, extra):
    """``wrp replay FILE`` (the common command lines) starts wrp-replay before it imports click
    (wrpkit/cli/replay_start.py), and the command takes that one over: one wrp-replay in all."""
    _native_or_skip()
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    code, lines = _strace_processes(tmp_path / "strace.txt", tmp_path, "replay", typed["wrp"], *extra)
    assert code == 0
    parent = lines[0].split()[0]
    started = [i for i, ln in enumerate(lines) if "execve(" in ln and "wrp-replay" in ln and "= 0" in ln]
    assert len(started) == 1, [lines[i] for i in started]
    click = [i for i, ln in enumerate(lines) if ln.split()[0] == parent and "openat(" in ln
             and "/click/" in ln and "= -1" not in ln]
    assert click and started[0] < click[0]


def test_the_early_start_takes_only_the_command_lines_it_knows():
    from wrpkit.cli.replay_start import parse  # noqa: PLC0415

    assert parse(["a.wrp"]) == {"file": "a.wrp", "repeat": 1, "warmup": 0, "device": "cpu", "engine": "auto",
                                "as_json": False, "no_verify": False}
    assert parse(["--repeat=3", "a.wrp", "--json", "--device", "cpu", "--engine", "native"])["repeat"] == 3
    # click's to parse and word: anything else
    for args in ([], ["a.wrp", "b.wrp"], ["a.wrp", "--output", "o.npz"], ["a.wrp", "--repeat", "0"],
                 ["a.wrp", "--repeat", "x"], ["a.wrp", "--engine", "python"], ["--help"], ["a.wrp", "--"],
                 ["a.wrp", "--repeat"], ["-", "--json"]):
        assert parse(args) is None, args


def test_a_refused_native_replay_allocates_nothing(edited, tmp_path):
    """The prestarted wrp-replay of a file refused for regions no op reaches asks for approval once the file
    is validated and withdraws at the refusal: its 8 GiB region is never mapped."""
    _native_or_skip()
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    log = tmp_path / "strace.txt"
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=execve,read,mmap", _wrp_exe(),
                           "replay", str(edited["unreached"]), "--engine", "native", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "--allow-unreached" in json.loads(proc.stdout)["hint"]
    lines = log.read_text().splitlines()
    started = [ln for ln in lines if "execve(" in ln and "wrp-replay" in ln and "--approve-fd" in ln]
    assert len(started) == 1, started
    pid = started[0].split()[0]
    fd = re.search(r'"--approve-fd", "(\d+)"', started[0]).group(1)
    mine = [ln for ln in lines if ln.split()[0] == pid]
    assert any(f"read({fd}, " in ln for ln in mine), mine[-20:]  # it waited for the approval
    sizes = [int(m.group(1)) for ln in mine for m in [re.search(r"mmap\(NULL, (\d+),", ln)] if m]
    assert sizes and max(sizes) < 1 << 30, sorted(sizes)[-3:]


def test_a_prestarted_replayer_is_used_only_for_its_own_command_line(typed):
    """The replay uses the wrp-replay started for it when the command lines agree (it ends by itself, exit 0);
    otherwise it stops that one and replays in its own: the same answer either way, and no process left."""
    _native_or_skip()
    from wrpkit.run.contain.spawn import held  # noqa: PLC0415
    from wrpkit.run.replay import engines  # noqa: PLC0415
    from wrpkit.run.replay.replay_file import replay_file  # noqa: PLC0415

    want = replay_file(typed["wrp"], engine="native").outputs
    engines.prestart_replayer(typed["wrp"], engines.ReplayRequest(device="cpu"))
    used = held(engines.REPLAYER_KEY)
    assert used is not None
    assert replay_file(typed["wrp"], engine="native").outputs == want
    assert used.child.returncode == 0 and held(engines.REPLAYER_KEY) is None
    engines.prestart_replayer(typed["wrp"], engines.ReplayRequest(device="cpu", repeat=3))
    unused = held(engines.REPLAYER_KEY)
    assert replay_file(typed["wrp"], engine="native").outputs == want
    assert unused.child.returncode is not None and held(engines.REPLAYER_KEY) is None
    # a replay of another file, with the same options: not that one's replayer either
    engines.prestart_replayer(typed["wrpk"], engines.ReplayRequest(device="cpu"))
    other = held(engines.REPLAYER_KEY)
    assert replay_file(typed["wrp"], engine="native").outputs == want
    assert other.child.returncode is not None and other.child.returncode != 0


def test_trace_of_bytes_in_a_child_matches_the_file(typed):
    """Bytes (no path) reach the child through one memory file; the trace is the file's."""
    data = typed["wrp"].read_bytes()
    modules = {p.name: p.read_bytes() for p in (typed["wrp"].parent / "typed_modules").iterdir()}
    got = wrpkit.trace(data, modules=modules, isolate=True).to_json()["ops"]
    assert got == wrpkit.trace(typed["wrp"], isolate=False).to_json()["ops"]


@pytest.mark.slow  # both engines on a JSON capture (about 4 s)
def test_a_json_capture_replays_on_both_engines(typed, stock, tmp_path):
    """wrp-replay reads no JSON: the native engine hands it the same program as a bundle in memory (it used to
    pass the .json's path and fail with "expected WRP1"). Outputs equal the .wrp's on both engines."""
    _native_or_skip()
    for name, src in (("typed", typed["wrp"]), ("stock", stock["wrp"])):
        js = tmp_path / f"{name}.json"
        assert _cli("convert", src, js).returncode == 0
        want = tmp_path / f"{name}_want.npz"
        assert _cli("replay", src, "--output", want).returncode == 0
        for engine in ("python", "native"):
            got = tmp_path / f"{name}_{engine}.npz"
            proc = _cli("replay", js, "--engine", engine, "--output", got)
            assert proc.returncode == 0, (name, engine, proc.stderr)
            a, b = np.load(want), np.load(got)
            assert sorted(a.files) == sorted(b.files) and a.files, (name, engine)
            for k in a.files:
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name} {engine} {k}")
        proc = _cli("replay", js, "--engine", "native", "--json")  # the prestart path: none for a .json
        assert proc.returncode == 0 and json.loads(proc.stdout)["ok"], proc.stderr


@pytest.mark.parametrize("kind", ["wrp", "wrpk"])
def test_outputs_table_is_the_same_in_both_engines_and_matches_numpy(typed, kind):
    """The child (or wrp-replay) summarises Warp's memory in place: the figures are numpy's over a replay."""
    _native_or_skip()
    prog = wrpkit.load(typed[kind])
    want, sigs = prog.run(), prog.signature
    reports = {}
    for engine in ("python", "native"):
        proc = _cli("replay", typed[kind], "--engine", engine, "--json")
        assert proc.returncode == 0, proc.stderr
        reports[engine] = json.loads(proc.stdout)["outputs"]
    for name in ("pos", "count"):
        expect = stats(want[name])
        for engine, outs in reports.items():
            got = outs[name]
            # The one shape convention (docs/op-table.md): the numpy view's shape is numpy_shape.
            assert got["numpy_shape"] == expect["shape"], (engine, got)
            assert got["dtype"] == sigs[name].dtype.name, (engine, got)
            assert (got["nan"], got["inf"]) == (expect["nan"], expect["inf"]), (engine, got)
            assert got["min"] == expect["min"] and got["max"] == expect["max"], (engine, got)
            assert got["mean"] == pytest.approx(expect["mean"], rel=1e-12), (engine, got)
    assert reports["python"]["pos"]["nan"] == 1


@pytest.mark.slow
def test_stock_outputs_are_raw_unless_typed(stock):
    """A stock file records no dtype: raw bytes, unless --dtype types the binding (then the numbers agree)."""
    _native_or_skip()
    for engine in ("python", "native"):
        proc = _cli("replay", stock["wrp"], "--engine", engine, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["outputs"]["count"]["raw"] is True
    want = np.frombuffer(wrpkit.load(stock["wrp"]).run()["count"].tobytes(), np.int32)
    for engine in ("python", "native"):
        proc = _cli("replay", stock["wrpk"], "--engine", engine, "--json", "--dtype", "count=int32")
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)["outputs"]["count"]
        assert got["dtype"] == "int32" and got["min"] == int(want.min()) and got["max"] == int(want.max())


# ---------------------------------------------------------------------------
# Memory checked before it is spent; one out-of-memory status
# ---------------------------------------------------------------------------


@wp.kernel
def k_twice(a: wp.array(dtype=wp.float32), s: wp.array(dtype=wp.float32)):
    i = wp.tid()
    s[i] = a[i] * 2.0
    a[i] = s[i] + 1.0


def _small_stock(d: Path) -> Path:
    a = wp.array(np.arange(1024, dtype=np.float32), device="cpu")
    s = wp.zeros(1024, dtype=wp.float32, device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(k_twice, dim=1024, inputs=[a, s], device="cpu")
    graph = wp.capture_end(device="cpu")
    path = d / "small.wrp"
    wp.capture_save(graph, str(path), inputs={"a": a})
    return path


def _edit_region(src: Path, dst: Path, region_index: int, size: int) -> Path:
    """``src`` with one region declared ``size`` bytes and no initial data (edited as JSON)."""
    js = dst.with_suffix(".json")
    assert _cli("convert", src, js).returncode == 0
    doc = json.loads(js.read_text())
    r = doc["regions"][region_index]
    r["size"], r["has_initial_data"] = size, False
    r.pop("data", None)
    js.write_text(json.dumps(doc))
    proc = _cli("convert", js, dst)
    assert proc.returncode == 0, proc.stderr
    return dst


@pytest.fixture(scope="module")
def edited(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("edited")
    small = _small_stock(d)
    return {"small": small,
            # the scratch array (unbound) declared 8 GiB: the kernel reaches 4 KiB of it
            "unreached": _edit_region(small, d / "unreached.wrp", 1, 8 << 30),
            # the bound input declared 1 TiB: more than any machine has free
            "huge": _edit_region(small, d / "huge.wrp", 0, 1 << 40),
            # the bound input declared 1 GiB of zeros: fits, unless the address space is limited
            "gig": _edit_region(small, d / "gig.wrp", 0, 1 << 30)}


def _wrp_replay_exe() -> str:
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    return str(native_paths().require_replayer())


@pytest.mark.parametrize("engine", ["python", "native"])
def test_an_edited_unreachable_region_is_refused_in_under_5_s(edited, engine):
    import time  # noqa: PLC0415

    if engine == "native":
        _native_or_skip()
    t0 = time.monotonic()
    proc = _cli("replay", edited["unreached"], "--engine", engine, "--json")
    took = time.monotonic() - t0
    assert proc.returncode == 3, proc.stderr
    err = json.loads(proc.stdout)
    assert "region 2 declares 8.0 GiB" in err["error"] and "--allow-unreached" in err["hint"]
    assert took < 5, took


def test_validators_and_check_warn_of_an_unreachable_region(edited):
    v = _cli("validate", edited["unreached"])
    assert v.returncode == 0 and "region 2 declares 8.0 GiB" in v.stdout + v.stderr
    c = _cli("check", edited["unreached"])
    assert "lint-memory" in c.stdout and "region 2 declares 8.0 GiB" in c.stdout
    for f in ("small", "gig"):  # what ops or bindings reach is never flagged
        assert "declares" not in _cli("validate", edited[f]).stdout


@wp.kernel
def k_bump(a: wp.array(dtype=wp.float32)):
    i = wp.tid()
    a[i] = a[i] + 1.0


@pytest.mark.slow  # more than 3 s on two cores: the full suite runs it
def test_a_real_capture_launched_on_a_slice_is_flagged_only_where_no_binding_names_the_array(tmp_path):
    """A capacity buffer (64 MiB) of which a launch uses a slice of 1000 floats, as simulations preallocate:
    saved unbound, its region is flagged (what reaches it is the slice's 4000 bytes) and still replays, being
    under the refusal threshold, with its warning; saved as a binding, nothing is flagged."""
    buf = wp.zeros((64 << 20) // 4, dtype=wp.float32, device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    wp.launch(k_bump, dim=1000, inputs=[buf[:1000]], device="cpu")
    graph = wp.capture_end(device="cpu")
    unbound, bound = tmp_path / "unbound.wrp", tmp_path / "bound.wrp"
    wp.capture_save(graph, str(unbound))
    wp.capture_save(graph, str(bound), inputs={"buf": buf})

    c = _cli("check", unbound)
    assert c.returncode == 0, c.stdout + c.stderr
    assert "lint-memory" in c.stdout and "reaches past byte 4000" in c.stdout
    assert "slice" in c.stdout and "--allow-unreached" in c.stdout  # the likely cause and the way out
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    for engine in ("python", "native") if native_paths().replayer is not None else ("python",):
        r = _cli("replay", unbound, "--engine", engine, "--json")
        assert r.returncode == 0, r.stderr
        assert any("reaches past byte 4000" in w for w in json.loads(r.stdout)["warnings"])
    c, v = _cli("check", bound), _cli("validate", bound)
    assert c.returncode == 0 and "lint-memory" not in c.stdout, c.stdout
    assert v.returncode == 0 and "reaches past" not in v.stdout + v.stderr, v.stdout


def _assert_oom(proc, *words):
    assert proc.returncode == 3, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    text = (proc.stdout + proc.stderr).lower()
    assert "out of memory" in text or "nothing was allocated" in text, text[-2000:]
    for w in words:
        assert w.lower() in text, (w, text[-2000:])


def _assert_oom_json(proc, at_least: int):
    """``--json``: the failure's object says out of memory as a script reads it: exit 3, the bytes asked for."""
    assert proc.returncode == 3, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    obj = json.loads(proc.stdout.strip().splitlines()[-1])
    assert obj["exit_code"] == 3 and obj.get("requested_bytes", 0) >= at_least, obj
    return obj


@pytest.mark.parametrize("budget", [None, "1K"])
def test_an_over_budget_capture_is_refused_in_every_route(edited, budget):
    """1 TiB declared: refused against the host's free memory (or a --max-memory of 1 KiB), before any allocation."""
    _native_or_skip()
    extra = [] if budget is None else ["--max-memory", budget]
    figure = "free" if budget is None else "1024"
    for engine in ("python", "native"):
        _assert_oom(_cli("replay", edited["huge"], "--engine", engine, *extra), "1099511627776", figure)
    _assert_oom(subprocess.run([_wrp_replay_exe(), str(edited["huge"]), *extra], capture_output=True, text=True,
                               timeout=120), "1099511627776", figure)
    for engine in ("python", "native"):
        obj = _assert_oom_json(_cli("replay", edited["huge"], "--engine", engine, "--json", *extra), 1 << 40)
        assert obj["device"] == "cpu", obj
    _assert_oom_json(subprocess.run([_wrp_replay_exe(), str(edited["huge"]), "--json", *extra], capture_output=True,
                                    text=True, timeout=120), 1 << 40)
    with pytest.raises(wrpkit.WrpOutOfMemoryError) as e:
        wrpkit.load(edited["huge"], max_memory=budget)
    assert e.value.requested >= 1 << 40 and e.value.device == "cpu" and e.value.exit_code == 3
    iso = wrpkit.load(edited["huge"], isolate=True, max_memory=budget)
    try:
        with pytest.raises(wrpkit.WrpOutOfMemoryError, match="1099511627776"):
            iso.run()
    finally:
        iso.close()


_IN_PROCESS = """
import sys, wrpkit
try:
    wrpkit.load(sys.argv[1], max_memory="100G", isolate=sys.argv[2] == "1").run()
except wrpkit.WrpOutOfMemoryError as e:
    print("OOM", e.requested, e.device, e)
    sys.exit(3)
"""


def _limited(limit_mb: int, *cmd) -> subprocess.CompletedProcess:
    import resource  # noqa: PLC0415

    def pre():
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    return subprocess.run([str(c) for c in cmd], preexec_fn=pre, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_out_of_memory_injected_with_rlimit_as_is_one_status_in_every_route(edited):
    """The address space is capped below the 1 GiB region (--max-memory lets the check pass): Warp's
    allocation fails, and every route says so the same way: exit 3, out of memory, the size."""
    _native_or_skip()
    limit = 1000  # MiB: room for Python, Warp and LLVM, not for the region too
    if _limited(limit, _wrp_exe(), "replay", edited["small"]).returncode != 0:
        pytest.skip("this interpreter needs more than 1000 MiB of address space to replay at all")
    size = "1073741824"
    for engine in ("python", "native"):
        _assert_oom(_limited(limit, _wrp_exe(), "replay", edited["gig"], "--engine", engine, "--max-memory", "100G"),
                    size)
        # the size crosses from the child (Warp's failure read back; wrp-replay's wrp_last_error_bytes) to --json
        _assert_oom_json(_limited(limit, _wrp_exe(), "replay", edited["gig"], "--engine", engine, "--max-memory",
                                  "100G", "--json"), 1 << 30)
    _assert_oom(_limited(limit, _wrp_replay_exe(), edited["gig"], "--max-memory", "100G"), size)
    _assert_oom_json(_limited(limit, _wrp_replay_exe(), edited["gig"], "--max-memory", "100G", "--json"), 1 << 30)
    for isolate in ("0", "1"):
        proc = _limited(limit, sys.executable, "-c", _IN_PROCESS, edited["gig"], isolate)
        said = [ln for ln in proc.stdout.splitlines() if ln.startswith("OOM ")]
        assert proc.returncode == 3 and said and size in said[0], (proc.stdout, proc.stderr[-2000:])


_IMPORTS_PEAK = """
import numpy, warp, wrpkit.cli.replay, wrpkit.run.contain.child, wrpkit.run.load.program
print(open("/proc/self/status").read().split("VmPeak:")[1].split()[0])
"""


@pytest.mark.slow
def test_an_address_space_too_small_for_warps_library_is_out_of_memory_in_every_route(edited):
    """``ulimit -v`` leaves room for Python and the imports but not for Warp's 285 MiB library: where Warp's
    runtime starts (the python engine's child, wrp-replay, an in-process load), the failure is the one
    out-of-memory status, exit 3, naming the library and its size (it was exit 1 and a traceback's lines)."""
    import warp  # noqa: PLC0415

    _native_or_skip()
    lib = Path(warp.__file__).parent / "bin" / "warp.so"
    size = lib.stat().st_size
    peak = subprocess.run([sys.executable, "-c", _IMPORTS_PEAK], capture_output=True, text=True, timeout=120)
    assert peak.returncode == 0, peak.stderr[-2000:]
    limit = (int(peak.stdout.split()[-1]) << 10) + size // 2  # the imports fit; the library does not
    words = ("warp.so", str(size))
    # the python engine's child (named: the default, --engine auto, is the native engine)
    _assert_oom(_limited(limit >> 20, _wrp_exe(), "replay", edited["small"], "--engine", "python"), *words)
    assert _assert_oom_json(_limited(limit >> 20, _wrp_exe(), "replay", edited["small"], "--engine", "python",
                                     "--json"), size)["requested_bytes"] == size
    _assert_oom(_limited((size // 2) >> 20, _wrp_replay_exe(), edited["small"]), *words)
    assert _assert_oom_json(_limited((size // 2) >> 20, _wrp_replay_exe(), edited["small"], "--json"),
                            size)["requested_bytes"] == size
    # wrp-replay under the native engine: it may fit warp.so and not warp-clang.so; either is named
    _assert_oom(_limited(limit >> 20, _wrp_exe(), "replay", edited["small"], "--engine", "native"),
                "cannot load Warp's library")
    for isolate in ("0", "1"):
        proc = _limited(limit >> 20, sys.executable, "-c", _IN_PROCESS, edited["small"], isolate)
        said = [ln for ln in proc.stdout.splitlines() if ln.startswith("OOM ")]
        assert proc.returncode == 3 and said and f"OOM {size} cpu" in said[0], (proc.stdout, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("WRPKIT_BIG_TESTS") != "1", reason="opt-in: WRPKIT_BIG_TESTS=1 (needs ~10 GiB "
                    "of memory and 9 GiB of disk)")
def test_a_capture_over_4_gib_replays_in_every_route(tmp_path):
    """Over 4 GiB (past any 32-bit size and the old 16 GiB caps' neighbourhood): both engines and wrp-replay."""
    _native_or_skip()
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import make_capture  # noqa: PLC0415

    big = tmp_path / "big.wrp"
    make_capture(big, 4608)  # 4.5 GiB of float32 data
    bundle = tmp_path / "big.wrpk"
    # The bundle's blob offsets and chunk digests pass 4 GiB too; hashed on every route.
    assert _cli("convert", big, bundle).returncode == 0
    for src in (big, bundle):
        for engine in ("python", "native"):
            proc = _cli("replay", src, "--engine", engine, "--json", "--dtype", "a=float32")
            assert proc.returncode == 0, (src.name, engine, proc.stderr[-2000:])
            got = json.loads(proc.stdout)["outputs"]["a"]
            assert got["shape"] == [4608 << 18] and (got["min"], got["max"]) == (1.0, 1999.0), (src.name, got)
        proc = subprocess.run([_wrp_replay_exe(), str(src), "--json", "--stats"], capture_output=True, text=True,
                              timeout=1200)
        assert proc.returncode == 0, (src.name, proc.stderr[-2000:])
        assert json.loads(proc.stdout)["stats"]["a"]["shape"] == [4608 << 20]
        if src is big:
            big.unlink()  # the bundle alone from here: 9 GiB of disk at most


@wp.kernel
def k_fill_views(y: wp.array(dtype=float), g: wp.array2d(dtype=wp.vec2)):
    i = wp.tid()
    y[i] = float(i) * 0.5
    g[i % 8, i // 8] = wp.vec2(float(i), -float(i))


def test_output_of_view_bindings_is_numpys_slice_on_every_route(tmp_path):
    """Bindings saved as strided and offset views (y[1::2], a column of vec2, a sub-block with a step)
    come out of --output as numpy's own slices of an eager run: both engines' .npz, and wrp-replay's
    .npy by path (one copy, after the program is released) and by /dev/fd/N (written in place)."""
    _native_or_skip()
    y = wp.zeros(64, dtype=float, device="cpu")
    g = wp.zeros((8, 8), dtype=wp.vec2, device="cpu")
    wp.load_module(k_fill_views.module, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_fill_views, dim=64, inputs=[y, g], device="cpu")
    path = rec.save(tmp_path / "views.wrp", outputs={"odd": y[1::2], "col": g[:, 3], "block": g[2:5, 1:7:2]})
    wp.launch(k_fill_views, dim=64, inputs=[y, g], device="cpu")
    want = {"odd": y.numpy()[1::2], "col": g.numpy()[:, 3], "block": g.numpy()[2:5, 1:7:2]}
    for engine in ("python", "native"):
        out = tmp_path / f"{engine}.npz"
        proc = _cli("replay", path, "--engine", engine, "--output", out)
        assert proc.returncode == 0, proc.stderr[-2000:]
        with np.load(out) as got:
            for name, arr in want.items():
                assert got[name].shape == arr.shape and got[name].tobytes() == arr.tobytes(), (engine, name)
    args = [a for name in want for a in ("--output", f"{name}={tmp_path / (name + '.npy')}")]
    proc = subprocess.run([_wrp_replay_exe(), str(path), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, arr in want.items():
        got = np.load(tmp_path / f"{name}.npy")
        assert got.shape == arr.shape and got.tobytes() == arr.tobytes(), name
    with open(tmp_path / "fd.npy", "wb") as f:
        proc = subprocess.run([_wrp_replay_exe(), str(path), "--output", f"block=/dev/fd/{f.fileno()}"],
                              pass_fds=(f.fileno(),), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "fd.npy")
    assert got.shape == want["block"].shape and got.tobytes() == want["block"].tobytes()


def test_inputs_and_goldens_are_read_from_their_mapping_and_checked(tmp_path):
    """``.npz``/``.npy`` files the user names are mapped: members numpy.savez stored come back as views of
    the file (no copy of a golden of many GiB), equal to numpy's own reading, their CRC-32 checked;
    compressed members are decompressed. Damage of every kind is a clean refusal."""
    from wrpkit.errors import WrpBindingError  # noqa: PLC0415
    from wrpkit.numpy_files import load_npy, load_npz  # noqa: PLC0415

    arrays = {"f": np.arange(12, dtype=np.float32).reshape(3, 4), "fortran": np.asfortranarray(np.ones((2, 3))),
              "struct": np.zeros(3, dtype=[("x", "<f4"), ("y", "<i2")]), "empty": np.zeros((0, 4), np.int8),
              "scalar": np.array(7, dtype=np.uint16), "vec": np.arange(30, dtype=np.float32).reshape(10, 3)}
    np.savez(tmp_path / "stored.npz", **arrays)
    np.savez_compressed(tmp_path / "packed.npz", **arrays)
    for name in ("stored.npz", "packed.npz"):
        got = load_npz(tmp_path / name)
        with np.load(tmp_path / name) as want:
            assert sorted(got) == sorted(want.files)
            for k in want.files:
                assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and \
                    np.array_equal(got[k], want[k]), (name, k)
        if name == "stored.npz":  # views of the mapping, not copies
            assert not got["vec"].flags.owndata and not got["vec"].flags.writeable
    np.save(tmp_path / "one.npy", arrays["fortran"])
    assert np.array_equal(load_npy(tmp_path / "one.npy"), arrays["fortran"])

    good = (tmp_path / "stored.npz").read_bytes()
    member = good.index(arrays["vec"].tobytes())
    damaged = {"flipped": good[:member + 5] + bytes([good[member + 5] ^ 1]) + good[member + 6:],
               "truncated": good[: len(good) // 2], "empty": b"", "not a zip": b"PK\x03\x04" + b"\0" * 40}
    for what, data in damaged.items():
        (tmp_path / "bad.npz").write_bytes(data)
        with pytest.raises(WrpBindingError, match="not a valid .npz"):
            load_npz(tmp_path / "bad.npz")
    np.save(tmp_path / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    with pytest.raises(WrpBindingError, match="Python objects"):
        load_npy(tmp_path / "objects.npy")
    short = (tmp_path / "one.npy").read_bytes()[:-8]
    (tmp_path / "short.npy").write_bytes(short)
    with pytest.raises(WrpBindingError, match="header declares"):
        load_npy(tmp_path / "short.npy")


class _Buffer(bytearray):
    """Capture bytes whose lifetime a weak reference can watch."""


def test_a_stepping_engine_and_a_validated_model_let_go_of_the_bytes_they_came_from(tmp_path):
    """``wrp profile`` and ``wrp trace`` load rewritten images from bytes; each image used to stay alive
    for the engine's life (the Program held it for reset()), and every validated model stayed alive in
    a module-level cache keyed by id(): a 256 MiB capture profiled at 6.2x its data. Now the engine
    keeps only Warp's copy, release_captured() says what it gives up, and the caches live with the model."""
    import gc  # noqa: PLC0415
    import weakref  # noqa: PLC0415

    from wrpkit.debug import stepper as st  # noqa: PLC0415
    from wrpkit.debug.common import open_program  # noqa: PLC0415
    from wrpkit.formats import wrp1  # noqa: PLC0415
    from wrpkit.run.replay.loaded import open_loaded  # noqa: PLC0415

    cap = _small_stock(tmp_path)
    opened = open_program(cap)
    image = _Buffer(wrp1.encode_wrp1(st.build_stepper(opened.model, empty_leaf=True).program))
    watch = weakref.ref(image)
    eng = open_loaded("python", image, opened.modules, "cpu")
    eng.launch()
    del image
    gc.collect()
    assert watch() is None, "the stepping engine still holds the image it was loaded from"
    with pytest.raises(wrpkit.WrpError, match="release_captured"):
        eng.program.reset()
    eng.close()

    data = _Buffer(Path(cap).read_bytes())
    watch = weakref.ref(data)
    model = open_program(data, opened.modules).model  # decoded and validated (effects of every op)
    del data
    gc.collect()
    assert watch() is not None  # the model's regions are views of it: alive while the model is
    del model
    gc.collect()
    assert watch() is None, "a cache kept the validated model's data alive"
