"""NaN-aware numbers (wrpkit/checks/compare.py) and where they show: replay's table and --check, wrpkit.verify.

The comparison rules are checked against numpy's own element-wise answers on
random arrays with planted NaN and Inf, and on real Warp captures whose
kernels write NaN and Inf.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import warp as wp
from click.testing import CliRunner

import wrpkit
from wrpkit.checks.compare import array_stats, compare_arrays, describe
from wrpkit.cli import main

wp.config.quiet = True


def _numpy_answer(got, want, rtol, atol, equal_nan):
    """Which elements differ, by numpy's isclose (the independent answer)."""
    close = np.isclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=equal_nan)
    same_inf = np.isinf(got) & (got == want)
    return ~(close | same_inf)


@pytest.mark.parametrize("equal_nan", [False, True])
def test_compare_matches_numpy_isclose_on_planted_non_finite_values(equal_nan):
    rng = np.random.default_rng(7)
    want = rng.standard_normal(2_500_003).astype(np.float32)
    got = want.copy()
    got[rng.integers(0, got.size, 50)] += 0.5  # beyond tolerance
    want[[10, 20]] = np.nan  # NaN in the golden only at 10; in both at 20
    got[20] = np.nan
    got[[1_048_580, 2_000_000]] = np.nan  # NaN against a number, in later slices
    got[[30, 40]] = np.inf
    want[30] = np.inf  # the same Inf: equal
    want[[50]] = -np.inf
    got[50] = np.inf  # the opposite Inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning of any kind
        c = compare_arrays(got, want, 1e-5, 1e-6, equal_nan=equal_nan)
    bad = _numpy_answer(got, want, 1e-5, 1e-6, equal_nan)
    assert c.mismatches == int(bad.sum()) and c.first_index == int(np.flatnonzero(bad)[0])
    assert c.ok is False
    assert (c.nan_vs_number, c.first_nan_vs_number) == (3, 10)
    assert (c.inf_mismatch, c.first_inf_mismatch) == (2, 40)
    assert c.nan_both == 1
    finite = np.isfinite(got) & np.isfinite(want)
    diff = np.abs(got[finite].astype(np.float64) - want[finite].astype(np.float64))
    assert c.max_abs == pytest.approx(float(diff.max()))
    assert np.isfinite(c.max_abs)  # a NaN against a number is counted, not an "inf" error
    text = describe(c)
    assert "3 NaN against a number, first at 10" in text and "2 Inf against another value, first at 40" in text
    assert ("NaN in both" in text) is (not equal_nan)


def test_nan_against_nan_needs_equal_nan_and_the_same_inf_is_equal():
    a = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert not compare_arrays(a, a.copy()).ok
    assert compare_arrays(a, a.copy(), equal_nan=True).ok
    b = a.copy()
    b[1] = 5.0
    c = compare_arrays(a, b, equal_nan=True)
    assert (c.ok, c.mismatches, c.nan_vs_number, c.first_index, c.max_abs) == (False, 1, 1, 1, 0.0)
    assert c.got == "nan" and c.want == 5.0


def test_integers_structs_shapes_and_dtypes():
    assert not compare_arrays(np.arange(4), np.arange(4) + 1, 1, 1).ok  # integers compare exactly
    c = compare_arrays(np.arange(5, dtype=np.int32), np.array([0, 1, 9, 3, 7], np.int32))
    assert (c.mismatches, c.first_index, c.max_abs) == (2, 2, 7.0)
    assert "shape differs" in compare_arrays(np.zeros(3), np.zeros(4)).reason
    assert "dtype differs" in compare_arrays(np.zeros(3, np.float32), np.zeros(3), strict_dtype=True).reason
    assert compare_arrays(np.zeros(3, np.float32), np.zeros(3)).ok  # by value unless strict
    st = np.dtype([("a", np.int32), ("b", np.float32)])
    x = np.zeros(4, st)
    y = x.copy()
    y["b"][2] = 1
    c = compare_arrays(x, y)
    assert (c.ok, c.mismatches, c.first_index, c.max_abs) == (False, 1, 2, None)


