"""Every op knows its line of Python: call sites recorded by ``wrpkit.capture`` and kernel definition lines.

The captures are made at test time, in a subprocess, by a small multi-file program written into
``tmp_path``: kernels in one file, a step function in another (``wp.launch``, ``wp.copy``,
``array.zero_``, ``array.fill_``, ``wp.capture_if``, ``wp.capture_while``), a main script calling it.
Every expected line number is found by searching the source written here, never hard-coded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proc_helpers import invoke as wrp
from wrpkit.checks.sources import Sources, iter_op_paths, parse_path, path_text, resolve
from wrpkit.formats import annotations as ann
from wrpkit.formats.container import open_capture

KERNELS = '''\
import warp as wp


@wp.kernel
def scale(a: wp.array(dtype=float), s: float):
    i = wp.tid()
    a[i] = a[i] * s


@wp.kernel
def count_down(c: wp.array(dtype=wp.int32)):
    c[0] = c[0] - 1


@wp.kernel
def poison(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = wp.log(a[i] - a[i] - 1.0)
'''

STEP = '''\
import warp as wp

from simpkg.kernels import count_down, poison, scale


def _then(a):
    wp.launch(scale, dim=a.shape[0], inputs=[a, 0.5], device=a.device)  # SITE then-launch


def _body(a, c):
    wp.launch(scale, dim=a.shape[0], inputs=[a, 1.5], device=a.device)  # SITE body-launch
    wp.launch(count_down, dim=1, inputs=[c], device=a.device)  # SITE body-count


def step(a, b, c, flag, nan=False):
    wp.launch(scale, dim=a.shape[0], inputs=[a, 2.0], device=a.device)  # SITE launch
    wp.copy(b, a)  # SITE copy
    b.zero_()  # SITE zero
    b.fill_(3.0)  # SITE fill
    wp.capture_if(flag, on_true=lambda: _then(a))  # SITE if
    wp.capture_while(c, lambda: _body(a, c))  # SITE while
    if nan:
        wp.launch(poison, dim=a.shape[0], inputs=[a], device=a.device)  # SITE poison
'''

MAIN = '''\
import sys

import numpy as np
import warp as wp

wp.config.quiet = True
import wrpkit

from simpkg.step import step


def main(out, stock=False, nan=False, call_sites=True):
    a = wp.array(np.arange(1, 9, dtype=np.float32), device="cpu")
    b = wp.zeros(8, dtype=float, device="cpu")
    c = wp.array([3], dtype=wp.int32, device="cpu")
    flag = wp.array([1], dtype=wp.int32, device="cpu")
    step(a, b, c, flag)  # compiles the modules outside the capture
    c.fill_(3)
    if stock:
        wp.capture_begin(device="cpu", apic=True)
        step(a, b, c, flag, nan=nan)
        graph = wp.capture_end(device="cpu")
        wp.capture_save(graph, out[:-4], inputs={"a": a}, outputs={"a": a, "b": b})
        return
    with wrpkit.capture(device="cpu", call_sites=call_sites) as rec:
        step(a, b, c, flag, nan=nan)  # SITE main-step
    rec.save(out, inputs={"a": a}, outputs={"a": a, "b": b})


if __name__ == "__main__":
    main(sys.argv[1], stock="--stock" in sys.argv, nan="--nan" in sys.argv,
         call_sites="--no-call-sites" not in sys.argv)
'''


def _line(text: str, marker: str) -> int:
    """1-based line of the source line holding ``# SITE marker`` (or starting with ``marker``)."""
    for n, line in enumerate(text.splitlines(), 1):
        if line.rstrip().endswith(f"# SITE {marker}") or line.startswith(marker):
            return n
    raise AssertionError(f"{marker!r} not in the source")


def _project(root: Path) -> Path:
    pkg = root / "simpkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(KERNELS)
    (pkg / "step.py").write_text(STEP)
    (root / "main.py").write_text(MAIN)
    return root


