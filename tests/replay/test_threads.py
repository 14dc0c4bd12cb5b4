"""One Program shared by many threads (issue 24).

Runs on one :class:`wrpkit.Program` (in this process or in a child) are
serialised by a lock: every thread's result is the one a replay of its own
inputs gives, bit for bit, checked against an eager run of the same kernels
(``wp.launch`` on the same inputs).  Also: ``run(outputs=)`` returns only what
is asked, and ``copy=False`` reads the results in place.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit

wp.config.quiet = True
N = 1 << 15


@wp.kernel
def k_work(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32), scratch: wp.array(dtype=wp.float32)):
    i = wp.tid()
    v = x[i]
    for _ in range(24):  # enough work per replay that two threads' runs overlap
        v = wp.sin(v) * 1.5 + 0.25
    scratch[i] = v
    y[i] = v * 2.0 + x[i]


def _capture(path: Path) -> Path:
    x = wp.array(np.zeros(N, np.float32), device="cpu")
    y = wp.zeros(N, dtype=wp.float32, device="cpu")
    scratch = wp.zeros(N, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_work, dim=N, inputs=[x, y, scratch], device="cpu")
    rec.save(path, inputs={"x": x}, outputs={"y": y})
    return path


def _eager(x: np.ndarray) -> np.ndarray:
    xa = wp.array(x, device="cpu")
    y = wp.zeros(N, dtype=wp.float32, device="cpu")
    scratch = wp.zeros(N, dtype=wp.float32, device="cpu")
    wp.launch(k_work, dim=N, inputs=[xa, y, scratch], device="cpu")
    return y.numpy()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return _capture(tmp_path_factory.mktemp("threads") / "work.wrp")


def _hammer(run_one, inputs: list, threads: int) -> list:
    """Run ``run_one(x)`` for every input, spread over ``threads`` threads; the results in input order."""
    results = [None] * len(inputs)
    errors = []
    start = threading.Barrier(threads)

    def worker(k):
        try:
            start.wait()
            for j in range(k, len(inputs), threads):
                results[j] = run_one(inputs[j])
        except BaseException as e:  # noqa: BLE001  (reported by the test)
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]
    return results


@pytest.mark.slow
def test_many_threads_on_one_program_get_their_own_results_bit_for_bit(work):
    prog = wrpkit.load(work)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(N).astype(np.float32) for _ in range(64)]
    want = [_eager(x) for x in inputs]
    got = _hammer(lambda x: prog.run({"x": x})["y"], inputs, threads=8)
    wrong = [j for j, (g, w) in enumerate(zip(got, want)) if g.tobytes() != w.tobytes()]
    assert wrong == [], f"{len(wrong)} of {len(inputs)} runs returned another run's result"


def test_many_threads_on_one_isolated_program(work):
    prog = wrpkit.load(work, isolate=True)
    try:
        rng = np.random.default_rng(4)
        inputs = [rng.standard_normal(N).astype(np.float32) for _ in range(12)]
        want = [_eager(x) for x in inputs]
        got = _hammer(lambda x: prog.run({"x": x})["y"], inputs, threads=4)
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    finally:
        prog.close()


def test_run_returns_the_signature_outputs_or_what_is_named(work):
    prog = wrpkit.load(work)
    x = np.linspace(-1, 1, N, dtype=np.float32)
    out = prog.run({"x": x})
    assert list(out) == ["y"]  # the signature's outputs, not every binding
    assert out["y"].tobytes() == _eager(x).tobytes()
    both = prog.run({"x": x}, outputs=["x", "y"])
    assert list(both) == ["x", "y"] and both["x"].tobytes() == x.tobytes()
    assert prog.run(outputs=[]) == {}
    with pytest.raises(wrpkit.WrpBindingError, match="unknown binding 'nope'"):
        prog.run(outputs=["nope"])
    iso = wrpkit.load(work, isolate=True)
    try:
        assert list(iso.run({"x": x})) == ["y"]
        assert list(iso.run({"x": x}, outputs=["x"])) == ["x"]
    finally:
        iso.close()


def test_copy_false_reads_results_in_place(work):
    prog = wrpkit.load(work)
    x = np.full(N, 0.5, np.float32)
    view = prog.run({"x": x}, copy=False)["y"]
    assert not view.flags.owndata and view.tobytes() == _eager(x).tobytes()
    x2 = np.full(N, -0.5, np.float32)
    prog.run({"x": x2}, outputs=[])
    assert view.tobytes() == _eager(x2).tobytes()  # the same memory: the next replay changed it


# A step no test above was built around: vec3 particles through a @wp.func, a
# scratch array nobody binds, a WHILE whose counter and IF flag no binding names,
# and a 2-D grid the IF's branch splats into.  Every run must start from the
# captured counter, so each thread passes reset=True.
P = 300


@wp.func
def _damped(v: wp.vec3, c: float):
    return v * (1.0 - c)


@wp.kernel
def k_forces(x: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    f[i] = wp.vec3(-x[i][1], x[i][0], x[i][2]) * -0.1


@wp.kernel
def k_integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), dt: float):
    i = wp.tid()
    v[i] = _damped(v[i] + f[i] * dt, 0.01)
    x[i] = x[i] + v[i] * dt


@wp.kernel
def k_count_down(c: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    c[0] = c[0] - 1
    flag[0] = c[0] % 2


@wp.kernel
def k_splat(x: wp.array(dtype=wp.vec3), grid: wp.array2d(dtype=float)):
    i = wp.tid()
    gx = wp.clamp(int(x[i][0] * 4.0 + 8.0), 0, 15)
    gy = wp.clamp(int(x[i][1] * 4.0 + 8.0), 0, 15)
    wp.atomic_add(grid, gx, gy, 1.0)


def _particles(x0: np.ndarray, counter: int = 5) -> dict:
    return {"x": wp.array(x0, dtype=wp.vec3, device="cpu"), "v": wp.zeros(P, dtype=wp.vec3, device="cpu"),
            "f": wp.zeros(P, dtype=wp.vec3, device="cpu"), "grid": wp.zeros((16, 16), dtype=float, device="cpu"),
            "counter": wp.array([counter], dtype=wp.int32, device="cpu"), "flag": wp.zeros(1, dtype=wp.int32,
                                                                                         device="cpu")}


def _step_body(a: dict):
    wp.launch(k_count_down, dim=1, inputs=[a["counter"], a["flag"]], device="cpu")
    wp.launch(k_forces, dim=P, inputs=[a["x"], a["f"]], device="cpu")
    wp.launch(k_integrate, dim=P, inputs=[a["x"], a["v"], a["f"], 0.05], device="cpu")


def _splat(a: dict):
    wp.launch(k_splat, dim=P, inputs=[a["x"], a["grid"]], device="cpu")


@pytest.fixture(scope="module")
def while_step(tmp_path_factory) -> Path:
    a = _particles(np.zeros((P, 3), np.float32))
    for k in (k_forces, k_integrate, k_count_down, k_splat):
        wp.load_module(k.module, device="cpu")

    def body():
        _step_body(a)
        wp.capture_if(a["flag"], on_true=lambda: _splat(a))

    with wrpkit.capture(device="cpu") as rec:
        wp.capture_while(a["counter"], body)
    path = tmp_path_factory.mktemp("while_step") / "step.wrp"
    rec.save(path, inputs={"x": a["x"]}, outputs={"x": a["x"], "v": a["v"], "grid": a["grid"]})
    return path


def _eager_step(x0: np.ndarray, counter: int = 5) -> dict:
    a = _particles(x0, counter)
    for c in range(counter - 1, -1, -1):  # the WHILE, unrolled on the host: the counter after each count-down
        _step_body(a)
        if c % 2:
            _splat(a)
    return {k: a[k].numpy() for k in ("x", "v", "grid")}


@pytest.mark.slow
def test_threads_on_one_program_with_loop_state_no_binding_names(while_step):
    prog = wrpkit.load(while_step)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((P, 3)).astype(np.float32) for _ in range(24)]
    want = [_eager_step(x) for x in inputs]
    got = _hammer(lambda x: prog.run({"x": x}, reset=True), inputs, threads=6)
    wrong = [(j, k) for j, (g, w) in enumerate(zip(got, want)) for k in w if g[k].tobytes() != w[k].tobytes()]
    assert wrong == [], f"{len(wrong)} of {len(inputs) * 3} results differ from the eager run"
    assert want[0]["grid"].sum() == 2 * P  # the IF ran twice (counters 3 and 1), each splatting every particle
    # without reset the loop's counter stays at 0: a second run replays no step and changes nothing
    first = prog.run({"x": inputs[0]}, reset=True)["x"]
    again = prog.run({"x": first})["x"]
    assert again.tobytes() == first.tobytes()
