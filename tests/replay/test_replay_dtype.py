"""``wrp replay --dtype NAME=TYPE`` types bindings through the one region-typing function.

``--dtype`` is region typing's strongest source (wrpkit.checks.region_types): the replay's typed
outputs, and its refusals, come from there.  Captures are made here with stock Warp: a spring step
over ``wp.vec3`` arrays with a ``@wp.func`` helper, plus an unbound scratch array; the typed replay is
checked against an eager run of the same kernels.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import programs
import warp as wp
from proc_helpers import invoke_raising as wrp
from wrpkit.checks.region_types import region_types, user_dtype_signatures
from wrpkit.errors import WrpBindingError
from wrpkit.formats import wrp1

N = 6


@wp.func
def spring_force(a: wp.vec3, b: wp.vec3, k: float):
    return (b - a) * k


@wp.kernel
def k_forces(x: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), k: float):
    i = wp.tid()
    if i + 1 < x.shape[0]:
        f[i] = spring_force(x[i], x[i + 1], k)
    else:
        f[i] = wp.vec3(0.0, 0.0, 0.0)


@wp.kernel
def k_move(x: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), count: wp.array(dtype=wp.int32), dt: float):
    i = wp.tid()
    x[i] = x[i] + f[i] * dt
    wp.atomic_add(count, 0, 1)


def _arrays(device="cpu") -> dict:
    rng = np.random.default_rng(20)
    return {"x": wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device=device),
            "_f": wp.zeros(N, dtype=wp.vec3, device=device),  # scratch: bound to nothing
            "count": wp.zeros(1, dtype=wp.int32, device=device)}


def _step(a: dict) -> None:
    for _ in range(3):
        wp.launch(k_forces, dim=N, inputs=[a["x"], a["_f"], 0.5], device="cpu")
        wp.launch(k_move, dim=N, inputs=[a["x"], a["_f"], a["count"], 0.1], device="cpu")


SPRINGS = programs.WarpProgram("springs", _arrays, _step, inputs=["x"], outputs=["x", "count"],
                               op_counts={"KERNEL_LAUNCH": 6})


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dtype") / "springs.wrp"
    programs.capture_to_file(SPRINGS, path)
    return path


@pytest.fixture(scope="module")
def eager() -> dict:
    return programs.run_live(SPRINGS)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_dtype_types_a_stock_binding_as_the_eager_run(stock, eager, tmp_path, engine):
    if engine == "native":
        from wrpkit.run.replay.engines import native_paths

        try:
            native_paths().require_replayer()
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"wrp-replay is not installed: {e}")
    out = tmp_path / f"{engine}.npz"
    # vec3 is Warp's name for vec3f: Warp says what a name means, region typing decides the rest
    r = wrp("replay", stock, "--engine", engine, "--dtype", "x=vec3", "--dtype", "count=int32", "--output", out,
            "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["outputs"]["x"]["dtype"] == "vec3f" and rep["outputs"]["x"]["shape"] == [N]
    with np.load(out) as z:
        assert z["x"].shape == (N, 3) and z["x"].dtype == np.float32
        np.testing.assert_allclose(z["x"], eager["x"], rtol=1e-6)
        assert z["count"].dtype == np.int32 and z["count"].tolist() == eager["count"].tolist() == [3 * N]


def test_dtype_refusals_keep_their_messages_and_exit_codes(stock, tmp_path):
    r = wrp("replay", stock, "--dtype", "x=vec7q")
    assert r.exit_code == 2 and "'vec7q' is not a Warp data type" in r.output
    r = wrp("replay", stock, "--dtype", "x=mat44d", "--json")  # 72 bytes are not 128-byte elements
    assert r.exit_code == 2
    err = json.loads(r.output.splitlines()[0])  # the JSON error on stdout; stderr follows
    assert "binding 'x' holds 72 bytes, not a whole number of mat44d elements (128 bytes each)" in err["error"]
    assert err["hint"]
    r = wrp("replay", stock, "--dtype", "z=float32")
    assert r.exit_code == 2 and "unknown binding 'z'" in r.output


def test_dtype_is_refused_where_the_file_records_the_type(tmp_path):
    import wrpkit

    a = _arrays()
    with wrpkit.capture(device="cpu") as rec:
        _step(a)
    cap = rec.save(tmp_path / "typed.wrp", inputs={"x": a["x"]}, outputs={"x": a["x"], "count": a["count"]})
    r = wrp("replay", cap, "--dtype", "x=float32", "--json")
    assert r.exit_code == 2
    err = json.loads(r.output.splitlines()[0])  # the JSON error on stdout; stderr follows
    assert err["error"] == ("--dtype x=float32: the file already records binding 'x' as vec3f of shape (6,)")
    assert "leave it out" in err["hint"]


def test_region_types_is_where_dtype_is_decided(stock):
    """The library call behind the CLI: region_types decides, --dtype first."""
    from wrpkit.checks.region_types import dtype_from_name

    prog = wrp1.decode_wrp1(stock.read_bytes())
    rid = prog.binding_map()["x"]
    sigs = user_dtype_signatures(prog, {"x": ("int32", dtype_from_name("int32"))})
    assert sigs["x"].dtype.name == "int32" and tuple(sigs["x"].shape) == (3 * N,)
    rt = region_types(prog, dtypes={"x": "int32"})[rid]
    assert rt.source == "--dtype" and [s for s, _, _ in rt.seen][:1] == ["--dtype"]
    with pytest.raises(WrpBindingError, match="not a whole number of mat22d"):
        user_dtype_signatures(prog, {"x": ("mat22d", dtype_from_name("mat22d"))})
