"""The first bad op, on user programs whose NaN/Inf first lands in an UNBOUND array.

Programs: ``tests/nonfinite_chain.py`` (IF in WHILE, ``@wp.func``, ``wp.vec3``).
Each is captured by ``wrpkit.capture`` and by stock Warp (the script run as
``__main__``), and every answer is checked against an eager run of the same
kernels (:func:`nonfinite_chain.eager_first_nonfinite`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import warp

import debug_programs as dp  # noqa: E402
import nonfinite_chain as chain  # noqa: E402
from proc_helpers import invoke as wrp
import wrpkit  # noqa: E402

SCRIPT = dp.CHAIN_SCRIPT


def _summary(r) -> list:
    """The lines after trace's table (the summary), which must fit 80 columns.

    A table too wide for 80 columns has no column rules, only the rule under its header ("─").
    """
    lines = r.stdout.splitlines()
    last = max((i for i, line in enumerate(lines) if set(line) & set("│┃━─")), default=-1)
    return lines[last + 1:]


def flat(r) -> str:
    """A command's stdout with line breaks folded (the text wraps at 80 columns)."""
    return " ".join(r.stdout.split())


@pytest.fixture(scope="module")
def chains(tmp_path_factory) -> dict:
    """``{variant: {"wrpkit": path, "stock": path, "eager": first bad launch}}``."""
    d = tmp_path_factory.mktemp("chains")
    out = {}
    for v in chain.VARIANTS:
        out[v] = {"wrpkit": dp.capture_chain(v, d / f"{v}.wrp"),
                  "stock": dp.stock_capture_chain(v, d / f"{v}_stock.wrp"),
                  "eager": chain.eager_first_nonfinite(v)}
    return out


def _check_against_eager(nf: dict, eager: dict) -> None:
    assert nf is not None
    assert (nf["seq"], nf["kernel"], nf["iteration"], nf["argument"]) == (
        eager["seq"], eager["kernel"], eager["iteration"], eager["argument"])
    assert nf["binding"] is None  # the bad value lands in an unbound scratch array first
    assert (nf["nan"], nf["inf"]) == (eager["nan"], eager["inf"])
    # The inputs shown are the regions as they were BEFORE the op ran, as the eager run saw them.
    seen = {w["argument"]: w["digest"] for w in nf["inputs"]}
    assert seen and all(seen[a] == eager["before"][a] for a in seen), (seen, eager["before"])


@pytest.mark.slow
@pytest.mark.parametrize("variant", chain.VARIANTS)
def test_trace_names_the_kernel_and_iteration_an_eager_run_finds(chains, variant):
    c = chains[variant]
    t = wrpkit.trace(c["wrpkit"])  # no stop_at_nonfinite: still named
    _check_against_eager(t.first_nonfinite, c["eager"])
    assert len(t.ops) == c["eager"]["launches"]
    assert t.unchecked == []
    stopped = wrpkit.trace(c["wrpkit"], stop_at_nonfinite=True)
    _check_against_eager(stopped.first_nonfinite, c["eager"])
    assert len(stopped.ops) == c["eager"]["seq"] + 1


