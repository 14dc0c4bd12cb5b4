"""A Program shipped to workers (issue 24): a real local Dask cluster with two threads per worker.

Every task gets the Program as an argument (Dask pickles it with the task, as
the README's recipe does); a worker thread that unpickles the same bundle
again reuses the graph it loaded, reset to its captured values.  Each result
must equal a serial replay of the same input bit for bit, and no worker may
print Warp's banner.
"""

from __future__ import annotations

import pickle
import threading
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit

pytestmark = pytest.mark.slow  # starts a local Dask cluster

wp.config.quiet = True
N = 2048


@wp.kernel
def k_step(pos: wp.array(dtype=wp.vec3), vel: wp.array(dtype=wp.vec3), dt: wp.float32):
    i = wp.tid()
    v = vel[i] + wp.vec3(0.0, -9.8, 0.0) * dt
    vel[i] = v
    pos[i] = pos[i] + v * dt


def _capture(path: Path) -> Path:
    pos = wp.array(np.zeros((N, 3), np.float32), dtype=wp.vec3, device="cpu")
    vel = wp.array(np.ones((N, 3), np.float32), dtype=wp.vec3, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        for _ in range(4):
            wp.launch(k_step, dim=N, inputs=[pos, vel, 0.01], device="cpu")
    rec.save(path, inputs={"pos": pos, "vel": vel}, outputs={"pos": pos})
    return path


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return _capture(tmp_path_factory.mktemp("workers") / "sim.wrp")


def _step(prog, x):
    """A task: one run from the captured state (velocities as captured) with new positions."""
    return prog.run({"pos": x})["pos"]


def test_unpickling_again_in_a_thread_reuses_the_graph_reset(sim):
    prog = wrpkit.load(sim)
    blob = pickle.dumps(prog)
    a = pickle.loads(blob)
    x = np.random.default_rng(1).standard_normal((N, 3)).astype(np.float32)
    first = a.run({"pos": x})["pos"]
    b = pickle.loads(blob)
    assert b is not a  # a is still held: a second graph, never a shared one
    assert b.run({"pos": x})["pos"].tobytes() == first.tobytes()
    a_id = id(a)
    del a, b
    c = pickle.loads(blob)
    assert id(c) == a_id  # nobody holds the first any more: reused, not loaded again
    assert c.run({"pos": x})["pos"].tobytes() == first.tobytes()  # reset: velocities as captured again
    other = []
    t = threading.Thread(target=lambda: other.append(pickle.loads(blob)))
    t.start()
    t.join()
    assert other[0] is not c  # c is held here: the other thread gets its own


def test_a_local_dask_cluster_with_two_threads_per_worker(sim, capfd):
    distributed = pytest.importorskip("distributed")
    prog = wrpkit.load(sim)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((N, 3)).astype(np.float32) for _ in range(24)]
    serial = [wrpkit.load(sim).run({"pos": x})["pos"] for x in inputs]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        futures = [client.submit(_step, prog, x, pure=False) for x in inputs]
        got = client.gather(futures)
    assert [g.tobytes() for g in got] == [s.tobytes() for s in serial]
    out = capfd.readouterr()
    assert "initialized" not in out.out + out.err and "Warp 1.19" not in out.out + out.err
