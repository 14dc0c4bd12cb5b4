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

warp = pytest.importorskip("warp")

import debug_programs as dp  # noqa: E402
import nonfinite_chain as chain  # noqa: E402
import wrpkit  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from wrpkit.cli import main  # noqa: E402

SCRIPT = dp.CHAIN_SCRIPT


def wrp(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


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
    assert f"step {e['seq']}: op 0 (path 0.2.0 iteration {e['iteration']}) {e['kernel']}" in r.output
    assert "before the op" in r.output
    # The stock file: never "no NaN or Inf" without naming what was not checked.
    r = wrp("trace", c["stock"])
    assert r.exit_code == 0, r.output
    assert "not checked for NaN/Inf" in r.output and "spring_forces (path 0.2.0)" in r.output
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
    assert "kernel pressure (module __main__) not typed" in r.output
