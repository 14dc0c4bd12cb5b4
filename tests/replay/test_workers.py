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


def _shared_step(prog, x):
    """A task on a Program other tasks share: from the captured state, atomically."""
    return prog.run({"pos": x}, reset=True)["pos"]


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
        # The faster recipe (docs/scale.md): the Program sent to each worker once.
        # Tasks share a worker's copy, so each resets it to the captured state as it runs.
        shared = client.scatter(prog, broadcast=True)
        scattered = client.gather([client.submit(_shared_step, shared, x, pure=False) for x in inputs])
    assert [g.tobytes() for g in got] == [s.tobytes() for s in serial]
    assert [g.tobytes() for g in scattered] == [s.tobytes() for s in serial]
    out = capfd.readouterr()
    assert "initialized" not in out.out + out.err and "Warp 1.19" not in out.out + out.err


def test_ray_actors_and_tasks_give_the_serial_results(sim, capfd):
    """docs/scale.md's Ray recipes: actors holding the Program, and tasks taking a ray.put reference."""
    ray = pytest.importorskip("ray", reason="ray does not install in this environment (pip install 'wrpkit[ray]')")
    prog = wrpkit.load(sim)
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((N, 3)).astype(np.float32) for _ in range(16)]
    serial = [wrpkit.load(sim).run({"pos": x})["pos"] for x in inputs]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    try:
        ref = ray.put(prog)

        @ray.remote
        class Stepper:
            def __init__(self, program):
                self.program = program

            def step(self, x):  # pickled by value: Ray's workers cannot import this test module
                return self.program.run({"pos": x}, reset=True)["pos"]

        def step(prog, x):
            return prog.run({"pos": x})["pos"]

        actors = [Stepper.remote(ref) for _ in range(2)]
        by_actor = ray.get([actors[i % 2].step.remote(x) for i, x in enumerate(inputs)])
        by_task = ray.get([ray.remote(step).remote(ref, x) for x in inputs])
    finally:
        ray.shutdown()
    assert [g.tobytes() for g in by_actor] == [s.tobytes() for s in serial]
    assert [g.tobytes() for g in by_task] == [s.tobytes() for s in serial]
    out = capfd.readouterr()
    assert "Warp 1.19" not in out.out + out.err


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_run_with_reset_starts_from_the_captured_state(sim, isolate):
    """State carries from run to run (velocities here); run(reset=True) restores the capture first."""
    x = np.random.default_rng(7).standard_normal((N, 3)).astype(np.float32)
    fresh = wrpkit.load(sim).run({"pos": x})["pos"]
    prog = wrpkit.load(sim, isolate=isolate)
    try:
        assert prog.run({"pos": x})["pos"].tobytes() == fresh.tobytes()
        assert prog.run({"pos": x})["pos"].tobytes() != fresh.tobytes()  # velocities moved on
        assert prog.run({"pos": x}, reset=True)["pos"].tobytes() == fresh.tobytes()
        assert prog.run({"pos": x}, reset=True)["pos"].tobytes() == fresh.tobytes()
    finally:
        prog.close()


@wp.kernel
def k_drift(pos: wp.array(dtype=wp.vec3), speed: wp.array(dtype=wp.float32)):
    i = wp.tid()
    p = pos[i] + wp.vec3(0.1, 0.0, 0.0)
    pos[i] = p
    speed[i] = wp.length(p)  # speed: unbound scratch, written before it is read


@wp.kernel
def k_count_down(left: wp.array(dtype=wp.int32), again: wp.array(dtype=wp.int32)):
    left[0] = left[0] - 1
    again[0] = wp.where(left[0] > 0, 1, 0)


@wp.kernel
def k_total(speed: wp.array(dtype=wp.float32), total: wp.array(dtype=wp.float32)):
    wp.atomic_add(total, 0, speed[wp.tid()])


def _while_capture(path: Path) -> Path:
    """A WHILE whose flag and counter no binding names: the first replay leaves both at 0."""
    pos = wp.array(np.zeros((N, 3), np.float32), dtype=wp.vec3, device="cpu")
    speed = wp.zeros(N, dtype=wp.float32, device="cpu")
    left = wp.array([3], dtype=wp.int32, device="cpu")
    again = wp.array([1], dtype=wp.int32, device="cpu")
    total = wp.zeros(1, dtype=wp.float32, device="cpu")

    def body():
        wp.launch(k_drift, dim=N, inputs=[pos, speed], device="cpu")
        wp.launch(k_count_down, dim=1, inputs=[left, again], device="cpu")

    with wrpkit.capture(device="cpu") as rec:
        wp.capture_while(again, body)
        wp.launch(k_total, dim=N, inputs=[speed, total], device="cpu")
    rec.save(path, inputs={"pos": pos}, outputs={"pos": pos, "total": total})
    return path


