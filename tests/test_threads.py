"""One Program shared by many threads (issue 24).

Runs on one :class:`wrpkit.Program` (and one ``IsolatedProgram``) are
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
