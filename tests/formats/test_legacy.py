"""Captures of Warp 1.13-1.18 (formats 3, 10, 13, 14, 15, 16): read, round-trip, validate, upgrade, replay.

The fixtures under tests/fixtures/legacy/<release>/ were written by each
release's own capture_save, with the inputs set at replay and the outputs that
release's own replay produced (see the README beside them).  format13/ holds
Warp 1.15 captures rewritten to format 13 (which no release wrote), with the
outputs of 1.15's own replay of the rewritten files.  Each folder's
manifest.json names its format and the Warp that made it.  The replay tests
load the upgraded file with the installed Warp (1.19) and compare every
binding bit for bit with the producer's outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wrpkit.errors import WrpError
from wrpkit.formats.jsonform import dumps, loads
from wrpkit.formats.wrp1 import decode_wrp1, encode_wrp1
from wrpkit.formats.wrpk.builder import encode_wrpk
from wrpkit.formats.wrpk.reader import decode_wrpk
from wrpkit.checks.validate import validate_program
from wrpkit.apic_types import OpType
from proc_helpers import LEGACY_FIXTURES, invoke, run

ROOT = LEGACY_FIXTURES
#: Fixture folders: one per release, plus format13 (see the README beside them).
RELEASES = sorted(p.name for p in ROOT.iterdir() if p.is_dir())
#: folder -> the format its manifest says its files have.
FORMATS = {rel: json.loads((ROOT / rel / "manifest.json").read_text())["format_version"] for rel in RELEASES}
CASES = [(rel, case) for rel in RELEASES for case in json.loads((ROOT / rel / "manifest.json").read_text())["cases"]]
WRP = [sys.executable, "-m", "wrpkit.cli"]


def _case_ids(v):
    return f"{v[0]}-{v[1]}" if isinstance(v, tuple) else str(v)


def _manifest(rel):
    return json.loads((ROOT / rel / "manifest.json").read_text())


def _kernels(rel, case):
    return [str(ROOT / rel / k) for k in _manifest(rel)["cases"][case]["kernel_sources"]] if FORMATS[rel] == 3 else []


def _wrp(*args):
    return run(*WRP, *args, timeout=600)


def test_every_release_and_format_is_covered():
    assert FORMATS == {"1.13.0": 3, "1.14.0": 10, "1.15.0": 14, "1.16.0": 15, "1.17.0": 15, "1.18.0": 16,
                       "format13": 13}
    for rel in RELEASES:
        assert {c["format_version"] for c in _manifest(rel)["cases"].values()} == {FORMATS[rel]}
        assert _manifest(rel)["warp_version"] == (rel if rel[0].isdigit() else "1.15.0")


@pytest.mark.parametrize("rc", CASES, ids=_case_ids)
def test_decode_and_round_trip_in_own_format(rc):
    rel, case = rc
    raw = (ROOT / rel / f"{case}.wrp").read_bytes()
    prog = decode_wrp1(raw)
    assert prog.format_version == FORMATS[rel]
    assert prog.warp_version == ""  # no format before 18 records it
    assert encode_wrp1(prog) == raw
    assert encode_wrp1(decode_wrpk(encode_wrpk(prog))) == raw
    back, _ = loads(dumps(prog))
    assert encode_wrp1(back) == raw
    ops = _manifest(rel)["cases"][case]["top_level_ops"]
    assert [int(op.op_type) for op in prog.ops] == ops
    assert [p for p in validate_program(prog) if p.severity == "error"] == []


def test_format3_arguments_decode_as_descriptors():
    prog = decode_wrp1((ROOT / "1.13.0" / "saxpy.wrp").read_bytes())
    (launch,) = prog.ops
    a, x = launch.legacy_args[:2]
    assert (a.is_array, a.param_index, a.region_id, a.byte_offset) == (0, 1, -1, 4)
    assert np.frombuffer(a.scalar_bytes(), np.float32)[0] == 2.5
    assert (x.is_array, x.ndim, x.shape[0], x.strides[0], x.element_size) == (1, 1, 32, 4, 4)
    assert launch.params == [] and len(launch.value_data) == 0
    assert [k.block_dim for k in prog.kernels] == [256]


def test_collision_collapses_in_formats_3_and_10_only():
    for rel in [rel for rel in RELEASES if "collision" in _manifest(rel)["cases"]]:
        prog = decode_wrp1((ROOT / rel / "collision.wrp").read_bytes())
        assert len(prog.modules) == 2
        assert len(prog.kernels) == (1 if FORMATS[rel] in (3, 10) else 2)
        warns = [p for p in validate_program(prog) if p.severity == "warning" and "no kernel record" in str(p)]
        assert len(warns) == (1 if FORMATS[rel] in (3, 10) else 0)


def test_old_op_types_are_refused_in_a_format_without_them():
    raw = bytearray((ROOT / "1.15.0" / "scan.wrp").read_bytes())
    raw[4:8] = (10).to_bytes(4, "little")
    prog_meta = decode_wrp1((ROOT / "1.15.0" / "scan.wrp").read_bytes())
    meta_off = 160
    raw[meta_off:meta_off + 4] = (10).to_bytes(4, "little")
    with pytest.raises(Exception, match="SCAN, which format 10 does not have"):
        decode_wrp1(bytes(raw))
    assert prog_meta.format_version == 14


def _bsr_transpose_13():
    prog = decode_wrp1((ROOT / "format13" / "bsr_transpose.wrp").read_bytes())
    (op,) = [op for op in prog.ops if op.op_type == OpType.BSR_TRANSPOSE]
    return prog, op


def test_format13_files_say_13_and_a_padded_transpose_has_no_tail():
    for case in _manifest("format13")["cases"]:
        raw = (ROOT / "format13" / f"{case}.wrp").read_bytes()
        assert struct.unpack_from("<I", raw, 4)[0] == 13
        assert decode_wrp1(raw).format_version == 13  # the decoder also holds the metadata's version to it
    prog, op = _bsr_transpose_13()
    raw = (ROOT / "format13" / "bsr_transpose.wrp").read_bytes()
    assert op.transposed_row_counts_region_id >= 0 and op.padded_tail == ()
    assert struct.unpack_from("<II", raw, op.at) == (int(OpType.BSR_TRANSPOSE), 116)  # the fixed record only
    assert _manifest("format13")["cases"]["bsr_transpose"]["rewritten_from"]["bsr_transpose_tail_bytes_removed"] == 24
    # 1.15's replays of its format-13 files gave what its replays of its own format-14 captures gave.
    for case in set(_manifest("format13")["cases"]) & set(_manifest("1.15.0")["cases"]):
        assert _expected("format13", case) == _expected("1.15.0", case), case
    # From format 14 the same padded record must carry col_count + 1 capacity offsets.
    problems = [str(p) for p in validate_program(replace(prog, format_version=14)) if p.severity == "error"]
    assert problems and all("capacity offsets; expected 6" in p for p in problems)


def test_format13_transpose_gains_the_snapshot_capacity_on_upgrade(tmp_path):
    import wrpkit

    dst = tmp_path / "up.wrp"
    res = wrpkit.upgrade(_src(tmp_path, "format13", "bsr_transpose"), dst)
    (op,) = [op for op in decode_wrp1(dst.read_bytes()).ops if op.op_type == OpType.BSR_TRANSPOSE]
    # The capacity Warp 1.15 read from the destination offsets, which its replay left as they were.
    assert op.padded_tail == tuple(np.load(ROOT / "format13" / "bsr_transpose_expected.npz")["dst_offsets"])
    assert len(op.padded_tail) == op.col_count + 1 == 6
    assert any("GH-1587" in n for n in res.report.notes)


def test_format13_transpose_without_snapshot_capacity_is_refused():
    from wrpkit.formats.upgrade import upgrade_program

    prog, op = _bsr_transpose_13()
    prog.regions = [replace(r, has_initial_data=False, data=None) if r.region_id == op.transposed_offsets_region_id
                    else r for r in prog.regions]
    with pytest.raises(WrpError, match="no capacity offsets") as e:
        upgrade_program(prog, "1.19.0")
    assert "Recapture" in e.value.hint


@pytest.mark.parametrize("rel", RELEASES)
def test_cli_inspect_validate_convert_work_on_old_files(rel, tmp_path):
    # In this process (click's runner): the commands, not the interpreter's start, are under test.
    src = ROOT / rel / "saxpy.wrp"
    r = invoke("inspect", "--json", src)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["format_version"] == FORMATS[rel]
    r = invoke("validate", src)
    assert r.exit_code == 0, r.stdout + r.stderr
    for ext in ("wrpk", "json"):
        r = invoke("convert", src, tmp_path / f"s.{ext}")
        assert r.exit_code == 0, r.stderr
        r = invoke("convert", tmp_path / f"s.{ext}", tmp_path / f"back_{ext}.wrp")
        assert r.exit_code == 0, r.stderr
        assert (tmp_path / f"back_{ext}.wrp").read_bytes() == src.read_bytes()


@pytest.mark.parametrize("rel", RELEASES)
def test_check_names_the_writer_and_points_to_upgrade(rel):
    r = invoke("check", "--json", ROOT / rel / "saxpy.wrp")
    assert r.exit_code == 1
    f = next(f for f in json.loads(r.stdout)["findings"] if f["check"] == "warp-version")
    assert f["status"] == "fail"
    made_by = _manifest(rel)["warp_version"]
    writer = "written by Warp" if made_by == rel else "written by no released Warp"
    assert f"format {FORMATS[rel]} ({writer}" in f["message"] and made_by in f["message"]
    assert "wrp upgrade" in f["fix"]
    assert ("--kernels" in f["fix"]) == (FORMATS[rel] == 3)


@pytest.mark.parametrize("rel", ["1.13.0", "1.14.0", "1.18.0"])
@pytest.mark.parametrize("engine", ["python", "native"])
def test_replay_names_the_format_and_the_upgrade_command(rel, engine, tmp_path):
    """Both engines refuse an old file with exit 3 and wrp-replay's own text, and write nothing."""
    from wrpkit.formats.wrp1_layout import upgrade_message

    out = tmp_path / "out.npz"
    r = _wrp("replay", ROOT / rel / "saxpy.wrp", "--engine", engine, "--output", out, "--json")
    assert r.returncode == 3, r.stdout + r.stderr
    err = json.loads(r.stdout)
    assert upgrade_message(FORMATS[rel]) in err["error"] and err["exit_code"] == 3
    assert "wrp upgrade" in err["hint"] and not out.exists()