def _eager_while(x: np.ndarray) -> dict:
    """The same kernels launched eagerly from fresh arrays: what every reset run must give."""
    pos = wp.array(x, dtype=wp.vec3, device="cpu")
    speed = wp.zeros(N, dtype=wp.float32, device="cpu")
    left = wp.array([3], dtype=wp.int32, device="cpu")
    again = wp.array([1], dtype=wp.int32, device="cpu")
    total = wp.zeros(1, dtype=wp.float32, device="cpu")
    while again.numpy()[0]:
        wp.launch(k_drift, dim=N, inputs=[pos, speed], device="cpu")
        wp.launch(k_count_down, dim=1, inputs=[left, again], device="cpu")
    wp.launch(k_total, dim=N, inputs=[speed, total], device="cpu")
    return {"pos": pos.numpy(), "total": total.numpy()}


@pytest.fixture(scope="module")
def while_sim(tmp_path_factory) -> Path:
    return _while_capture(tmp_path_factory.mktemp("while") / "while.wrp")


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_reset_restores_memory_no_binding_names(while_sim, isolate):
    """reset=True restores the WHILE's unbound flag and counter too, so every task runs 3 iterations."""
    xs = [np.random.default_rng(k).standard_normal((N, 3)).astype(np.float32) for k in range(3)]
    prog = wrpkit.load(while_sim, isolate=isolate)
    try:
        for x in xs:
            want = _eager_while(x)
            got = prog.run({"pos": x}, reset=True)
            assert got["pos"].tobytes() == want["pos"].tobytes()
            assert got["total"].tobytes() == want["total"].tobytes()
        # Without reset the flag stays 0: the body does not run again (as in stock Warp).
        assert prog.run({"pos": xs[0]})["pos"].tobytes() == xs[0].tobytes()
    finally:
        prog.close()


def test_a_graph_with_unbound_state_is_reused_on_unpickling_and_reset(while_sim):
    blob = pickle.dumps(wrpkit.load(while_sim))
    x = np.random.default_rng(5).standard_normal((N, 3)).astype(np.float32)
    want = _eager_while(x)["pos"].tobytes()
    a = pickle.loads(blob)
    assert a.run({"pos": x})["pos"].tobytes() == want
    a_id = id(a)
    del a
    b = pickle.loads(blob)
    assert id(b) == a_id  # reused: reset() reaches every region now
    assert b.run({"pos": x})["pos"].tobytes() == want


@wp.kernel
def k_nearest(mesh: wp.handle, pts: wp.array(dtype=wp.vec3), sign: wp.array(dtype=wp.float32),
              side: wp.array(dtype=wp.float32)):
    i = wp.tid()
    r = wp.mesh_query_point(mesh, pts[i], 10.0)
    side[i] = wp.where(r.result, r.sign, 0.0)  # side: unbound scratch
    sign[i] = side[i] + 1.0


def test_reset_of_a_graph_with_a_mesh_leaves_the_mesh_alone_and_stays_right(tmp_path):
    """Unbound scratch is restored; the mesh's own regions are not touched (its BVH was built from them)."""
    mesh = wp.Mesh(points=wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), dtype=wp.vec3,
                                   device="cpu"),
                   indices=wp.array([0, 1, 2], dtype=wp.int32, device="cpu"))
    pts = wp.array(np.random.default_rng(2).random((64, 3)).astype(np.float32), dtype=wp.vec3, device="cpu")
    sign = wp.zeros(64, dtype=wp.float32, device="cpu")
    side = wp.zeros(64, dtype=wp.float32, device="cpu")
    wp.load_module(device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_nearest, dim=64, inputs=[mesh.id, pts, sign, side], device="cpu")
    path = rec.save(tmp_path / "mesh.wrp", inputs={"pts": pts}, outputs={"sign": sign})
    wp.launch(k_nearest, dim=64, inputs=[mesh.id, pts, sign, side], device="cpu")
    want = sign.numpy().tobytes()
    prog = wrpkit.load(path)
    me = prog.model.meshes[0]
    assert set(prog._hidden).isdisjoint({me.points_region_id, me.indices_region_id}) and prog._hidden
    for _ in range(2):
        assert prog.run(reset=True)["sign"].tobytes() == want
    assert pickle.loads(pickle.dumps(prog)).run()["sign"].tobytes() == want
