"""Every route on two programs in idioms no other test uses, held against an eager run of each.

``tests/idiom_programs.py``: ``particles`` (``wp.array[...]`` annotations, a struct of arrays, an
overloaded ``wp.func``, a 2-D array, ``wp.capture_if`` inside ``wp.capture_while``) and ``descent``
(``wp.Tape`` forward and backward inside a ``wp.capture_while`` body, 3-D and ``vec2`` arrays, an
atomic reduction).  Each is run eagerly (the truth: its arrays and the kernels it launched, in
order) and captured with stock Warp and with ``wrpkit.capture``.  Replays with every engine, typed
replays, trace, profile, graph, memcheck, check, conversions and regress must all agree with it.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import proc_helpers
from proc_helpers import TESTS_DIR

HERE = TESTS_DIR
PROGRAM = HERE / "idiom_programs.py"
BIN = Path(sys.executable).parent
WRP, WRP_REPLAY = BIN / "wrp", BIN / "wrp-replay"
pytestmark = pytest.mark.slow  # six captures, then every route on each

NAMES = ("particles", "descent")
HOWS = ("stock", "wrpkit")


def run(*args, ok=True):
    r = proc_helpers.run(*args)
    if ok:
        assert r.returncode == 0, f"{' '.join(map(str, args))}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """``{name: {"eager": npz, "launches": [...], "stock": wrp, "wrpkit": wrp, "stock2": wrp}}``."""
    root = tmp_path_factory.mktemp("idioms")
    out = {}
    for name in NAMES:
        eager = root / f"{name}-eager.npz"
        run(sys.executable, PROGRAM, name, "eager", eager)
        out[name] = {"eager": eager, "launches": (root / f"{name}-eager.npz.launches").read_text().split("\n")}
        for how in HOWS + ("stock2",):
            out[name][how] = root / how / f"{name}.wrp"
            out[name][how].parent.mkdir(exist_ok=True)
            run(sys.executable, PROGRAM, name, how.rstrip("2"), out[name][how])
    return out


def assert_same_as_eager(eager: Path, replayed: dict, typed: bool) -> None:
    """Every array the eager run left equals the replay's, byte for byte (and in dtype and shape
    where the capture is typed)."""
    truth = np.load(eager)
    for key in truth.files:
        got = replayed[key]
        assert got.tobytes() == truth[key].tobytes(), key
        if typed:
            assert (got.dtype, got.shape) == (truth[key].dtype, truth[key].shape), key


def typed(made, name, how, tmp_path) -> Path:
    """The capture, typed: a wrpkit capture as it is, a stock one through ``wrp annotate --kernels``."""
    cap = made[name][how]
    if how == "wrpkit":
        return cap
    out = tmp_path / f"{name}-typed.wrp"
    run(WRP, "annotate", cap, "--kernels", PROGRAM, "-o", out)
    return out


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("name", NAMES)
def test_every_engine_replays_what_the_eager_run_computes(made, name, how, tmp_path):
    cap = made[name][how]
    for engine in ("python", "native"):
        out = tmp_path / f"{engine}.npz"
        run(WRP, "replay", cap, "--engine", engine, "--output", out)
        assert_same_as_eager(made[name]["eager"], np.load(out), typed=how == "wrpkit")
    bundle = tmp_path / f"{name}.wrpk"
    run(WRP, "convert", cap, bundle)
    for source in (cap, bundle):
        keys = np.load(made[name]["eager"]).files
        args = [a for k in keys for a in ("--output", f"{k}={tmp_path / k}.npy")]
        run(WRP_REPLAY, source, *args)
        assert_same_as_eager(made[name]["eager"], {k: np.load(tmp_path / f"{k}.npy") for k in keys},
                             typed=how == "wrpkit")


@pytest.mark.parametrize("name", NAMES)
def test_stock_typed_from_source_matches_wrpkit_and_replays_typed(made, name, tmp_path):
    types = {}
    for how in HOWS:
        info = json.loads(run(WRP, "inspect", typed(made, name, how, tmp_path), "--json").stdout)
        types[how] = sorted((b["name"], b["dtype"], b["shape"]) for b in info["bindings"])
    assert types["stock"] == types["wrpkit"]
    out = tmp_path / "typed.npz"
    run(WRP, "replay", typed(made, name, "stock", tmp_path), "--output", out)
    assert_same_as_eager(made[name]["eager"], np.load(out), typed=True)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("name", NAMES)
def test_trace_profile_and_graph_see_the_launches_the_eager_run_made(made, name, how, tmp_path):
    cap = typed(made, name, how, tmp_path)
    expected = made[name]["launches"]
    trace = json.loads(run(WRP, "trace", cap, "--json").stdout)
    assert [op["kernel"] for op in trace["ops"] if op["kernel"]] == expected
    assert trace["first_nonfinite"] is None
    assert trace["unchecked"] == []  # every written region typed, gradients (loss.grad) included
    prof = json.loads(run(WRP, "profile", cap, "--json").stdout)
    assert {k["name"]: k["calls"] for k in prof["kernels"] if k["op"] == "KERNEL_LAUNCH"} == dict(Counter(expected))
    dot = tmp_path / "g.dot"
    run(WRP, "graph", cap, "-o", dot)
    assert all(k in dot.read_text() for k in set(expected))


@pytest.mark.parametrize("name", NAMES)
def test_memcheck_check_and_validate_are_clean(made, name, tmp_path):
    for how in HOWS:
        cap = made[name][how]
        run(WRP, "validate", cap)
        run(WRP, "check", cap)
        assert json.loads(run(WRP, "memcheck", cap, "--json").stdout)["clean"] is True


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("name", NAMES)
def test_conversions_round_trip_byte_for_byte(made, name, how, tmp_path):
    cap = made[name][how]
    for ext in ("wrpk", "json"):
        middle, back = tmp_path / f"m.{ext}", tmp_path / ext / f"{name}.wrp"
        back.parent.mkdir()
        run(WRP, "convert", cap, middle)
        run(WRP, "convert", middle, back)
        assert back.read_bytes() == cap.read_bytes(), ext


@pytest.mark.parametrize("name", NAMES)
def test_one_program_captured_twice_diffs_identical(made, name):
    r = run(WRP, "diff", made[name]["stock"], made[name]["stock2"])
    assert "identical" in r.stdout, r.stdout


@pytest.mark.parametrize("how", HOWS)
def test_regress_passes_against_the_eager_golden(made, how, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in NAMES:
        r = run(WRP, "convert", made[name][how], suite / f"{name}.wrpk")
        (suite / f"{name}_expected.npz").write_bytes(made[name]["eager"].read_bytes())
    verdicts = json.loads(run(WRP, "regress", suite, "--json").stdout)
    assert sorted((c["name"], c["verdict"]) for c in verdicts["cases"]) == [(n, "pass") for n in sorted(NAMES)]