# -- upgrade and replay with the installed Warp ---------------------------------------------------------------------

# Stock Warp replays each upgraded file in a process of its own, with a kernel cache of its own (what
# a fresh `wp.capture_load` in a new process sees).  One server imports numpy and Warp once, and
# forks that process per file (before Warp is initialised: no thread to lose, no CUDA state),
# so a case costs a fork and Warp's start, not a Python start and `import warp`.
REPLAY_SERVER = r"""
import json, os, sys
import numpy as np
import warp as wp


def replay(path, inputs, expected, cache, out):
    wp.config.quiet = True
    wp.config.kernel_cache_dir = cache
    g = wp.capture_load(path, device="cpu")
    ins = np.load(inputs)
    for k in ins.files:
        g.set_param(k, wp.array(np.ascontiguousarray(ins[k]).view(np.uint8).ravel(), dtype=wp.uint8, device="cpu"))
    wp.capture_launch(g)
    exp = np.load(expected)
    got = {}
    for k in exp.files:
        buf = wp.zeros(exp[k].nbytes, dtype=wp.uint8, device="cpu")
        g.get_param(k, buf)
        got[k] = buf.numpy()
    np.savez(out, **got)


for line in sys.stdin:
    job = json.loads(line)
    err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pid = os.fork()
    if pid == 0:
        os.dup2(err, 1)
        os.dup2(err, 2)
        code = 1
        try:
            replay(*job["args"])
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(err)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@pytest.fixture(scope="module")
def stock_replayer():
    """``replay(args, stderr_path) -> exit code``: stock Warp's replay of one file in a fresh fork."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", REPLAY_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)

    def replay(args, stderr_path) -> int:
        proc.stdin.write(json.dumps({"args": [str(a) for a in args], "stderr": str(stderr_path)}) + "\n")
        proc.stdin.flush()
        answer = proc.stdout.readline()
        assert answer, "the stock replay server ended"
        return int(answer)

    yield replay
    proc.stdin.close()
    proc.wait(timeout=60)