def _capture(root: Path, name: str, *flags) -> Path:
    out = root / name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    # Run from elsewhere: the program's root is main.py's folder, not the working directory.
    res = subprocess.run([sys.executable, str(root / "main.py"), str(out), *flags], cwd=str(root.parent), env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = _project(tmp_path_factory.mktemp("callsites") / "proj")
    return {"root": root, "wrp": _capture(root, "sim.wrp"), "nan": _capture(root, "nan.wrp", "--nan"),
            "stock": _capture(root, "stock.wrp", "--stock")}


def _expected(root: Path) -> dict:
    """``{op path text: (file, line)}`` the capture must name, found from the source text."""
    step = "simpkg/step.py"
    s = STEP
    return {
        "0": (step, _line(s, "launch")), "1": (step, _line(s, "copy")), "2": (step, _line(s, "zero")),
        "3": (step, _line(s, "fill")), "4": (step, _line(s, "if")), "4.0": (step, _line(s, "then-launch")),
        "5": (step, _line(s, "while")), "5.0": (step, _line(s, "body-launch")),
        "5.1": (step, _line(s, "body-count")),
    }


def test_every_op_names_the_file_and_line_of_its_call(project):
    cap = open_capture(project["wrp"])
    prog = cap.program
    a = ann.read_annotations(prog)
    assert a.source_root == "proj"
    sources = Sources.of(prog)
    expected = _expected(project["root"])
    seen = {path_text(p): op for p, op in iter_op_paths(prog.ops)}
    assert set(seen) == set(expected), sorted(seen)
    for text, (file, line) in expected.items():
        src = sources.op(text)
        assert src is not None, f"op {text} ({type(seen[text]).__name__}) has no call site"
        assert (src["file"], src["line"]) == (file, line), (text, src)
        # the stack runs out through the user's code to main.py's call of step()
        assert src["stack"][0] == {k: src[k] for k in ("file", "line", "function")}
        files = [f["file"] for f in src["stack"]]
        assert "main.py" in files and all(not f.startswith("/") for f in files), src["stack"]
        main_frame = next(f for f in src["stack"] if f["file"] == "main.py")
        assert main_frame["line"] == _line(MAIN, "main-step") and main_frame["function"] == "main"
    assert sources.op("4.0")["function"] == "_then"
    assert [f["function"] for f in sources.op("5.1")["stack"][:2]] == ["_body", "<lambda>"]
    # every op of the stream has one, and tuple paths agree with the text
    assert len(a.call_sites) == len(seen)
    assert parse_path("4.0") == (4, 0, 0) and path_text((4, 1, 2)) == "4.e2"
    assert resolve(prog.ops, (5, 0, 1)) is seen["5.1"] and resolve(prog.ops, (9,)) is None


def test_kernels_carry_their_definition_line(project):
    prog = open_capture(project["wrp"]).program
    a = ann.read_annotations(prog)
    lines = {k.kernel_key: (k.source_file, k.source_line) for k in a.kernel_signatures}
    for name in ("scale", "count_down"):
        assert lines[name] == ("simpkg/kernels.py", _line(KERNELS, f"def {name}(")), lines


def test_inspect_ops_shows_sources_as_text_and_json(project):
    exp = _expected(project["root"])
    res = wrp("inspect", project["wrp"], "--ops")
    assert res.exit_code == 0, res.output
    file, line = exp["5.1"]
    assert f"at {file}:{line} in _body()" in res.output
    assert f"simpkg/kernels.py:{_line(KERNELS, 'def scale(')}" in res.output  # the kernels table
    res = wrp("inspect", project["wrp"], "--ops", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["source_root"] == "proj"
    ops = info["ops"]
    assert ops[0]["source"]["file"] == exp["0"][0] and ops[0]["source"]["line"] == exp["0"][1]
    assert ops[0]["source"]["function"] == "step" and ops[0]["source"]["stack"][-1]["file"] == "main.py"
    assert ops[4]["then_ops"][0]["source"]["line"] == exp["4.0"][1]
    assert ops[5]["body"][1]["source"]["line"] == exp["5.1"][1]
    kernels = {k["kernel_key"]: k for k in info["kernels"]}
    assert kernels["scale"]["source"] == {"file": "simpkg/kernels.py", "line": _line(KERNELS, "def scale(")}


def test_profile_aggregates_per_call_site(project):
    res = wrp("profile", project["wrp"], "--repeat", "1", "--warmup", "0", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{"):])
    sites = {r["call_site"]: r for r in data["call_sites"]}
    exp = _expected(project["root"])
    body = f"{exp['5.1'][0]}:{exp['5.1'][1]}"
    assert body in sites and sites[body]["calls"] == 3 and sites[body]["names"] == ["count_down"], sites
    assert f"{exp['0'][0]}:{exp['0'][1]}" in sites
    # every op run of the step is under exactly one call site
    assert sum(r["calls"] for r in sites.values()) == len(data["ops"])
    res = wrp("profile", project["wrp"], "--repeat", "1", "--warmup", "0")
    assert res.exit_code == 0, res.output
    assert "by call site" in res.output and f"{exp['0'][0]}:{exp['0'][1]}" in res.output


def test_trace_names_the_line_of_the_first_nan(project):
    res = wrp("trace", project["nan"], "--stop-at-nonfinite", "--json")
    assert res.exit_code == 1, res.output
    data = json.loads(res.output[res.output.index("{"):])
    nf = data["first_nonfinite"]
    assert nf["kernel"] == "poison"
    assert (nf["source"]["file"], nf["source"]["line"]) == ("simpkg/step.py", _line(STEP, "poison"))
    res = wrp("trace", project["nan"], "--stop-at-nonfinite")
    assert f"at simpkg/step.py:{_line(STEP, 'poison')} in step()" in res.output.replace("\n    ", " ")


def test_graph_and_diff_name_call_sites(project):
    from wrpkit.debug.graph import build_graph  # noqa: PLC0415

    prog = open_capture(project["wrp"]).program
    page = json.dumps(build_graph(prog).to_json())
    assert f"simpkg/step.py:{_line(STEP, 'body-count')} in _body()" in page
    assert f"simpkg/kernels.py:{_line(KERNELS, 'def scale(')}" in page  # "defined at"
    res = wrp("diff", project["wrp"], project["nan"], "--json")
    data = json.loads(res.output)
    added = [r for r in data["ops"] if r["change"] == "added"]
    assert added and added[0]["kernel"] == "poison"
    assert added[0]["source"]["b"]["line"] == _line(STEP, "poison")
    res = wrp("diff", project["wrp"], project["nan"])
    assert f"at simpkg/step.py:{_line(STEP, 'poison')} in step()" in res.output


def test_round_trips_keep_call_sites(project, tmp_path):
    before = ann.read_annotations(open_capture(project["wrp"]).program)
    assert before.call_sites
    wrpk, js, back = tmp_path / "sim.wrpk", tmp_path / "sim.json", tmp_path / "back.wrp"
    for src, dst in ((project["wrp"], wrpk), (wrpk, js), (js, back)):
        res = wrp("convert", src, dst)
        assert res.exit_code == 0, res.output
    doc = json.loads(js.read_text())
    text = json.dumps(doc)
    assert '"call_sites"' in text and '"source_line"' in text  # readable, not an opaque blob
    for path in (wrpk, back):
        assert ann.read_annotations(open_capture(path).program) == before
    assert open_capture(back).program.annotations == open_capture(project["wrp"]).program.annotations
    res = wrp("validate", back)
    assert res.exit_code == 0, res.output


def test_stock_capture_has_no_call_sites_and_nothing_breaks(project):
    prog = open_capture(project["stock"]).program
    assert not prog.annotations
    assert not Sources.of(prog)
    res = wrp("inspect", project["stock"], "--ops", "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert all(o["source"] is None for o in info["ops"]) and info["source_root"] is None
    assert all(k["source"] is None for k in info["kernels"])
    res = wrp("inspect", project["stock"], "--ops")
    assert res.exit_code == 0 and " at " not in res.output.split("Ops", 2)[-1]
    res = wrp("profile", project["stock"], "--repeat", "1", "--warmup", "0", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output[res.output.index("{"):])["call_sites"] == []


def test_kernels_option_gives_definition_lines_for_a_stock_capture(project):
    res = wrp("inspect", project["stock"], "--json", "--kernels", project["root"] / "simpkg" / "kernels.py")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    kernels = {k["kernel_key"]: k for k in info["kernels"]}
    src = kernels["scale"]["source"]
    assert src is not None and src["file"].endswith("simpkg/kernels.py")
    assert src["line"] == _line(KERNELS, "def scale(")


def test_call_sites_can_be_turned_off(tmp_path):
    import shutil  # noqa: PLC0415

    root = _project(tmp_path / "proj")
    shutil.rmtree(root / "simpkg" / "__pycache__", ignore_errors=True)
    out = _capture(root, "off.wrp", "--no-call-sites")
    a = ann.read_annotations(open_capture(out).program)
    assert a.call_sites == () and a.kernel_signatures  # the rest of the annotations stay


def test_bad_call_sites_are_warnings_and_are_ignored(project):
    """Untrusted call sites: paths that name no op, too many frames; validation warns, tools ignore them."""
    import dataclasses  # noqa: PLC0415

    from wrpkit.checks.validate import validate_program  # noqa: PLC0415

    prog = open_capture(project["wrp"]).program
    a = ann.read_annotations(prog)
    frame = ann.SourceFrame("x.py", 1, "f")
    bad = (ann.CallSite((99,), (frame,)), ann.CallSite((4, 7, 0), (frame,)), ann.CallSite((0, 0), (frame,)),
           ann.CallSite((1,), (frame,) * 20), ann.CallSite((2,), ()))
    prog.annotations = ann.encode_annotations(dataclasses.replace(a, call_sites=bad))
    problems = validate_program(prog)
    msgs = [p for p in problems if "call_sites" in p.where]
    assert len(msgs) >= 4 and all(p.severity == "warning" for p in msgs), msgs
    s = Sources.of(prog)
    assert s.op("99") is None and s.op((4, 7, 0)) is None and s.op((0, 0)) is None
    assert len(s.op("1")["stack"]) == 8 and s.op("2") is None
