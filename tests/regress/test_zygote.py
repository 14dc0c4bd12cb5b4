"""The zygote of ``wrp regress`` (:mod:`wrpkit.run.contain.zygote`): forks that serve a ReplayWorker as a
started child does, and exit statuses reported by the zygote that reaps them.

A capture of a kernel written here (a vec3 through a ``@wp.func``) is made with stock Warp at test
time; the fork's replay is checked against numpy.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import wrpkit
from wrpkit.deadline import Deadline
from wrpkit.run.load.prepare import prepare
from wrpkit.run.contain.served import ChildCrashed
from wrpkit.run.contain.worker import ReplayWorker
from wrpkit.run.contain.zygote import Zygote

wp.config.quiet = True
N = 32

pytestmark = pytest.mark.skipif(not Zygote.supported(), reason="the zygote needs Linux with pidfds")


@wp.func
def _scaled(v: wp.vec3, s: float) -> wp.vec3:
    return v * s + wp.vec3(1.0, 2.0, 3.0)


@wp.kernel
def _k_scale(p: wp.array(dtype=wp.vec3), s: float, q: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    q[i] = _scaled(p[i], s)


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("zygote")
    p = wp.array(np.zeros((N, 3), np.float32), dtype=wp.vec3, device="cpu")
    q = wp.zeros(N, dtype=wp.vec3, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(_k_scale, dim=N, inputs=[p, 2.0, q], device="cpu")
    return rec.save(d / "scale.wrp", inputs={"p": p}, outputs={"q": q})


@pytest.fixture
def zygote():
    z = Zygote()
    yield z
    z.close()


def _zygote_forks(z: Zygote) -> set:
    out = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == z.proc.pid:
                    out.add(int(p.name))
            except (OSError, ValueError, IndexError, AttributeError):
                pass
    return out


def test_a_fork_replays_as_a_started_child_does(capture, zygote):
    prep = prepare(capture)
    w = ReplayWorker(prep, "cpu")
    w.zygote = zygote
    try:
        p0 = np.random.default_rng(3).standard_normal((N, 3)).astype(np.float32)
        run = w.run({"p": p0.reshape(-1).view(np.uint8)}, 1, 0, deadline=Deadline(120))
        assert w.proc.pid in _zygote_forks(zygote)  # forked, not started
        q = run.results["q"].view(np.float32).reshape(N, 3)
        np.testing.assert_allclose(q, p0 * 2.0 + np.array([1, 2, 3], np.float32), rtol=1e-6)
        forked = w.proc
    finally:
        w.close()
    # close() ends the child as it ends a started one: it sees its socket close and exits, or is
    # killed first; either way the zygote reaped it and said how.
    assert forked.returncode in (0, -signal.SIGKILL)


def test_a_killed_fork_reports_its_signal(capture, zygote):
    w = ReplayWorker(prepare(capture), "cpu")
    w.zygote = zygote
    try:
        w.warm(timeout=120)
        pid = w.proc.pid
        # Killed while it replays, so the signal ends a request in flight.  (Killed between
        # requests, the next run would see a dead child and start another, which is right but
        # not what this test is about.)
        stop = threading.Event()

        def kill_once_replaying():
            while not stop.is_set():
                if w.stage() == "replaying":
                    os.kill(pid, signal.SIGSEGV)
                    return
                time.sleep(0.001)

        killer = threading.Thread(target=kill_once_replaying, daemon=True)
        killer.start()
        try:
            with pytest.raises(ChildCrashed) as e:
                w.run({}, 10**8, 0, deadline=Deadline(120))
        finally:
            stop.set()
            killer.join()
        assert e.value.signum == signal.SIGSEGV and e.value.stage == "replaying"
    finally:
        w.close()
    # The next request gets a new fork from the same zygote.
    w2 = ReplayWorker(prepare(capture), "cpu")
    w2.zygote = zygote
    try:
        w2.run({}, 1, 0, deadline=Deadline(120))
        assert w2.proc.pid in _zygote_forks(zygote)
    finally:
        w2.close()


def test_a_dead_zygote_makes_the_worker_start_its_child(capture, zygote):
    os.kill(zygote.proc.pid, signal.SIGKILL)
    zygote.proc.wait()
    w = ReplayWorker(prepare(capture), "cpu")
    w.zygote = zygote
    try:
        w.run({}, 1, 0, deadline=Deadline(300))
        assert w.zygote is None and w.proc.pid not in _zygote_forks(zygote)
    finally:
        w.close()