def _replay(stock_replayer, tmp_path, wrp, rel, case) -> dict:
    out, err = tmp_path / "got.npz", tmp_path / "replay.err"
    code = stock_replayer([wrp, ROOT / rel / f"{case}_inputs.npz", ROOT / rel / f"{case}_expected.npz",
                           tmp_path / "cache", out], err)
    assert code == 0, err.read_text()[-3000:]
    got = np.load(out)
    return {k: got[k].tobytes() for k in got.files}


def _expected(rel, case) -> dict:
    exp = np.load(ROOT / rel / f"{case}_expected.npz")
    return {k: np.ascontiguousarray(exp[k]).tobytes() for k in exp.files}


def _src(tmp_path, rel, case) -> Path:
    """The fixture (empty <stem>_modules/ recreated: git does not store empty folders)."""
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    shutil.copy(ROOT / rel / f"{case}.wrp", d)
    mods = ROOT / rel / f"{case}_modules"
    if mods.is_dir():
        shutil.copytree(mods, d / f"{case}_modules")
    return d / f"{case}.wrp"


@pytest.mark.parametrize("rc", CASES, ids=_case_ids)
def test_upgrade_replays_bit_identically_to_the_producer(rc, tmp_path, stock_replayer):
    import wrpkit

    rel, case = rc
    dst = tmp_path / "out" / f"{case}.wrp"
    dst.parent.mkdir()
    res = wrpkit.upgrade(_src(tmp_path, rel, case), dst, kernels=_kernels(rel, case))
    prog = decode_wrp1(dst.read_bytes())
    assert prog.format_version == 18 and prog.warp_version == res.report.producer_version
    assert [p for p in validate_program(prog) if p.severity == "error"] == []
    routes = {k.route for k in res.report.kernels}
    if FORMATS[rel] == 3:
        assert routes <= {"rebuilt", "rebuilt, collision:producer"} and routes
    elif case == "collision" and rel == "1.14.0":
        assert routes == {"collision:producer"}
    elif res.report.kernels:
        assert routes == {"kept"}
    assert _replay(stock_replayer, tmp_path, dst, rel, case) == _expected(rel, case)