def test_stats_are_over_finite_values_with_counts_and_no_warnings():
    a = np.array([np.nan, 1.0, -3.0, np.inf, np.nan, 2.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = array_stats(a)
        allnan = array_stats(np.full(3, np.nan, np.float32))
    assert (s["min"], s["max"], s["mean"], s["nan"], s["inf"]) == (-3.0, 2.0, 0.0, 2, 1)
    assert (allnan["min"], allnan["max"], allnan["nan"]) == (None, None, 3)


@wp.kernel
def k_planted(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = wp.sqrt(x[i]) / (x[i] - 4.0)  # NaN where x < 0, Inf at x == 4


def _planted(tmp_path):
    x = wp.array(np.array([-1, 0, 1, 4, 9, -2], np.float32), device="cpu")
    y = wp.zeros(6, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_planted, dim=6, inputs=[x, y], device="cpu")
    path = rec.save(tmp_path / "planted.wrp", inputs={"x": x}, outputs={"y": y})
    xs = x.numpy()
    with np.errstate(all="ignore"):
        live = np.sqrt(xs) / (xs - 4.0)  # the eager answer
    return path, xs, live


@pytest.mark.slow
def test_replay_table_and_check_on_a_capture_writing_nan_and_inf(tmp_path):
    path, xs, live = _planted(tmp_path)
    run = CliRunner()
    r = run.invoke(main, ["replay", str(path), "--json"])
    s = json.loads(r.stdout)["outputs"]["y"]
    finite = live[np.isfinite(live)]
    assert (s["nan"], s["inf"]) == (2, 1)
    assert s["min"] == pytest.approx(float(finite.min())) and s["max"] == pytest.approx(float(finite.max()))
    np.savez(tmp_path / "golden.npz", y=live.astype(np.float32), x=xs)
    r = run.invoke(main, ["replay", str(path), "--check", str(tmp_path / "golden.npz"), "--json"])
    assert r.exit_code == 1  # NaN == NaN only with --equal-nan
    y = json.loads(r.stdout)["check"]["bindings"]["y"]
    assert (y["nan_both"], y["nan_vs_number"], y["first_index"]) == (2, 0, 0)
    r = run.invoke(main, ["replay", str(path), "--check", str(tmp_path / "golden.npz"), "--equal-nan", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["check"]["equal_nan"] is True
    moved = live.astype(np.float32).copy()
    moved[4] = np.nan  # a NaN where the replay gives a number
    np.savez(tmp_path / "moved.npz", y=moved)
    r = run.invoke(main, ["replay", str(path), "--check", str(tmp_path / "moved.npz"), "--equal-nan", "--json"])
    assert r.exit_code == 1
    y = json.loads(r.stdout)["check"]["bindings"]["y"]
    assert (y["nan_vs_number"], y["first_nan_vs_number"]) == (1, 4)
    assert y["reason"] == "1 NaN against a number, first at 4"
    r = run.invoke(main, ["replay", str(path), "--check", str(tmp_path / "moved.npz"), "--equal-nan"])
    assert r.exit_code == 1 and "MISMATCH" in r.stdout and "NaN against" in r.stdout


def test_verify_treats_equal_non_finite_values_as_equal(tmp_path):
    x = wp.array(np.array([-1, 0, 1, 4, 9, -2], np.float32), device="cpu")
    y = wp.zeros(6, dtype=wp.float32, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rep = wrpkit.verify(lambda: wp.launch(k_planted, dim=6, inputs=[x, y], device="cpu"), {"x": x}, {"y": y})
    assert rep.ok, rep.mismatches  # Inf against the same Inf, NaN against NaN: equal


def test_a_difference_in_an_array_of_vectors_is_named_by_its_place_and_its_flat_index():
    """(N, 3) arrays (a wp.vec3 binding): the message names [row, component] beside the flat index; the
    JSON keeps the flat index alone; 1-D arrays say only the index."""
    want = np.zeros((1000, 3), np.float32)
    got = want.copy()
    got[17, 1] = 1.0
    got[20, 2] = np.nan
    c = compare_arrays(got, want)
    text = describe(c)
    assert "1 of 3000 beyond tolerance, first at 52 ([17, 1])" in text
    assert "1 NaN against a number, first at 62 ([20, 2])" in text
    assert c.to_json()["first_index"] == 52 and c.to_json()["first_nan_vs_number"] == 62
    assert describe(compare_arrays(got[:, 1], want[:, 1])) == "1 of 1000 beyond tolerance, first at 17"


@pytest.mark.parametrize("equal_nan", [False, True])
def test_equal_bytes_decided_at_memory_speed_give_the_element_wise_verdict(equal_nan):
    """The byte-equality fast path (the usual passing check) says what the element-wise pass says: the
    same arrays compared as float32 against float32 (equal bytes) and against float64 (by value, element
    by element), with NaN, Inf and -0.0 planted across slices."""
    from wrpkit.checks.compare import SLICE  # noqa: PLC0415

    rng = np.random.default_rng(9)
    a = rng.standard_normal(3 * SLICE + 17).astype(np.float32)
    a[[5, SLICE + 3, 2 * SLICE + 9]] = np.nan
    a[[7, SLICE + 4]] = np.inf
    a[2 * SLICE] = -np.inf
    a[11] = -0.0
    fast = compare_arrays(a, a.copy(), equal_nan=equal_nan).to_json()
    slow = compare_arrays(a, a.astype(np.float64), equal_nan=equal_nan).to_json()
    assert fast == slow
    assert fast["ok"] is equal_nan and fast["nan_both"] == 3 and fast["mismatches"] == (0 if equal_nan else 3)
    ints = rng.integers(-1000, 1000, 2 * SLICE + 5).astype(np.int32)
    assert compare_arrays(ints, ints.copy()).to_json() == compare_arrays(ints, ints.astype(np.int64)).to_json()
    b = a.copy()
    b[SLICE + 100] += 1.0  # one element differs: the slice falls back to the element-wise pass
    got = compare_arrays(b, a, equal_nan=True)
    assert not got.ok and got.mismatches == 1 and got.first_index == SLICE + 100
