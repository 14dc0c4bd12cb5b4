"""The `wrp` command line on real captures: inspect, validate and convert as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import warp as wp

import programs
from proc_helpers import ROOT, invoke as wrp


@wp.kernel
def k_wave(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.vec2)):
    i = wp.tid()
    y[i] = wp.vec2(wp.sin(x[i]), x[i] * 3.0 - 1.0)


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_inspect_json_counts_match_the_ops_issued(captures, name):
    res = wrp("inspect", captures[name], "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    expected = {k: v for k, v in programs.PROGRAMS[name].op_counts.items() if v}
    assert info["op_counts"] == expected
    assert info["op_total"] == sum(expected.values())
    assert info["format_version"] == 18 and info["device"] == "cpu" and info["target_arch"] == 0
    assert [b["name"] for b in info["bindings"]] == programs.PROGRAMS[name].bindings  # one row per binding
    assert all(mod["present"] for mod in info["modules"])
    launches = sum(k["launches"] for k in info["kernels"])
    assert launches == expected.get("KERNEL_LAUNCH", 0)
    assert "ops" not in info


def test_inspect_json_with_ops_lists_nested_bodies(captures):
    info = json.loads(wrp("inspect", captures["nested_cond"], "--json", "--ops").stdout)

    def count(ops):
        return sum(1 + sum(count(op.get(b, [])) for b in ("then_ops", "else_ops", "body")) for op in ops)

    assert count(info["ops"]) == info["op_total"]
    names = {op["op"] for op in info["ops"]}
    assert names <= {"KERNEL_LAUNCH", "IF", "WHILE"} and "WHILE" in names
    assert all(isinstance(op["offset"], int) and op["offset"] >= 160 for op in info["ops"])


def test_inspect_ops_indents_nested_bodies(captures):
    res = wrp("inspect", captures["nested_cond"], "--ops")
    assert res.exit_code == 0
    lines = [ln for ln in res.stdout.splitlines() if "WHILE" in ln or "IF" in ln or "KERNEL_LAUNCH" in ln]
    indents = {len(ln) - len(ln.lstrip()) for ln in lines}
    assert len(indents) >= 3  # top level, inside WHILE, inside IF


def test_inspect_reports_missing_modules(captures, tmp_path):
    lone = tmp_path / "lone.wrp"
    lone.write_bytes(captures["views"].read_bytes())
    info = json.loads(wrp("inspect", lone, "--json").stdout)
    assert info["modules"] and not any(m["present"] for m in info["modules"])
    assert wrp("validate", lone).exit_code == 3


def test_inspect_does_not_import_warp(captures):
    code = ("import sys; from click.testing import CliRunner; from wrpkit.cli import main; "
            f"r = CliRunner().invoke(main, ['inspect', {str(captures['views'])!r}, '--json']); "
            "assert r.exit_code == 0, r.output; "
            "assert 'warp' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("name", ["views", "nested_cond", "mesh"])
def test_wrp_inspect_starts_without_click_or_rich_and_prints_what_click_prints(captures, name, tmp_path):
    """Issue 42 (start-up): `wrp inspect FILE [--json|--ops]`, stdout a file, runs without click
    (wrpkit/cli/inspect_run.py) and, but for --ops, without rich, and prints byte for byte what the click
    command prints with rich."""
    cases = [(flags, rich, cols) for flags, rich in (([], False), (["--json"], False), (["--ops"], True))
             for cols in ("80", "250")]
    for flags, rich, cols in cases:
        out = tmp_path / "out.txt"
        code = ("import sys; from wrpkit.__main__ import main; "
                f"sys.argv = ['wrp', 'inspect', {str(captures[name])!r}, *{flags!r}]; "
                f"out = open({str(out)!r}, 'w', encoding='utf-8'); sys.stdout = out; rc = main(); out.close(); "
                "sys.stdout = sys.__stdout__; print(rc, 'click' in sys.modules, 'rich' in sys.modules)")
        env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
        env["COLUMNS"] = cols
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                             stdin=subprocess.DEVNULL, check=True)
        assert res.stdout.split() == ["0", "False", str(rich)], (flags, res.stdout, res.stderr)
        via_click = subprocess.run([sys.executable, "-c", "import sys; from wrpkit.cli import inspect_run, main; "
                                    "inspect_run._plain_text = lambda items: None; "  # rich prints the tables
                                    "main.main(sys.argv[1:], prog_name='wrp')", "inspect", str(captures[name]),
                                    *flags], capture_output=True, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        assert via_click.returncode == 0, via_click.stderr
        assert out.read_bytes() == via_click.stdout, flags


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_validate_accepts_every_real_capture(captures, name):
    res = wrp("validate", captures[name], "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["valid"] is True


@pytest.mark.parametrize("ext", [".wrpk", ".json"])
def test_convert_round_trips_byte_identically(captures, tmp_path, ext):
    for name in ("views", "nested_cond", "bsr", "mesh"):
        src = captures[name]
        mid = tmp_path / f"{name}{ext}"
        back = tmp_path / "back" / f"{name}.wrp"
        assert wrp("convert", src, mid).exit_code == 0
        res = wrp("convert", mid, back)
        assert res.exit_code == 0, res.output
        assert back.read_bytes() == src.read_bytes()
        orig = src.with_name(src.stem + "_modules")
        for f in orig.iterdir():
            assert (back.with_name(back.stem + "_modules") / f.name).read_bytes() == f.read_bytes()


def test_bad_inputs_get_one_clear_message_and_exit_3(captures, tmp_path):
    data = captures["views"].read_bytes()
    cases = {"truncated.wrp": data[:100], "notwrp.wrp": b"PK\x03\x04" + bytes(200),
             "version.wrp": data[:4] + b"\x63\0\0\0" + data[8:]}
    for fname, content in cases.items():
        p = tmp_path / fname
        p.write_bytes(content)
        for cmd in ("inspect", "validate"):
            res = wrp(cmd, p)
            assert res.exit_code == 3, (fname, cmd, res.output)
            assert res.output.startswith("error:") or "error" in res.output
            assert "Traceback" not in res.output


def test_convert_refuses_unknown_extension_and_same_file(captures, tmp_path):
    res = wrp("convert", captures["views"], tmp_path / "x.zip")
    assert res.exit_code != 0 and ".wrpk" in res.output
    assert not (tmp_path / "x.zip").exists()
    res = wrp("convert", captures["views"], captures["views"])
    assert res.exit_code != 0


def test_help_explains_every_command():
    res = wrp("--help")
    for cmd in ("inspect", "validate", "check", "convert", "replay"):
        assert cmd in res.output
        assert wrp(cmd, "--help").exit_code == 0


_NATIVE_REPLAY_SCRIPT = r"""
import json, sys
from click.testing import CliRunner
from wrpkit.cli import main
r = CliRunner().invoke(main, [sys.argv[1], sys.argv[2]] + (["--engine", "native"] if sys.argv[1] == "replay" else [])
                       + ["--json"])