@pytest.mark.parametrize("rel", ["1.13.0", "1.14.0"])
def test_collision_intent_runs_each_modules_kernel(rel, tmp_path, stock_replayer):
    import wrpkit

    dst = tmp_path / "c.wrp"
    res = wrpkit.upgrade(_src(tmp_path, rel, "collision"), dst, collision="intent",
                         kernels=_kernels(rel, "collision"))
    assert res.report.collision == "intent"
    prog = decode_wrp1(dst.read_bytes())
    assert len(prog.kernels) == 2
    got = _replay(stock_replayer, tmp_path, dst, rel, "collision")
    # What Warp 1.15+ replayed for the same case and inputs: out_b = 3x + 1.
    assert got == _expected("1.15.0", "collision")
    assert got != _expected(rel, "collision")


def test_format3_without_kernels_is_refused_and_writes_nothing(tmp_path):
    import wrpkit

    dst = tmp_path / "o.wrp"
    with pytest.raises(WrpError, match="never kept.*--kernels|rebuilt by the installed Warp") as e:
        wrpkit.upgrade(_src(tmp_path, "1.13.0", "saxpy"), dst)
    assert "--kernels" in e.value.hint
    assert not dst.exists() and not (tmp_path / "o_modules").exists()
    r = _wrp("upgrade", ROOT / "1.13.0" / "saxpy.wrp", tmp_path / "o2.wrp")
    assert r.returncode != 0 and "--kernels" in r.stderr


def test_cli_upgrade_writes_wrpk_with_module_digests(tmp_path):
    from wrpkit.formats.annotations import read_annotations

    dst = tmp_path / "s.wrpk"
    r = _wrp("upgrade", "--json", _src(tmp_path, "1.16.0", "struct"), dst)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["source_format"] == 15 and rep["format_version"] == 18 and rep["collision"] == "producer"
    assert [k["route"] for k in rep["kernels"]] == ["kept"]
    prog = decode_wrpk(dst.read_bytes())
    digests = read_annotations(prog).digest_map()
    assert set(digests) == {m.binary_filename for m in prog.modules}
    assert all(digests[m.binary_filename].matches(bytes(m.binary)) for m in prog.modules)
    assert _wrp("validate", dst).returncode == 0


def test_wrp_replay_refuses_old_formats_and_points_to_upgrade(tmp_path):
    exe = shutil.which("wrp-replay", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("wrp-replay is not built in this environment")
    from wrpkit.formats.wrp1_layout import describe_format, upgrade_message

    for rel in RELEASES:
        r = subprocess.run([exe, str(ROOT / rel / "saxpy.wrp")], capture_output=True, text=True, timeout=60)
        assert r.returncode == 3, (rel, r.returncode, r.stderr)
        assert r.stderr == f"wrp-replay: error: {upgrade_message(FORMATS[rel])}\n"
        r = subprocess.run([exe, str(ROOT / rel / "saxpy.wrp"), "--list"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith(describe_format(FORMATS[rel]) + "\n"), r.stdout + r.stderr


def test_wrp_replay_warns_as_wrp_validate_does_on_every_fixture():
    """The C++ validator's warnings on a launch (a kernel-key collision in formats 3 and 10, a launch
    past its arrays) are wrpkit validate's, word for word, on every committed capture."""
    exe = shutil.which("wrp-replay", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("wrp-replay is not built in this environment")
    seen = 0
    for rel in RELEASES:
        for path in sorted((ROOT / rel).glob("*.wrp")):
            prog = decode_wrp1(path.read_bytes())
            want = [f"{p.where}: {p.message}" for p in validate_program(prog)
                    if p.severity == "warning" and p.where.startswith("ops")]
            r = subprocess.run([exe, str(path), "--list", "--json"], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (path, r.stderr)
            assert json.loads(r.stdout)["warnings"] == want, path
            seen += len(want)
    assert seen > 0  # the 1.13 and 1.14 collision cases warn