@pytest.mark.parametrize("variant", chain.VARIANTS)
def test_stock_capture_is_typed_by_kernels_from_the_script(chains, variant):
    c = chains[variant]
    plain = wrpkit.trace(c["stock"])
    assert plain.first_nonfinite is None  # nothing is typed...
    bad_region = {u["region"] for u in plain.unchecked}
    assert bad_region and all(u["writers"] for u in plain.unchecked)  # ...and trace says so, with the writers
    t = wrpkit.trace(c["stock"], kernels=[SCRIPT])  # kernels recorded under __main__ match the script
    _check_against_eager(t.first_nonfinite, c["eager"])
    assert all(k["matched"] and k["code"] == "same" for k in t.kernels["kernels"])
    assert t.first_nonfinite["region"] in bad_region
    if variant == "vec3":  # the C++ replayer's engine, in wrp trace's child process, gets the same types
        from proc_helpers import native_or_skip  # noqa: PLC0415

        native_or_skip("native")
        n = wrpkit.trace(c["stock"], kernels=[SCRIPT], engine="native", isolate=True)
        _check_against_eager(n.first_nonfinite, c["eager"])


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["if_in_while"])
def test_trace_cli_summary_and_json_in_every_run(chains, variant):
    c = chains[variant]
    e = c["eager"]
    r = wrp("trace", c["wrpkit"], "--json")
    assert r.exit_code == 0, r.output  # a full trace is success; the summary still names the op
    d = json.loads(r.stdout)
    nf = d["first_nonfinite"]
    assert {"seq", "index", "path", "iteration", "kernel", "region", "binding", "argument", "nan", "inf",
            "inputs"} <= set(nf)
    assert (nf["seq"], nf["kernel"], nf["iteration"]) == (e["seq"], e["kernel"], e["iteration"])
    assert nf["path"] == "0.2.0"  # the IF body inside the WHILE
    r = wrp("trace", c["wrpkit"], "--stop-at-nonfinite")
    assert r.exit_code == 1
    assert f"step {e['seq']}: op 0 (path 0.2.0 iteration {e['iteration']}) {e['kernel']}" in flat(r)
    assert "before the op" in flat(r)
    assert all(len(line) <= 80 for line in _summary(r))
    # The stock file: never "no NaN or Inf" without naming what was not checked.
    r = wrp("trace", c["stock"])
    assert r.exit_code == 0, r.output
    assert "not checked for NaN/Inf" in flat(r) and "spring_forces (path 0.2.0)" in flat(r)
    assert all(len(line) <= 80 for line in _summary(r))
    assert "every written region was checked" not in r.output
    r = wrp("trace", c["stock"], "--kernels", SCRIPT, "--stop-at-nonfinite", "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert (d["first_nonfinite"]["seq"], d["first_nonfinite"]["kernel"]) == (e["seq"], e["kernel"])
    assert d["unchecked"] == []


def test_kernels_bad_input(chains, tmp_path):
    stock = chains["func"]["stock"]
    broken = tmp_path / "broken.py"
    broken.write_text("import warp as wp\nraise RuntimeError('the user file is broken')\n")
    r = wrp("trace", stock, "--kernels", broken, "--json")
    assert r.exit_code == 2, r.output
    d = json.loads(r.stdout)
    assert "the user file is broken" in d["error"] and d["exit_code"] == 2 and d["hint"]
    other = tmp_path / "other.py"
    other.write_text("import warp as wp\n\n@wp.kernel\ndef unrelated(a: wp.array(dtype=float)):\n"
                     "    a[wp.tid()] = 1.0\n")
    r = wrp("trace", stock, "--kernels", other)
    assert r.exit_code == 2 and "no kernel of the capture matches" in r.output and "unrelated" not in r.output
    assert wrp("trace", stock, "--kernels", tmp_path / "missing.py").exit_code == 2
    # A file whose pressure kernel takes other arguments: named with the reason, never guessed;
    # the kernels that do match still type their arrays.
    shutil.copy(SCRIPT, tmp_path / "edited.py")
    text = (tmp_path / "edited.py").read_text().replace(
        "def pressure(x: wp.array(dtype=wp.float32), step: wp.array(dtype=wp.int32), bad_at: int,",
        "def pressure(x: wp.array(dtype=wp.float32), step: wp.array(dtype=wp.int32), bad_at: wp.float64,")
    (tmp_path / "edited.py").write_text(text)
    t = wrpkit.trace(stock, kernels=[tmp_path / "edited.py"])
    why = {k["kernel"]: k["reason"] for k in t.kernels["kernels"] if not k["matched"]}
    assert set(why) == {"pressure"} and "argument 2 (bad_at) is 4 bytes in the capture, 8" in why["pressure"]
    r = wrp("trace", stock, "--kernels", tmp_path / "edited.py")
    assert "kernel pressure (module __main__) not typed" in flat(r)


# ---------------------------------------------------------------------------
# slice --steps, and wrp annotate
# ---------------------------------------------------------------------------

_BINDINGS = {"counter": 4, "step": 4, "flag": 4, "x": None, "v": None}


def _stock_replay(path: Path, variant: str) -> dict:
    """``{binding: sha256[:32]}`` after stock ``wp.capture_load`` + one ``wp.capture_launch``, in a fresh process."""
    width = 12 if variant == "vec3" else 4
    sizes = {n: s or width * chain.N for n, s in _BINDINGS.items()}
    code = (
        "import sys, json, hashlib, warp as wp\n"
        "wp.config.quiet = True\n"
        "g = wp.capture_load(sys.argv[1], device='cpu')\n"
        "wp.capture_launch(g)\n"
        "out = {}\n"
        f"for n, size in {sizes!r}.items():\n"
        "    a = wp.empty(size, dtype=wp.uint8, device='cpu')\n"
        "    g.get_param(n, a)\n"
        "    out[n] = hashlib.sha256(a.numpy().tobytes()).hexdigest()[:32]\n"
        "print(json.dumps(out))\n")
    p = __import__("subprocess").run([__import__("sys").executable, "-c", code, str(path)], check=True,
                                     capture_output=True, text=True, timeout=300)
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("variant", chain.VARIANTS)
def test_slice_steps_isolates_the_bad_launch_bit_for_bit(chains, variant, tmp_path):
    c = chains[variant]
    t = wrpkit.trace(c["wrpkit"])
    k = c["eager"]["seq"]
    for a, b in ((k, k + 1), (k + 1, k + 2), (k - 2, k + 1)):
        out = tmp_path / f"s{a}_{b}.wrp"
        res = wrpkit.slice(c["wrpkit"], out, steps=(a, b))
        assert (res.unit, res.start, res.stop, res.ops) == ("steps", a, b, b - a)
        assert wrp("validate", out).exit_code == 0
        again = wrpkit.trace(out)
        assert [[(w["region"], w["digest"]) for w in o["writes"]] for o in again.ops] == \
            [[(w["region"], w["digest"]) for w in o["writes"]] for o in t.ops[a:b]]
        assert [o["kernel"] for o in again.ops] == [o["kernel"] for o in t.ops[a:b]]
    # The failing launch alone names itself, at step 0 of the slice.
    one = wrpkit.trace(tmp_path / f"s{k}_{k + 1}.wrp")
    assert (one.first_nonfinite["seq"], one.first_nonfinite["kernel"]) == (0, c["eager"]["kernel"])
    # Stock Warp replays the next launch (it writes the bound x) exactly as the full trace recorded it.
    got = _stock_replay(tmp_path / f"s{k + 1}_{k + 2}.wrp", variant)
    x_write = next(w for w in t.ops[k + 1]["writes"] if w["binding"] == "x")
    assert got["x"] == x_write["digest"]


def test_slice_steps_cli_stock_kernels_and_range_errors(chains, tmp_path):
    c = chains["func"]
    k = c["eager"]["seq"]
    out = tmp_path / "bad.wrpk"
    r = wrp("slice", c["stock"], "--steps", f"{k}:{k + 1}", "--kernels", SCRIPT, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["unit"] == "steps"
    t = wrpkit.trace(out)  # the slice carries the types it was given
    assert (t.first_nonfinite["kernel"], t.first_nonfinite["argument"]) == (c["eager"]["kernel"], "p")
    n = c["eager"]["launches"]
    for bad in (f"{n}:{n + 1}", "5:5", "x:y"):
        r = wrp("slice", c["wrpkit"], "--steps", bad, "-o", tmp_path / "none.wrp", "--json")
        assert r.exit_code == 2, (bad, r.output)
        assert json.loads(r.stdout)["hint"]
    assert not (tmp_path / "none.wrp").exists() and not (tmp_path / "none_modules").exists()
    assert f"outside the {n} steps" in wrp("slice", c["wrpkit"], "--steps", f"{n}:{n + 1}", "-o",
                                             tmp_path / "none.wrp").output
    assert wrp("slice", c["wrpkit"], "-o", tmp_path / "none.wrp").exit_code == 2  # neither --ops nor --steps
    with pytest.raises(wrpkit.WrpUsageError):
        wrpkit.slice(c["wrpkit"], tmp_path / "none.wrp", ops=(0, 1), steps=(0, 1))


@pytest.mark.parametrize("variant", chain.VARIANTS)
def test_annotate_types_a_stock_capture_that_stock_warp_still_replays(chains, variant, tmp_path):
    c = chains[variant]
    out = tmp_path / "typed.wrp"
    res = wrpkit.annotate(c["stock"], out, kernels=[SCRIPT])
    assert not res.typing.unmatched and {"x", "v"} <= set(res.typing.bindings_typed) or variant == "func"
    # Every route names the kernel and iteration the eager run finds.
    _check_against_eager(wrpkit.trace(out).first_nonfinite, c["eager"])
    # Stock Warp loads the annotated file and replays it as the original.
    assert _stock_replay(out, variant) == _stock_replay(c["stock"], variant)
    assert wrp("validate", out).exit_code == 0
    info = json.loads(wrp("inspect", out, "--json").stdout)
    assert info  # inspect reads it
    # Annotating again is refused, and writes nothing.
    r = wrp("annotate", out, "--kernels", SCRIPT, "-o", tmp_path / "again.wrp", "--json")
    assert r.exit_code == 2 and "already carries type annotations" in json.loads(r.stdout)["error"]
    assert not (tmp_path / "again.wrp").exists() and not (tmp_path / "again_modules").exists()


def test_annotate_cli_and_bad_input(chains, tmp_path):
    c = chains["vec3"]
    r = wrp("annotate", c["stock"], "--kernels", SCRIPT, "-o", tmp_path / "t.wrpk")
    assert r.exit_code == 0, r.output
    assert "4 of 4 kernel(s) typed" in r.output
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit(3)\n")
    r = wrp("annotate", c["stock"], "--kernels", broken, "-o", tmp_path / "b.wrp")
    assert r.exit_code == 2 and "SystemExit" in r.output
    assert not (tmp_path / "b.wrp").exists()
    assert wrp("annotate", c["stock"], "-o", tmp_path / "b.wrp").exit_code == 2  # --kernels is required
    r = wrp("annotate", c["stock"], "--kernels", SCRIPT, "-o", tmp_path / "b.txt")
    assert r.exit_code == 2 and "must end in .wrp or .wrpk" in r.output and not (tmp_path / "b.txt").exists()
    assert wrp("slice", c["stock"], "--steps", "0:1", "-o", tmp_path / "b.txt").exit_code == 2


def test_kernels_on_inspect_graph_and_replay(chains, tmp_path):
    c = chains["vec3"]
    info = json.loads(wrp("inspect", c["stock"], "--kernels", SCRIPT, "--json").stdout)
    assert all(k["matched"] for k in info["kernels_typed"]["kernels"])
    r = wrp("graph", c["stock"], "--kernels", SCRIPT, "-o", tmp_path / "g.dot")
    assert r.exit_code == 0 and "vec3f" in (tmp_path / "g.dot").read_text()
    r = wrp("replay", c["stock"], "--kernels", SCRIPT, "--json")
    assert r.exit_code == 0, r.output
    x = json.loads(r.stdout)["outputs"]["x"]
    # The one shape convention (docs/op-table.md): Warp's dtype and shape, the numpy view's beside it.
    assert x["dtype"] == "vec3f" and x["shape"] == [chain.N] and x["numpy_shape"] == [chain.N, 3]
    assert x["inf"] + x["nan"] > 0


# ---------------------------------------------------------------------------
# wrp diff: what changed in code
# ---------------------------------------------------------------------------


def _edited_stock(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of the chain script with one edit, run as a script: a stock capture of if_in_while."""
    text = SCRIPT.read_text()
    assert old in text
    script = tmp_path / f"{name}.py"
    script.write_text(text.replace(old, new))
    out = tmp_path / f"{name}.wrp"
    __import__("subprocess").run([__import__("sys").executable, str(script), "if_in_while", str(out)], check=True,
                                 capture_output=True, timeout=600)
    return out


def test_diff_of_a_one_kernel_fix_names_only_that_kernel(chains, tmp_path):
    buggy = chains["if_in_while"]["stock"]
    fixed = _edited_stock(tmp_path, "fixed", "force[i] = (x[i + 1] - x[i] - 0.5) / length[i]",
                          "force[i] = (x[i + 1] - x[i] - 0.5) / wp.max(length[i], 1.0e-3)")
    d = wrpkit.diff(buggy, fixed)
    assert [c["kernel"] for c in d.code] == ["spring_forces"]
    assert d.code[0]["function_bytes"] == "differ"
    assert d.ops == [] and d.kernels == [] and d.regions == []  # no module hash repeated on every op
    (mod,) = d.modules
    assert mod["code_changed"] == ["spring_forces"] and not mod["rebuilt_only"]
    r = wrp("diff", buggy, fixed)
    assert r.exit_code == 1
    lines = r.stdout.strip().splitlines()
    # The two header lines are the user's paths (as long as they are); what diff says fits 80 columns.
    assert len(lines) <= 8 and all(len(line) <= 80 for line in lines[2:]), r.stdout
    assert lines[0] == f"--- {buggy}" and lines[1] == f"+++ {fixed}", r.stdout
    assert sum("spring_forces" in line for line in lines) == 2  # the code line, and the module's reason
    assert "kernel spring_forces: code changed" in r.stdout
    assert '"' not in r.stdout  # no hash cut inside its quotes
    # And the fix is real: the fixed program writes no NaN or Inf.
    assert wrpkit.trace(fixed, kernels=[tmp_path / "fixed.py"]).first_nonfinite is None


def test_diff_module_rebuilt_and_scalar_argument_numbering(chains, tmp_path):
    base = chains["if_in_while"]["stock"]
    # An unused kernel added to the script: the module is rebuilt, no launched kernel's code changed.
    extra = _edited_stock(tmp_path, "extra", "@wp.func\ndef pressure_of(",
                          "@wp.kernel\ndef never_launched(a: wp.array(dtype=float)):\n    a[0] = 1.0\n\n\n"
                          "@wp.func\ndef pressure_of(")
    d = wrpkit.diff(base, extra)
    assert d.code == [] and d.ops == [] and d.kernels == []
    (mod,) = d.modules
    assert mod["rebuilt_only"] and mod["code_changed"] == []
    r = wrp("diff", base, extra)
    assert "rebuilt (its kernels' code is unchanged)" in r.stdout
    assert len(r.stdout.strip().splitlines()) == 5, r.stdout
    # A scalar argument changed: numbered from 0, as in the kernel's signature (spring_lengths' bad_at is 1).
    later = _edited_stock(tmp_path, "later", 'BAD_IT = {"if_in_while": 6,', 'BAD_IT = {"if_in_while": 7,')
    d = wrpkit.diff(base, later)
    body = d.ops[0]["fields"]["body"]
    (row,) = [r for r in body if r["kernel"] == "spring_lengths"]
    assert [a["param"] for a in row["fields"]["args"]] == [1]


# ---------------------------------------------------------------------------
# --against says exactly what differs
# ---------------------------------------------------------------------------


def test_against_says_differs_or_absent_warns_on_other_programs_and_gives_the_iteration(chains, tmp_path):
    c = chains["if_in_while"]
    saved = wrpkit.trace(c["wrpkit"]).save(tmp_path / "a.trace")
    assert wrpkit.trace(c["wrpkit"], against=saved).first_divergence is None
    # Other inputs: the same program, a region that both traces wrote with other bytes.
    x = __import__("numpy").full(chain.N, 2.0, "float32")
    t = wrpkit.trace(c["wrpkit"], inputs={"x": x}, against=saved)
    dv = t.first_divergence
    assert dv["reason"] == "a written region differs" and t.against_warning is None
    assert dv["iteration"] == 0 and dv["kernel"] == "spring_forces"
    r = wrp("trace", c["wrpkit"], "--input", f"x={_npy(tmp_path, x)}", "--against", saved)
    assert r.exit_code == 1
    assert "(path 0.2.0 iteration 0) spring_forces: a written region differs, region 6 (unbound)" in flat(r)
    # The stock capture of the same program, untyped: it also lists regions the typed trace knows are only
    # read, as maybe written; they are unchanged, so the two runs compare as the same (issue 38: it was a
    # false divergence at step 0) ...
    s = wrpkit.trace(c["stock"], against=saved)
    assert s.first_divergence is None and s.against_warning is None
    assert any(w.get("maybe") and w.get("changed") is False for o in s.ops for w in o["writes"])
    # ... and with other inputs the untyped trace still names the first region written differently.
    s = wrpkit.trace(c["stock"], inputs={"x": x}, against=saved)
    assert s.first_divergence["reason"] == "a written region differs" and s.first_divergence["iteration"] == 0
    # Another program: warned, and the op streams differ (not "region 1 (None)").
    r = wrp("trace", chains["func"]["wrpkit"], "--against", saved)
    assert r.exit_code == 1
    assert "warning: the two traces are of different programs" in flat(r) and "pressure" in flat(r)
    assert "the op streams differ here" in flat(r) and "None" not in r.stdout


def _npy(tmp_path, arr) -> Path:
    p = tmp_path / "x.npy"
    __import__("numpy").save(p, arr)
    return p


def test_diff_of_bsr_captured_twice_is_identical_despite_scratch_bytes(tmp_path):
    import programs  # noqa: PLC0415

    prog = programs.PROGRAMS["bsr"]
    a, b = tmp_path / "a.wrp", tmp_path / "b.wrp"
    programs.capture_to_file(prog, a)
    programs.capture_to_file(prog, b)
    d = wrpkit.diff(a, b)
    # BSR scratch regions start with whatever the allocator held; the BSR ops overwrite them before any read.
    assert d.identical and d.regions == [], d.to_json()
    assert d.overwritten and all("BSR" in o["overwritten_by"]["a"] for o in d.overwritten)
    r = wrp("diff", a, b)
    assert r.exit_code == 0 and "overwritten before it is read" in r.stdout


def test_kernels_file_is_imported_as_a_script_with_its_siblings_and_without_its_main_block(chains, tmp_path):
    """A user's script imports a sibling module and captures in its main block: --kernels must cope."""
    folder = tmp_path / "project"
    folder.mkdir()
    text = SCRIPT.read_text()
    # The script's DT comes from a sibling module, as scripts split across files do.
    (folder / "settings.py").write_text("DT = 0.01\n")
    text = text.replace("DT = 0.01\n", "from settings import DT\n")
    ran = folder / "main_block_ran"
    text = text.replace('if __name__ == "__main__":\n',
                        f'if __name__ == "__main__":\n    open({str(ran)!r}, "w").close()\n')
    (folder / "sim.py").write_text(text)
    t = wrpkit.trace(chains["vec3"]["stock"], kernels=[folder / "sim.py"])
    _check_against_eager(t.first_nonfinite, chains["vec3"]["eager"])
    assert not ran.exists()  # the main block did not run


def test_diff_prints_enum_fields_by_name(tmp_path):
    """One scan captured on int32 and on float32 data: the op's dtype differs, by name, not as 1 -> 5."""
    def capture(dtype, path):
        src = warp.array(__import__("numpy").arange(8), dtype=dtype, device="cpu")
        dst = warp.zeros(8, dtype=dtype, device="cpu")
        with wrpkit.capture(device="cpu") as rec:
            warp.utils.array_scan(src, dst, inclusive=True)
        return rec.save(path, inputs={"src": src}, outputs={"dst": dst})

    a = capture(warp.int32, tmp_path / "i.wrp")
    b = capture(warp.float32, tmp_path / "f.wrp")
    d = wrpkit.diff(a, b)
    (op,) = [o for o in d.ops if o["kind"] == "SCAN"]
    assert op["fields"]["dtype"] == {"a": "INT32", "b": "FLOAT32"}
    r = wrp("diff", a, b)
    assert "dtype: INT32 -> FLOAT32" in r.stdout


@warp.kernel
def _k_double(y: warp.array(dtype=float)):
    i = warp.tid()
    y[i] = y[i] * 2.0


def test_a_copy_that_first_writes_a_nan_is_named_with_its_op_table_roles(tmp_path):
    """The NaN is in the captured input; a ``wp.copy`` is the first op to write it into another array.
    The trace names the copy, its ``dst``/``src`` roles, the bindings and the element, as an eager look at
    the data says, in Python and on the command line (the op's region names once raised a NameError for
    every op but a launch)."""
    import numpy as np  # noqa: PLC0415

    data = np.array([1.0, 2.0, np.nan, 4.0, 5.0], np.float32)
    x = warp.array(data, device="cpu")
    y = warp.zeros(5, dtype=float, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        warp.copy(y, x)
        warp.launch(_k_double, dim=5, inputs=[y], device="cpu")
    path = tmp_path / "copy_nan.wrp"
    rec.save(path, inputs={"x": x}, outputs={"y": y})

    nf = wrpkit.trace(path).first_nonfinite
    assert nf["op"] == "MEMCPY_D2D" and nf["kernel"] is None and nf["seq"] == 0
    assert nf["argument"] == "dst" and nf["binding"] == "y"
    assert nf["element"] == int(np.flatnonzero(np.isnan(data))[0])
    assert [(i["argument"], i["binding"], i["nan"]) for i in nf["inputs"]] == [("src", "x", 1)]
    r = wrp("trace", path)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "MEMCPY_D2D wrote 1 NaN" in text and "argument dst (binding y), first at element 2" in text, text


@pytest.mark.slow  # several traces (about 3 s)
def test_strict_fails_a_gate_that_an_untyped_trace_would_pass(chains):
    """`wrp trace --stop-at-nonfinite` on an untyped stock capture holding an Inf passes (exit 0: its
    regions are unchecked); with --strict it fails and names them, and passes once --kernels types them
    (then the Inf itself fails it)."""
    c = chains[chain.VARIANTS[0]]
    plain = wrp("trace", c["stock"], "--stop-at-nonfinite")
    assert plain.exit_code == 0, plain.output
    strict = wrp("trace", c["stock"], "--stop-at-nonfinite", "--strict")
    assert strict.exit_code == 1 and "--strict" in strict.stderr and "not checked" in strict.stderr
    doc = json.loads(wrp("trace", c["stock"], "--strict", "--json").stdout)
    assert doc["strict_failed"] is True and doc["unchecked"]
    typed = wrp("trace", c["stock"], "--strict", "--kernels", SCRIPT, "--json")
    assert json.loads(typed.stdout)["strict_failed"] is False
    assert typed.exit_code == 0  # every region checked; the NaN is named, not a failure without the gate
    gated = wrp("trace", c["stock"], "--strict", "--stop-at-nonfinite", "--kernels", SCRIPT)
    assert gated.exit_code == 1 and "not checked" not in gated.stderr