assert r.exit_code == 0, r.output
print(json.dumps({"report": json.loads(r.stdout),
                  "loaded": [m for m in ("numpy", "warp", "flatbuffers") if m in sys.modules]}))
"""


def test_start_up_loads_only_what_the_file_needs(tmp_path, replayer):
    """The native engine's parent needs numpy only for arrays it handles: without inputs,
    --check or --output, wrp-replay summarises the outputs, and for a stock capture this
    process never loads numpy (about a tenth of a second).  A capture saved by wrpkit has
    a signature, whose layout numpy types; its annotations are read without the FlatBuffers
    runtime, so `wrp inspect` of it loads neither.  The summary is still the eager run's."""
    import numpy as np  # noqa: PLC0415
    import warp as wp  # noqa: PLC0415

    import wrpkit  # noqa: PLC0415

    x0 = np.linspace(-2, 2, 300, dtype=np.float32)

    def arrays():
        return wp.array(x0, device="cpu"), wp.zeros(300, dtype=wp.vec2, device="cpu")

    x, y = arrays()
    wp.launch(k_wave, dim=300, inputs=[x, y], device="cpu")
    eager = y.numpy()
    x, y = arrays()
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_wave, dim=300, inputs=[x, y], device="cpu")
    typed = tmp_path / "typed.wrp"
    rec.save(typed, inputs={"x": x}, outputs={"y": y})
    stock = tmp_path / "stock.wrp"
    wp.capture_save(rec.graph, str(stock))

    def run(*args):
        out = subprocess.run([sys.executable, "-c", _NATIVE_REPLAY_SCRIPT, *map(str, args)], capture_output=True,
                             text=True, check=True, cwd=tmp_path)
        return json.loads(out.stdout)

    got = run("replay", stock)
    assert got["loaded"] == [], got["loaded"]
    assert [s["dtype"] for s in got["report"]["outputs"].values()] == ["raw bytes"] * 2  # a stock file types nothing
    got = run("replay", typed)
    assert "warp" not in got["loaded"] and "flatbuffers" not in got["loaded"], got["loaded"]
    s = got["report"]["outputs"]["y"]
    assert (s["dtype"], s["shape"]) == ("vec2f", [300])
    assert s["min"] == pytest.approx(float(eager.min()), rel=1e-6)
    assert s["max"] == pytest.approx(float(eager.max()), rel=1e-6)
    assert s["mean"] == pytest.approx(float(eager.astype(np.float64).mean()), rel=1e-5)
    got = run("inspect", typed)
    assert got["loaded"] == [], got["loaded"]
    assert [(b["name"], b["dtype"]) for b in got["report"]["bindings"]] == [("x", "float32"), ("y", "vec2f")]
