"""``wrp regress`` / ``wrpkit.regress``: a folder of real captures replayed against goldens.

The suite is built at test time from stock Warp: the samples (run as a user
runs them), wrpkit captures of kernels written here (one vector-typed and
saved with stock ``capture_save``), a bundle, and broken cases: a changed
golden, a truncated file, a data-dependent crash, a WHILE that never ends,
a CUDA-only capture, an expected failure.  Goldens come from eager runs of
the same kernels.  The verdicts must be the same serially, on two local
workers, on a real local Dask cluster (and on Ray where it installs), and
the JUnit XML must say what the JSON says.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import warp as wp
from click.testing import CliRunner

import wrpkit
from wrpkit.cli import main
from wrpkit.run.regress.case import cuda_device_count
from wrpkit.run.contain.zygote import Zygote

needs_zygote = pytest.mark.skipif(not Zygote.supported(), reason="the zygote needs Linux with pidfds")

wp.config.quiet = True
N = 64
from proc_helpers import ROOT


# Clusters, worker pools and whole suites: the slow lane.
pytestmark = pytest.mark.slow


@wp.kernel
def k_axpy(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = 2.0 * a[i] + b[i]


@wp.func
def lift(p: wp.vec3) -> wp.vec3:
    return p * 2.0 + wp.vec3(1.0, 0.0, -1.0)


@wp.kernel
def k_lift(p: wp.array(dtype=wp.vec3), q: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    q[i] = lift(p[i])


@wp.kernel
def k_scatter(idx: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[idx[i]] = float(i)


@wp.kernel
def k_halve(counter: wp.array(dtype=wp.int32), v: wp.array(dtype=wp.float32), flag: wp.array(dtype=wp.int32)):
    i = wp.tid()
    v[i] = v[i] * 0.5
    if i == 0:
        c = counter[0] - 1
        counter[0] = c
        flag[0] = c % 2


@wp.kernel
def k_bump(v: wp.array(dtype=wp.float32)):
    i = wp.tid()
    v[i] = v[i] + float(i)


@wp.kernel
def k_planted(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = wp.sqrt(x[i]) / (x[i] - 4.0)  # NaN where x < 0, Inf at x == 4


def _if_in_while(d: Path) -> Path:
    """An IF inside a WHILE (wp.capture_if in wp.capture_while); the golden is an eager run of the same step."""
    def arrays():
        return {"counter": wp.array(np.array([5], np.int32), device="cpu"),
                "v": wp.array(np.linspace(0, 8, N, dtype=np.float32), device="cpu"),
                "flag": wp.zeros(1, dtype=wp.int32, device="cpu")}

    def step(a):
        def bump():
            wp.launch(k_bump, dim=N, inputs=[a["v"]], device="cpu")

        def body():
            wp.launch(k_halve, dim=N, inputs=[a["counter"], a["v"], a["flag"]], device="cpu")
            wp.capture_if(a["flag"], bump)

        wp.capture_while(a["counter"], body)

    live = arrays()
    step(live)  # eagerly: Warp evaluates the conditions on the host
    a = arrays()
    with wrpkit.capture(device="cpu") as rec:
        step(a)
    path = rec.save(d / "if_in_while.wrp", inputs={"counter": a["counter"], "v": a["v"]},
                    outputs={"v": a["v"], "flag": a["flag"]})
    np.savez(d / "if_in_while_expected.npz", v=live["v"].numpy(), flag=live["flag"].numpy())
    return path


def _planted(d: Path) -> Path:
    x = wp.array(np.array([-1, 0, 1, 4, 9, -2], np.float32), device="cpu")
    y = wp.zeros(6, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_planted, dim=6, inputs=[x, y], device="cpu")
    d.mkdir(parents=True, exist_ok=True)
    path = rec.save(d / "planted.wrp", inputs={"x": x}, outputs={"y": y})
    xs = x.numpy()
    with np.errstate(all="ignore"):
        np.savez(d / "planted_expected.npz", y=(np.sqrt(xs) / (xs - 4.0)).astype(np.float32))
    return path


def _copy_case(src: Path, dst: Path) -> Path:
    """A .wrp (and its modules folder) copied under a new name, as a user copies a case."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    mods = src.with_name(src.stem + "_modules")
    if mods.is_dir():
        shutil.copytree(mods, dst.with_name(dst.stem + "_modules"))
    return dst


def _axpy(d: Path) -> Path:
    a = np.arange(N, dtype=np.float32)
    b = np.linspace(-1, 1, N, dtype=np.float32)
    wa, wb = wp.array(a, device="cpu"), wp.array(b, device="cpu")
    out = wp.zeros(N, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_axpy, dim=N, inputs=[wa, wb, out], device="cpu")
    d.mkdir(parents=True, exist_ok=True)
    path = rec.save(d / "axpy.wrp", inputs={"a": wa, "b": wb}, outputs={"out": out})
    a_in, b_in = a[::-1].copy(), b * 3
    np.savez(d / "axpy_inputs.npz", a=a_in, b=b_in)
    np.savez(d / "axpy_expected.npz", out=2 * a_in + b_in)  # the eager answer, by numpy
    return path


def _stock_vec(d: Path) -> Path:
    """A vector-typed program through a @wp.func, saved by stock capture_save (no types in the file)."""
    p0 = np.random.default_rng(1).standard_normal((N, 3)).astype(np.float32)
    p = wp.array(p0, dtype=wp.vec3, device="cpu")
    q = wp.zeros(N, dtype=wp.vec3, device="cpu")
    wp.launch(k_lift, dim=N, inputs=[p, q], device="cpu")
    eager = q.numpy().copy()
    q.zero_()
    wp.capture_begin(device="cpu", apic=True)
    try:
        wp.launch(k_lift, dim=N, inputs=[p, q], device="cpu")
    finally:
        graph = wp.capture_end(device="cpu")
    wp.capture_save(graph, str(d / "vec_stock"), inputs={"p": p}, outputs={"q": q})
    np.savez(d / "vec_stock_expected.npz", p=p0, q=eager)
    return d / "vec_stock.wrp"


def _crash(d: Path) -> Path:
    idx = wp.array(np.arange(N, dtype=np.int32), device="cpu")
    out = wp.zeros(N, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_scatter, dim=N, inputs=[idx, out], device="cpu")
    path = rec.save(d / "crash.wrp", inputs={"idx": idx}, outputs={"out": out})
    np.savez(d / "crash_inputs.npz", idx=np.full(N, 2**31 - 1, np.int32))  # out + 8 GiB: a fault
    np.savez(d / "crash_expected.npz", out=np.zeros(N, np.float32))
    return path


def _forever(d: Path) -> Path:
    import debug_programs as dp  # noqa: PLC0415

    path = dp.capture_endless_while(d / "forever.wrp")
    good = wrpkit.load(path).run()  # flag = 0 as captured: the loop ends at once
    np.savez(d / "forever_expected.npz", out=good["out"])
    # flag = 1: days of nested loops, neither reaching Warp's 2^24-iteration guard (a loop that counted
    # down from -1 did, within 5 s on a quiet machine, and so failed before a 5 s timeout)
    np.savez(d / "forever_inputs.npz", flag=np.array([1], np.int32))
    return path


def _cuda_only(src: Path, dst: Path) -> Path:
    """A valid capture recorded for CUDA (sm_90): ``src`` exported to JSON and retargeted, as a user edits one."""
    from wrpkit.formats import jsonform, wrp1  # noqa: PLC0415

    j = dst.with_suffix(".json")
    assert CliRunner().invoke(main, ["convert", str(src), str(j)]).exit_code == 0
    data = json.loads(j.read_text())
    data["device_type"], data["target_arch"] = "CUDA", 90
    for m in data["modules"]:
        m["target_arch"] = 90
    prog, modules = jsonform.loads(json.dumps(data).encode())
    dst.write_bytes(wrp1.encode_wrp1(prog))
    mdir = dst.with_name(dst.stem + "_modules")
    mdir.mkdir()
    for name, blob in modules.items():
        (mdir / name).write_bytes(blob)
    j.unlink()
    shutil.copyfile(src.with_name("axpy_expected.npz"), dst.with_name(dst.stem + "_expected.npz"))
    return dst


SUITE_TOML = """
# per-case settings of the test suite
[defaults]
timeout = 120

[cases."broken/forever"]
timeout = 3

[cases."nan/*"]
equal_nan = true

[cases."known/*"]
expect = "fail"
reason = "a golden from before a reviewed change"
"""


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    s = tmp_path_factory.mktemp("suite")
    for sample in ("saxpy", "while_loop"):  # the files the samples write, as a user runs them
        r = subprocess.run([sys.executable, str(ROOT / "samples" / f"{sample}.py"), str(s / "samples")],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    axpy = _axpy(s / "mine")
    r = CliRunner().invoke(main, ["convert", str(axpy), str(s / "mine" / "bundle.wrpk")])
    assert r.exit_code == 0, r.output
    for ext in ("inputs", "expected"):
        shutil.copyfile(s / "mine" / f"axpy_{ext}.npz", s / "mine" / f"bundle_{ext}.npz")
    _stock_vec(s / "mine")
    _if_in_while(s / "mine")
    _planted(s / "nan")
    broken = s / "broken"
    _copy_case(axpy, broken / "changed.wrp")
    shutil.copyfile(s / "mine" / "axpy_inputs.npz", broken / "changed_inputs.npz")
    with np.load(s / "mine" / "axpy_expected.npz") as z:
        out = z["out"].copy()
    out[5] += 1.0
    np.savez(broken / "changed_expected.npz", out=out)
    _copy_case(axpy, broken / "truncated.wrp")
    data = (broken / "truncated.wrp").read_bytes()
    (broken / "truncated.wrp").write_bytes(data[: len(data) // 2])
    shutil.copyfile(s / "mine" / "axpy_expected.npz", broken / "truncated_expected.npz")
    _crash(broken)
    _forever(broken)
    (s / "gpu").mkdir()
    _cuda_only(axpy, s / "gpu" / "cuda_only.wrp")
    _copy_case(broken / "changed.wrp", s / "known" / "old_golden.wrp")
    for ext in ("inputs", "expected"):
        shutil.copyfile(broken / f"changed_{ext}.npz", s / "known" / f"old_golden_{ext}.npz")
    (s / "wrp-suite.toml").write_text(SUITE_TOML)
    return s


#: What each case must give: (verdict, error class).
EXPECTED = {
    "broken/changed": ("fail", None),
    "broken/crash": ("error", "WrpCrashError"),
    "broken/forever": ("error", "WrpTimeoutError"),
    "broken/truncated": ("error", "WrpFormatError"),
    "gpu/cuda_only": ("skip", "WrpDeviceError"),
    "known/old_golden": ("xfail", None),
    "mine/axpy": ("pass", None),
    "mine/bundle": ("pass", None),
    "mine/if_in_while": ("pass", None),
    "nan/planted": ("pass", None),
    "mine/vec_stock": ("pass", None),
    "samples/saxpy": ("pass", None),
    "samples/while_loop": ("pass", None),
}


def _expected():
    if cuda_device_count() == 0:
        return EXPECTED
    # With a GPU the retargeted capture runs, and its CPU object cannot load there.
    return dict(EXPECTED, **{"gpu/cuda_only": ("error", None)})


def _verdicts(report) -> dict:
    return {c.name: (c.verdict, c.error_class) for c in report.cases}


def _check_verdicts(report):
    got = _verdicts(report)
    want = _expected()
    if cuda_device_count():
        got["gpu/cuda_only"] = (got["gpu/cuda_only"][0], None)
    assert got == want, {k: v for k, v in got.items() if want.get(k) != v}
    assert [c.name for c in report.cases] == sorted(want)  # case order


@pytest.fixture(scope="module")
def serial(suite):
    return wrpkit.regress(suite)


def test_serial_run_gives_each_case_its_verdict(serial):
    _check_verdicts(serial)
    assert serial.exit_code == 1 and not serial.ok
    by = {c.name: c for c in serial.cases}
    fail = by["broken/changed"]
    b = fail.bindings["out"]
    assert (b["mismatches"], b["first_index"], b["max_abs"]) == (1, 5, pytest.approx(1.0))
    assert "out: 1 of 64 beyond tolerance, first at 5" in fail.message
    assert "replay crashed with SIG" in by["broken/crash"].message and "k_scatter" in by["broken/crash"].message
    assert "did not finish within 3 s" in by["broken/forever"].message
    if cuda_device_count() == 0:
        assert "no CUDA device" in by["gpu/cuda_only"].message
    assert "expected to fail: a golden from before a reviewed change" in by["known/old_golden"].message
    assert {c.name for c in serial.passed} == {n for n, v in EXPECTED.items() if v[0] in ("pass", "xfail")}
    assert [c.name for c in serial.failed] == ["broken/changed"]
    assert serial.to_json()["counts"]["pass"] == sum(v[0] == "pass" for v in EXPECTED.values())
    # The warm worker: a passing case costs far less than a process start and `import warp`.
    assert min(by[n].seconds for n in ("mine/axpy", "mine/bundle", "mine/vec_stock")) < 1.0


def test_records_are_a_timeline_of_the_run(serial):
    import datetime  # noqa: PLC0415

    run_start = datetime.datetime.fromisoformat(serial.started).timestamp()  # whole seconds: at or before
    ran = [c for c in serial.cases if not c.message.startswith("skipped by")]
    assert ran and all(c.started is not None for c in ran)
    ends = [c.started + c.worker_start_s + c.seconds for c in ran]
    assert run_start <= ran[0].started and ends[-1] <= run_start + 1 + serial.seconds
    # Serially, in case order: each case begins once the one before it has ended.
    for before_end, c in zip(ends, ran[1:]):
        assert c.started >= before_end - 0.005, c.name
    assert all(c["started"] is not None for c in serial.to_json()["cases"] if c["name"] in {r.name for r in ran})


def test_native_engine_gives_the_serial_verdicts(suite, serial):
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        native_paths().require_replayer()
    except wrpkit.WrpError as e:
        pytest.skip(str(e))
    rep = wrpkit.regress(suite, engine="native")
    _same(rep, serial)
    assert {c.engine for c in rep.cases} == {"native"}


def _same(a, b):
    assert _verdicts(a) == _verdicts(b)
    for x, y in zip(a.cases, b.cases):
        assert {k: (v["ok"], v["mismatches"], v["first_index"]) for k, v in x.bindings.items()} == \
            {k: (v["ok"], v["mismatches"], v["first_index"]) for k, v in y.bindings.items()}


def test_two_local_workers_give_the_serial_verdicts_in_case_order(suite, serial):
    rep = wrpkit.regress(suite, jobs=2)
    _same(rep, serial)
    assert rep.ran_on == "2 local workers"
    assert len({c.worker for c in rep.cases if c.worker}) == 2


@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_a_real_dask_cluster_gives_the_serial_verdicts(suite, serial):
    distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install '.[test]')")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        rep = wrpkit.regress(suite, dask=cluster.scheduler_address)
        worker_pids = {w.pid for w in cluster.workers.values()} if hasattr(next(iter(cluster.workers.values())),
                                                                           "pid") else set()
        # Each worker process that ran cases forked its replay children from its own zygote.
        zygote_parents = {int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
                          for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, b"--zygote")}
    _same(rep, serial)
    ran = {int(c.worker.split(":")[1].split("/")[0]) for c in rep.cases if c.worker}
    if Zygote.supported():
        assert ran <= zygote_parents, (ran, zygote_parents)
    assert rep.ran_on.startswith("dask tcp://127.0.0.1:") and "(2 workers)" in rep.ran_on
    pids = {int(c.worker.split(":")[1].split("/")[0]) for c in rep.cases if c.worker}
    assert os.getpid() not in pids  # the cases ran in the cluster's worker processes
    if worker_pids:
        assert pids <= worker_pids


@pytest.mark.slow  # a Dask cluster
def test_a_dask_worker_with_two_threads_runs_cases_on_both(suite, tmp_path):
    """One worker process with two threads: both run cases (each with its own replay child), the run
    says so, and the verdicts are a serial run's.  (The window, two tasks a thread, is not observable here.)"""
    distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install '.[test]')")
    s = _case_copies(suite, tmp_path / "s", {f"a{i}": "mine/axpy" for i in range(8)})
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=40) as cluster:
        rep = wrpkit.regress(s, dask=cluster.scheduler_address)
    assert rep.ran_on.endswith("(1 worker, 2 threads)"), rep.ran_on
    _same(rep, wrpkit.regress(s))
    assert len({c.worker for c in rep.cases}) == 2  # one process, both of its threads


@pytest.mark.slow  # a Dask cluster
def test_a_case_of_many_megabytes_goes_to_dask_without_dasks_warning(tmp_path):
    """A case whose files pass Dask's 10 MB "large graph" mark (a user's 1M-element arrays): it replays and
    passes on the cluster, and the CLI's output carries no Dask warning."""
    distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install '.[test]')")
    n = 1 << 20
    a = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    b = np.linspace(-1, 1, n, dtype=np.float32)
    wa, wb = wp.array(a, device="cpu"), wp.array(b, device="cpu")
    out = wp.zeros(n, dtype=wp.float32, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.launch(k_axpy, dim=n, inputs=[wa, wb, out], device="cpu")
    s = tmp_path / "s"
    s.mkdir()
    rec.save(s / "big.wrp", inputs={"a": wa, "b": wb}, outputs={"out": out})
    np.savez(s / "big_inputs.npz", a=a[::-1].copy(), b=b)
    np.savez(s / "big_expected.npz", out=2 * a[::-1] + b)
    assert sum(f.stat().st_size for f in s.rglob("*") if f.is_file()) > 12 << 20
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=40) as cluster:
        r = subprocess.run([sys.executable, "-m", "wrpkit.cli", "regress", str(s), "--dask", cluster.scheduler_address],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, WRP_NO_PROGRESS="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
    assert "Warning" not in r.stdout + r.stderr and "large graph" not in r.stdout + r.stderr, r.stderr


def _cmdline_has(proc: Path, word: bytes) -> bool:
    try:
        return word in (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _descendants_replaying(root: int) -> list:
    """``(pid, worker pid)`` of every replay child below process ``root`` (at any depth) now replaying: a
    started child's worker is its parent, a fork's is its zygote's parent."""
    parent = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue

    def below(pid):
        while pid in parent and pid > 1:
            pid = parent[pid]
            if pid == root:
                return True
        return False

    out = []
    for pid, ppid in parent.items():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        forked = b"--zygote" in argv
        if (b"wrpkit.run.contain.child" in argv or forked) and below(pid) and \
                _stage_reader(Path(f"/proc/{pid}"))() == "replaying":
            out.append((pid, parent.get(ppid) if forked else ppid))
    return out


def _kill_the_worker_of_the_never_ending_case(suite: Path, tmp_path: Path, regress) -> None:
    """``regress(s)`` (a remote route) over 12 quick cases and a never-ending one in a batch with another;
    the worker process replaying the never-ending case is killed mid-batch: the batch runs again, every case
    gets its own verdict (the never-ending one its timeout, from another worker), in case order."""
    cases = {f"a{i:02d}": "mine/axpy" for i in range(12)}
    cases["a05_forever"] = "broken/forever"  # in a batch with others (13 cases, 2 workers: batches of 7 and 6)
    s = _case_copies(suite, tmp_path / "s", cases)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", regress(s)))
    t.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and t.is_alive():
        replaying = _descendants_replaying(os.getpid())
        if replaying:
            time.sleep(1.0)  # a quick case is done by now: this one is the never-ending case
            if (replaying[0][0], replaying[0][1]) in _descendants_replaying(os.getpid()):
                os.kill(replaying[0][1], signal.SIGKILL)  # its worker process (Dask's or Ray's)
                killed = replaying[0][1]
        time.sleep(0.2)
    t.join(180)
    assert killed is not None and not t.is_alive()
    rep = result["r"]
    assert [c.name for c in rep.cases] == sorted(cases)
    v = {c.name: (c.verdict, c.error_class) for c in rep.cases}
    assert v == {**{n: ("pass", None) for n in cases if n != "a05_forever"},
                 "a05_forever": ("error", "WrpTimeoutError")}, \
        [(c.name, c.verdict, c.message, c.worker) for c in rep.cases if c.verdict != "pass"]
    forever = next(c for c in rep.cases if c.name == "a05_forever")
    assert int(forever.worker.split(":")[1].split("/")[0]) != killed  # its verdict came from another worker


@pytest.mark.slow  # a Dask cluster, a worker killed and restarted, a 5 s timeout
def test_a_killed_dask_worker_loses_no_case(suite, tmp_path):
    """A Dask worker process killed while its batch of cases runs: the batch runs again, case by case."""
    distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install '.[test]')")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=40) as cluster:
        _kill_the_worker_of_the_never_ending_case(
            suite, tmp_path, lambda s: wrpkit.regress(s, dask=cluster.scheduler_address, timeout=5))


def _ray():
    try:
        import ray  # noqa: PLC0415
    except ImportError:
        pytest.skip("ray does not install in this environment (pip install ray failed or was not run)")
    return ray


@pytest.mark.slow  # a Ray cluster, a worker killed and replaced, a 5 s timeout
def test_a_killed_ray_worker_loses_no_case(suite, tmp_path):
    """A Ray worker process killed while its batch of cases runs (tasks have no retries): the batch is sent
    again case by case, as on Dask."""
    ray = _ray()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _kill_the_worker_of_the_never_ending_case(suite, tmp_path,
                                                  lambda s: wrpkit.regress(s, ray="auto", timeout=5))
    finally:
        ray.shutdown()


def test_a_remote_case_reaches_its_child_whole_in_one_memory_file(suite):
    """A remote case's bytes (capture, module files, inputs, golden) survive the trip to the replay child."""
    from wrpkit.run.regress.case import case_job, payload_from_file, payload_to_file, with_payload  # noqa: PLC0415
    from wrpkit.run.regress.suite import discover  # noqa: PLC0415

    cases = {c.name: c for c in discover(suite, keyword=None, overrides={})}
    job = with_payload(case_job(cases["mine/vec_stock"], "python", False))
    assert job["payload"]["modules"], "a stock capture has a module folder"
    many = dict(job, payload=dict(job["payload"], modules={**job["payload"]["modules"],
                                                         **{f"extra{i}.o": bytes([i]) * (i * 7 + 1)
                                                            for i in range(40)}}))
    for original in (job, many, with_payload(case_job(cases["mine/axpy"], "python", False))):
        sent, fd = payload_to_file(original)
        try:
            assert sent["payload"] is None
            back = payload_from_file(json.loads(json.dumps(sent)), fd)  # the job crosses the socket as JSON
        finally:
            os.close(fd)
        assert back["payload"] == original["payload"]
        assert {k: v for k, v in back.items() if k != "payload"} == \
            {k: v for k, v in original.items() if k != "payload"}


def test_remote_batches_cover_every_case_once_in_order_and_grow_with_small_cases():
    from wrpkit.run.regress.fanout import FIRST_BATCH, REMOTE_BATCH, TASK_SECONDS, RemoteBatches  # noqa: PLC0415

    for n_jobs, slots in ((1, 2), (7, 2), (50, 2), (13, 3), (1000, 2), (5, 1)):
        b = RemoteBatches(n_jobs, slots)
        batches = []
        while b:  # as _run_batched sends them while no task ends (past the window: one at a time)
            batches.append(b.take(min(len(batches), 2 * slots - 1)))
        assert [i for x in batches for i in x] == list(range(n_jobs))
        assert all(1 <= len(x) <= FIRST_BATCH for x in batches)  # no case's time known yet
        first = [len(x) for x in batches[:slots]]
        assert len(first) == min(n_jobs, slots) and max(first) - min(first) <= 1  # every slot starts, alike

    class Ended:  # what RemoteBatches reads of a CaseResult
        def __init__(self, seconds):
            self.seconds = seconds

    small = RemoteBatches(1000, 2)
    first = small.take(0)
    small.ended_cases([Ended(0.005)] * len(first))
    assert len(small.take(3)) == min(REMOTE_BATCH, round(TASK_SECONDS / 0.005))  # half a second of cases
    slow = RemoteBatches(100, 2)
    slow.ended_cases([Ended(2 * TASK_SECONDS)])
    assert len(slow.take(0)) == 1  # a case longer than a task's aim goes alone
    # Cases sent back go first, in order; those that must go alone go one a batch.
    b = RemoteBatches(10, 2)
    taken = b.take(0)
    b.put_back(taken[2:])
    b.put_back([0, 1], alone=True)
    assert b.take(1) == [0] and b.take(1) == [1]
    assert b.take(1)[:1] == [taken[2]]


def test_a_remote_task_that_runs_out_of_time_has_the_rest_sent_again(suite, serial, tmp_path):
    """The remote routes' loop on real cases, the tasks run by local threads: a task given no time runs one
    case and hands back the rest, which go in later tasks; every case ends once, with a serial run's verdict."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait  # noqa: PLC0415

    from wrpkit.run.regress import fanout as regress_fanout  # noqa: PLC0415
    from wrpkit.run.regress.case import case_job, close_replay_workers, run_cases  # noqa: PLC0415
    from wrpkit.run.regress.suite import discover  # noqa: PLC0415

    s = _case_copies(suite, tmp_path / "s", {**{f"a{i}": "mine/axpy" for i in range(5)}, "b": "broken/changed"})
    jobs = [case_job(c, "python", False) for c in discover(s)]
    results, sizes, running = {}, [], set()
    pool = ThreadPoolExecutor(max_workers=2)

    def submit(batch, seconds):
        assert seconds > 0
        sizes.append(len(batch))
        fut = pool.submit(run_cases, batch, None, 0.0)  # no time at all: one case a task
        running.add(fut)
        return fut

    def next_finished():
        fut = next(iter(wait(running, return_when=FIRST_COMPLETED).done))
        running.discard(fut)
        return fut, fut.result(), None

    try:
        regress_fanout._run_batched(jobs, 1, lambda i, r: results.setdefault(i, []).append(r), submit,
                                    next_finished)
    finally:
        pool.shutdown()
        close_replay_workers()
    assert sorted(results) == list(range(len(jobs))) and all(len(v) == 1 for v in results.values())
    assert max(sizes) > 1 and len(sizes) == len(jobs)  # batches went out; each ran one case, its rest went again
    want = {c.name: c.verdict for c in wrpkit.regress(s).cases}
    assert {jobs[i]["name"]: r[0].verdict for i, r in results.items()} == want
    assert want == {**{f"a{i}": "pass" for i in range(5)}, "b": "fail"}


def test_ray_gives_the_serial_verdicts(suite, serial):
    ray = _ray()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rep = wrpkit.regress(suite, ray="auto")
    finally:
        ray.shutdown()
    _same(rep, serial)
    assert rep.ran_on == "ray auto (2 CPUs)"
    assert os.getpid() not in {int(c.worker.split(":")[1].split("/")[0]) for c in rep.cases if c.worker}


def _junit_verdicts(xml_text: str) -> dict:
    root = ET.fromstring(xml_text)
    out = {}
    for tc in root.iter("testcase"):
        kinds = [child.tag for child in tc if child.tag in ("failure", "error", "skipped")]
        out[tc.get("name")] = kinds[0] if kinds else "passed"
    return out


def test_cli_json_junit_and_html_say_the_same(suite, serial, tmp_path):
    out = tmp_path / "reports" / "new"  # missing parents are created
    r = CliRunner().invoke(main, ["regress", str(suite), "--json", "--junit", str(out / "results.xml"),
                                  "--html", str(out / "report.html")])
    assert r.exit_code == 1, r.output
    rep = json.loads(r.stdout)
    assert rep["exit_code"] == 1 and rep["counts"] == serial.to_json()["counts"]
    js = {c["name"]: c["verdict"] for c in rep["cases"]}
    assert js == {c.name: c.verdict for c in serial.cases}
    xml_text = (out / "results.xml").read_text()
    junit = _junit_verdicts(xml_text)
    as_junit = {"pass": "passed", "fail": "failure", "xpass": "failure", "error": "error", "skip": "skipped",
                "xfail": "skipped"}
    assert junit == {n: as_junit[v] for n, v in js.items()}
    root = ET.fromstring(xml_text)
    suite_el = root.find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite_el.find("properties")}
    # the default, --engine auto: whichever it chose, the JUnit properties and the JSON say the same
    assert props["warp_version"] == wp.config.version and props["engine"] == rep["engine"] and "device" in props
    assert rep["engine"] in ("python", "native") and rep["engine_reason"].startswith("--engine auto: ")
    assert int(suite_el.get("failures")) == 1 and int(suite_el.get("errors")) == sum(v == "error" for v in js.values())
    for tc in root.iter("testcase"):
        secs = next(c["seconds"] for c in rep["cases"] if c["name"] == tc.get("name"))
        assert float(tc.get("time")) == pytest.approx(secs, abs=1e-3)
        msg = next((c.get("message") for c in tc if c.tag in ("failure", "error")), None)
        if msg is not None:
            assert msg == next(c["message"] for c in rep["cases"] if c["name"] == tc.get("name"))
    page = (out / "report.html").read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert all(name in page for name in js)


def test_cli_table_fits_80_columns(suite):
    r = CliRunner().invoke(main, ["regress", str(suite), "-k", "mine/"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert all(len(line) <= 80 for line in r.stdout.splitlines()), r.stdout
    assert "4 passed" in r.stdout and "mine/vec_stock" in r.stdout


def test_update_writes_goldens_that_then_pass(suite, tmp_path):
    s = tmp_path / "s"
    _copy_case(suite / "mine" / "axpy.wrp", s / "same.wrp")
    shutil.copyfile(suite / "mine" / "axpy_inputs.npz", s / "same_inputs.npz")
    shutil.copyfile(suite / "mine" / "axpy_expected.npz", s / "same_expected.npz")
    _copy_case(suite / "broken" / "changed.wrp", s / "deep" / "changed.wrp")
    for ext in ("inputs", "expected"):
        shutil.copyfile(suite / "broken" / f"changed_{ext}.npz", s / "deep" / f"changed_{ext}.npz")
    _copy_case(suite / "mine" / "axpy.wrp", s / "new.wrp")  # no golden yet
    before = (s / "same_expected.npz").read_bytes()
    first = wrpkit.regress(s)
    assert {c.name: c.verdict for c in first.cases} == {"deep/changed": "fail", "new": "error", "same": "pass"}
    assert "no golden new_expected.npz" in first.cases[1].message
    r = CliRunner().invoke(main, ["regress", str(s), "--update", "--json"])
    assert r.exit_code == 0, r.output
    upd = {c["name"]: c["updated"] for c in json.loads(r.stdout)["cases"]}
    assert upd["same"] == "unchanged" and (s / "same_expected.npz").read_bytes() == before
    assert upd["deep/changed"].startswith("wrote changed_expected.npz: out changed (1 element")
    assert upd["new"] == "wrote new_expected.npz: new golden"
    with np.load(s / "new_expected.npz") as z:
        np.testing.assert_array_equal(z["out"], wrpkit.load(s / "new.wrp").run()["out"])
    assert not [p for p in s.rglob("*") if ".tmp" in p.name or p.name.startswith(".")]  # no temp files
    again = wrpkit.regress(s)
    assert again.ok and {c.verdict for c in again.cases} == {"pass"}


@wp.kernel
def _k_halve(y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] * 0.5


def test_update_of_an_output_holding_nan_says_so_and_is_stable(tmp_path):
    """A replay whose output holds a NaN (copied from the captured input): --update writes the golden and
    says the case needs --equal-nan; a second --update leaves it unchanged (it used to rewrite it and call
    it changed every time); the case fails without --equal-nan and passes with it."""
    s = tmp_path / "s"
    s.mkdir()
    x = wp.array(np.array([1.0, np.nan, 3.0], np.float32), device="cpu")
    y = wp.zeros(3, dtype=float, device="cpu")
    with wrpkit.capture(device="cpu") as rec:
        wp.copy(y, x)
        wp.launch(_k_halve, dim=3, inputs=[y], device="cpu")
    rec.save(s / "nan.wrp", inputs={"x": x}, outputs={"y": y})

    def update() -> str:
        r = CliRunner().invoke(main, ["regress", str(s), "--update", "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["cases"][0]["updated"]

    first = update()
    assert first.startswith("wrote nan_expected.npz: new golden") and "y holds NaN" in first
    assert "--equal-nan" in first, first
    written = (s / "nan_expected.npz").read_bytes()
    assert update() == "unchanged" and (s / "nan_expected.npz").read_bytes() == written
    assert CliRunner().invoke(main, ["regress", str(s)]).exit_code == 1
    assert CliRunner().invoke(main, ["regress", str(s), "--equal-nan"]).exit_code == 0


def test_an_untyped_golden_is_compared_as_bytes_and_says_so(suite, tmp_path):
    # A stock capture types nothing, so a golden written by --update holds raw bytes, and rtol cannot
    # apply to them: a change far inside the tolerance fails, and the verdict says why and what to do.
    # The user's own float golden for the same capture types it, and the same change passes.
    s = _case_copies(suite / "mine", tmp_path / "s", {"typed": "vec_stock", "raw": "vec_stock"})
    (s / "raw_expected.npz").unlink()
    r = CliRunner().invoke(main, ["regress", str(s), "--update", "--json"])
    assert r.exit_code == 0, r.output
    upd = {c["name"]: c for c in json.loads(r.stdout)["cases"]}
    assert upd["raw"]["updated"].startswith("wrote raw_expected.npz: new golden (")
    assert "as raw bytes: the capture records no dtype" in upd["raw"]["updated"]
    assert set(upd["raw"]["raw_bytes"]) == {"p", "q"} and upd["typed"]["raw_bytes"] == []
    with np.load(s / "typed_expected.npz") as z:
        typed = {k: z[k] for k in z}
    with np.load(s / "raw_expected.npz") as z:
        raw = {k: z[k] for k in z}
    assert raw["q"].dtype == np.uint8 and raw["q"].tobytes() == typed["q"].tobytes()
    nudged = typed["q"].copy()
    nudged.reshape(-1)[0] = np.nextafter(nudged.reshape(-1)[0], np.float32(np.inf))  # 1 ulp: inside rtol 1e-5
    np.savez(s / "typed_expected.npz", p=typed["p"], q=nudged)
    np.savez(s / "raw_expected.npz", p=raw["p"], q=nudged.view(np.uint8).reshape(-1))
    rep = wrpkit.regress(s)
    by = {c.name: c for c in rep.cases}
    assert by["typed"].verdict == "pass", by["typed"].message
    assert by["raw"].verdict == "fail" and "q:" in by["raw"].message
    assert by["raw"].hint.startswith("q compared as raw bytes") and "wrp annotate" in by["raw"].hint


def _case_copies(suite: Path, dst: Path, cases: dict) -> Path:
    """A suite at ``dst`` of ``{new name: case of the main suite}``, copied as a user copies cases."""
    for stem, src in cases.items():
        _copy_case(suite / f"{src}.wrp", dst / f"{stem}.wrp")
        for ext in ("inputs", "expected"):
            if (suite / f"{src}_{ext}.npz").is_file():
                shutil.copyfile(suite / f"{src}_{ext}.npz", dst / f"{stem}_{ext}.npz")
    return dst


def _regress_in_background(s: Path) -> tuple:
    """``(thread, result)``: ``wrpkit.regress(s, jobs=2)`` running in a thread; its report lands in ``result["r"]``."""
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", wrpkit.regress(s, jobs=2, timeout=120)))
    t.start()
    return t, result


def test_a_dying_worker_fails_only_its_case(suite, tmp_path):
    """A replay process killed from outside (as the OOM killer does) fails its case; the others pass."""
    s = _case_copies(suite, tmp_path / "s", {"a0": "mine/axpy", "a1": "mine/axpy", "a2": "mine/axpy",
                                             "b_forever": "broken/forever"})
    t, result = _regress_in_background(s)
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and t.is_alive():
        for child, stage in _serve_children():
            if stage() == "replaying":
                time.sleep(1.0)  # the never-ending case keeps replaying; a quick one is done by now
                if stage() == "replaying":
                    os.kill(child, signal.SIGKILL)
                    killed = child
                    break
        time.sleep(0.2)
    t.join(180)
    assert killed is not None and not t.is_alive()
    rep = result["r"]
    v = {c.name: c.verdict for c in rep.cases}
    assert v == {"a0": "pass", "a1": "pass", "a2": "pass", "b_forever": "error"}
    dead = rep.cases[-1]
    assert dead.error_class == "WrpWorkerDied" and "SIGKILL" in dead.message and "the run went on" in dead.message
    assert not list(_serve_children())  # every replay child of the run has ended


def _wrpkit_processes():
    """``(pid, parent pid, argv, /proc entry)`` of every replay child and zygote this test process started
    (its children and theirs: other sessions on the machine may run their own)."""
    from proc_helpers import processes  # noqa: PLC0415

    found = processes(lambda argv: b"wrpkit.run.contain.child" in argv or b"--zygote" in argv)
    ours = {pid for pid, ppid, _, _ in found if ppid == os.getpid()}
    return [x for x in found if x[1] == os.getpid() or x[1] in ours]


def _serve_children():
    """The replay children of a ``wrp regress`` run: started (``--serve``) or forked from its zygote."""
    for pid, _ppid, argv, p in _wrpkit_processes():
        if b"--die-with-parent" in argv and (b"--serve" in argv or b"--zygote" in argv):
            yield pid, _stage_reader(p)


@needs_zygote
def test_a_killed_zygote_fails_the_cases_its_forks_ran_and_the_run_goes_on(suite, tmp_path):
    """The zygote killed mid-run: its forks die with it (their cases fail as killed), and later cases
    get replay children started the ordinary way."""
    s = _case_copies(suite, tmp_path / "s", {"a_forever": "broken/forever", "b_forever": "broken/forever",
                                             "c0": "mine/axpy", "c1": "mine/axpy", "c2": "mine/axpy"})
    t, result = _regress_in_background(s)
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and t.is_alive():
        replaying = [stage for _, stage in _serve_children() if stage() == "replaying"]
        if len(replaying) == 2:
            time.sleep(1.0)  # both never-ending cases are in their forks' replays
            zygote = [pid for pid, ppid, argv, _ in _wrpkit_processes()
                      if b"--zygote" in argv and ppid == os.getpid()]
            assert len(zygote) == 1
            os.kill(zygote[0], signal.SIGKILL)
            killed = zygote[0]
        time.sleep(0.2)
    t.join(180)
    assert killed is not None and not t.is_alive()
    rep = result["r"]
    v = {c.name: (c.verdict, c.error_class) for c in rep.cases}
    assert v == {"a_forever": ("error", "WrpWorkerDied"), "b_forever": ("error", "WrpWorkerDied"),
                 "c0": ("pass", None), "c1": ("pass", None), "c2": ("pass", None)}, v
    assert all("SIGKILL" in c.message for c in rep.cases[:2])
    assert not _wrpkit_processes()


@needs_zygote
def test_three_workers_fork_from_one_zygote_and_a_crash_stays_in_its_case(suite, tmp_path):
    """`-j 3`: one process imports Warp (the zygote); every replay child is its fork; a crash fails only its case."""
    s = _case_copies(suite, tmp_path / "s", {"axpy0": "mine/axpy", "axpy1": "mine/axpy",
                                             "vec_stock0": "mine/vec_stock", "if_in_while0": "mine/if_in_while",
                                             "crash0": "broken/crash"})
    seen = []  # (pid, ppid, is the zygote, is a started child) of every process seen while cases finished

    def look(done, total, result):
        for pid, ppid, argv, _p in _wrpkit_processes():
            seen.append((pid, ppid, b"--zygote" in argv, b"--serve" in argv and b"--die-with-parent"
                         in argv))

    rep = wrpkit.regress(s, jobs=3, progress=look)
    v = {c.name: (c.verdict, c.error_class) for c in rep.cases}
    assert v == {"axpy0": ("pass", None), "axpy1": ("pass", None), "crash0": ("error", "WrpCrashError"),
                 "if_in_while0": ("pass", None), "vec_stock0": ("pass", None)}, v
    crash = next(c for c in rep.cases if c.name == "crash0")
    assert "replay crashed with SIG" in crash.message and "k_scatter" in crash.message
    zygotes = {pid for pid, ppid, is_zygote, _ in seen if is_zygote and ppid == os.getpid()}
    assert len(zygotes) == 1, seen
    forks = {pid for pid, ppid, is_zygote, _ in seen if is_zygote and ppid in zygotes}
    assert len(forks) >= 2, seen  # the threads' children (one more after the crash), all forks of it
    assert not [x for x in seen if x[3]], seen  # no replay child started with its own `import warp`
    assert len({c.worker for c in rep.cases}) >= 2
    assert not _wrpkit_processes()  # the zygote and its forks ended with the run


def _stage_reader(proc: Path):
    """A function reading what a replay child says it is doing: its shared stage page, found among
    its open files (the memory file the parent named ``wrpkit-stage``), as the parent reads it."""

    def stage() -> str:
        try:
            for fd in (proc / "fd").iterdir():
                if "wrpkit-stage" in os.readlink(fd):
                    return fd.read_bytes().rstrip(b"\0").decode("ascii", "replace")
        except OSError:
            pass
        return ""

    return stage


# ---------------------------------------------------------------------------
# Bad input: a clear error and the documented exit code
# ---------------------------------------------------------------------------


def _cli(*args):
    return CliRunner().invoke(main, ["regress", *map(str, args)])


def test_nan_in_both_fails_unless_the_suite_says_equal_nan(suite, tmp_path):
    s = tmp_path / "s"
    _copy_case(suite / "nan" / "planted.wrp", s / "planted.wrp")
    shutil.copyfile(suite / "nan" / "planted_expected.npz", s / "planted_expected.npz")
    (case,) = wrpkit.regress(s).cases
    assert case.verdict == "fail" and "2 NaN in both" in case.message
    assert case.bindings["y"]["nan_both"] == 2 and case.bindings["y"]["inf_mismatch"] == 0  # Inf == the same Inf
    assert wrpkit.regress(s, equal_nan=True).ok


def test_python_310_without_tomllib_gets_a_clear_error(suite, tmp_path, monkeypatch):
    s = tmp_path / "s"
    _copy_case(suite / "mine" / "axpy.wrp", s / "axpy.wrp")
    (s / "wrp-suite.toml").write_text("[defaults]\nrtol = 0\n")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python 3.10: `import tomllib` fails
    with pytest.raises(wrpkit.WrpError, match="needs Python 3.11 or newer"):
        wrpkit.regress(s)


def test_missing_suite_is_a_usage_error(tmp_path):
    r = _cli(tmp_path / "nope", "--json")
    assert r.exit_code == 2
    err = json.loads(r.stdout)
    assert err["exit_code"] == 2 and "does not exist" in err["error"]
    r = _cli(tmp_path)  # a folder without captures
    assert r.exit_code == 2 and "holds no captures" in r.stderr


def test_malformed_suite_toml_names_the_line(suite, tmp_path):
    s = tmp_path / "s"
    _copy_case(suite / "mine" / "axpy.wrp", s / "axpy.wrp")
    (s / "wrp-suite.toml").write_text('[defaults]\nrtol = 1e-5\natol = = 2\n')
    r = _cli(s)
    assert r.exit_code == 2 and "line 3" in r.stderr and "wrp-suite.toml" in r.stderr
    (s / "wrp-suite.toml").write_text('[defaults]\nrtol = 1e-5\n\n[cases."axpy"]\ntolerance = 3\n')
    r = _cli(s)
    assert r.exit_code == 2 and "line 5" in r.stderr and "unknown key 'tolerance'" in r.stderr
    (s / "wrp-suite.toml").write_text('[cases."axpy"]\ntimeout = "soon"\n')
    r = _cli(s)
    assert r.exit_code == 2 and "line 2" in r.stderr and "must be a number" in r.stderr


def test_unreachable_scheduler_is_a_usage_error(suite):
    pytest.importorskip("distributed", reason="distributed is not installed")
    t0 = time.monotonic()
    r = _cli(suite, "-k", "mine/axpy", "--dask", "tcp://127.0.0.1:9", "--json")
    assert r.exit_code == 2, r.output
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in json.loads(r.stdout)["error"]
    assert time.monotonic() - t0 < 60


def test_unreachable_ray_cluster_is_a_usage_error_at_once(suite):
    """Nothing listens at the address: a clear exit 2 within the connect timeout (ray.init alone retried for
    minutes, logging a warning every few seconds)."""
    _ray()
    for address in ("127.0.0.1:9", "ray://127.0.0.1:9"):
        t0 = time.monotonic()
        r = _cli(suite, "-k", "mine/axpy", "--ray", address, "--json")
        assert r.exit_code == 2, r.output
        err = json.loads(r.stdout)["error"]
        assert f"cannot reach the Ray cluster at {address}: nothing answers at 127.0.0.1:9" in err, err
        assert time.monotonic() - t0 < 30


def test_a_golden_that_lacks_a_binding_or_names_another_is_an_error(suite, tmp_path):
    s = tmp_path / "s"
    for name in ("lacks", "extra"):
        _copy_case(suite / "mine" / "axpy.wrp", s / f"{name}.wrp")
    np.savez(s / "lacks_expected.npz", a=np.zeros(N, np.float32))
    np.savez(s / "extra_expected.npz", out=np.zeros(N, np.float32), velocity=np.zeros(3))
    r = _cli(s, "--json")
    assert r.exit_code == 1
    cases = {c["name"]: c for c in json.loads(r.stdout)["cases"]}
    assert cases["lacks"]["verdict"] == "error"
    assert "golden lacks_expected.npz lacks binding 'out' (an output of the capture)" in cases["lacks"]["message"]
    assert cases["extra"]["verdict"] == "error" and "'velocity'" in cases["extra"]["message"]


def test_options_are_checked_before_any_case_runs(suite, tmp_path):
    r = _cli(suite, "--device", "tpu:0")
    assert r.exit_code == 2
    r = _cli(suite, "-k", "no_such_case")
    assert r.exit_code == 2 and "no case" in r.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        r = _cli(suite, "--junit", ro / "x.xml")
        assert r.exit_code == 1 and "cannot write" in r.stderr
    finally:
        ro.chmod(0o700)


@pytest.mark.slow  # drives Chromium
def test_html_page_opens_offline_in_a_browser(suite, serial, tmp_path):
    """The page in Chromium: no request but the page itself, no console error, every case in the table."""
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415
    except ImportError:
        pytest.skip("playwright is not installed (pip install '.[test]')")
    chromium = os.environ.get("WRP_CHROMIUM", "/usr/bin/chromium")
    if not os.path.exists(chromium):
        pytest.skip(f"no Chromium at {chromium} (apt-get install chromium, or set WRP_CHROMIUM)")
    page_path = tmp_path / "report.html"
    page_path.write_text(serial.to_html())
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            pg = b.new_page()
            requests, errors = [], []
            pg.on("request", lambda r: requests.append(r.url))
            pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            pg.goto(page_path.as_uri())
            rows = pg.eval_on_selector_all("tbody tr", "rows => rows.map(r => [r.cells[0].textContent, "
                                                       "r.cells[1].textContent])")
        finally:
            b.close()
    assert requests == [page_path.as_uri()] and errors == []
    assert rows == [[c.name, c.verdict] for c in serial.cases]


def test_native_regress_writes_no_temporary_file(suite, tmp_path, monkeypatch):
    """The native engine hands wrp-replay the case's bytes through memory files, as `wrp replay` does."""
    import tempfile  # noqa: PLC0415

    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        native_paths().require_replayer()
    except wrpkit.WrpError as e:
        pytest.skip(str(e))
    empty = tmp_path / "tmp"
    empty.mkdir()
    monkeypatch.setenv("TMPDIR", str(empty))
    monkeypatch.setattr(tempfile, "tempdir", str(empty))
    rep = wrpkit.regress(suite, engine="native")
    by = {c.name: c for c in rep.cases}
    assert {by[n].verdict for n in ("mine/axpy", "mine/bundle", "mine/if_in_while", "mine/vec_stock")} == {"pass"}
    # wrp-replay places the crash itself: the message names the kernel, as the python engine's does.
    assert "replay crashed with SIG" in by["broken/crash"].message and "k_scatter" in by["broken/crash"].message
    assert list(empty.iterdir()) == []


@wp.func
def pull(a: wp.vec2, b: wp.vec2) -> wp.vec2:
    return (b - a) * 0.5


@wp.kernel
def k_spring(p: wp.array(dtype=wp.vec2), f: wp.array(dtype=wp.vec2), n: wp.array(dtype=wp.int32),
             go: wp.array(dtype=wp.int32)):
    i = wp.tid()
    if i + 1 < p.shape[0]:
        f[i] = pull(p[i], p[i + 1])
    p[i] = p[i] + f[i] * 0.1
    if i == 0:
        left = n[0] - 1
        n[0] = left
        go[0] = wp.where(left > 0, 1, 0)


def _save_spring(path: Path, named: bool) -> np.ndarray:
    """A chain of vec2 springs stepped in a WHILE; saved with stock capture_save, naming ``p`` or nothing.

    Returns the positions an eager run of the same loop ends with.
    """
    start = np.random.default_rng(5).standard_normal((N, 2)).astype(np.float32)
    arrays = [wp.array(start, dtype=wp.vec2, device="cpu"), wp.zeros(N, dtype=wp.vec2, device="cpu"),
              wp.array([4], dtype=wp.int32, device="cpu"), wp.array([1], dtype=wp.int32, device="cpu")]
    wp.load_module(device="cpu")
    wp.capture_begin(device="cpu", apic=True)
    try:
        wp.capture_while(arrays[3], lambda: wp.launch(k_spring, dim=N, inputs=arrays, device="cpu"))
    finally:
        graph = wp.capture_end(device="cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    wp.capture_save(graph, str(path), outputs={"p": arrays[0]} if named else None)
    eager = [wp.array(start, dtype=wp.vec2, device="cpu"), wp.zeros(N, dtype=wp.vec2, device="cpu"),
             wp.array([4], dtype=wp.int32, device="cpu"), wp.array([1], dtype=wp.int32, device="cpu")]
    while eager[3].numpy()[0]:
        wp.launch(k_spring, dim=N, inputs=eager, device="cpu")
    return eager[0].numpy()


def test_a_case_that_compares_nothing_says_so(tmp_path):
    # A stock capture saved without outputs= names no binding: its golden is empty and its pass
    # checks nothing, which the verdict, the hint and the summary line must say; the same program
    # saved naming its positions is compared (and a planted change to that golden fails).
    s = tmp_path / "s"
    _save_spring(s / "unnamed.wrp", named=False)
    eager = _save_spring(s / "named.wrp", named=True)
    r = CliRunner().invoke(main, ["regress", str(s), "--update", "--json"])
    assert r.exit_code == 0, r.output
    upd = {c["name"]: c["updated"] for c in json.loads(r.stdout)["cases"]}
    assert "case will compare nothing" in upd["unnamed"] and "compare nothing" not in upd["named"]
    with np.load(s / "named_expected.npz") as z:
        np.testing.assert_array_equal(z["p"].view(np.float32).reshape(N, 2), eager)
    r = CliRunner().invoke(main, ["regress", str(s)], terminal_width=80)
    assert r.exit_code == 0, r.output
    assert "2 passed (1 compared nothing)" in r.output and max(map(len, r.output.splitlines())) <= 80
    rep = {c.name: c for c in wrpkit.regress(s).cases}
    assert rep["unnamed"].message == "replayed; nothing compared: the capture names no bindings"
    assert "outputs=" in rep["unnamed"].hint and rep["unnamed"].bindings == {}
    assert rep["named"].message == "" and list(rep["named"].bindings) == ["p"]
    with np.load(s / "named_expected.npz") as z:
        changed = z["p"].copy()
    changed[3] ^= 1
    np.savez(s / "named_expected.npz", p=changed)
    assert {c.name: c.verdict for c in wrpkit.regress(s).cases} == {"named": "fail", "unnamed": "pass"}


# ---------------------------------------------------------------------------
# --engine auto (the default): the faster engine for the run
# ---------------------------------------------------------------------------


def test_auto_engine_choice_by_cases_per_worker():
    from wrpkit.run.replay.engines import NATIVE_MAX_CASES_PER_WORKER as most
    from wrpkit.run.regress.runner import choose_regress_engine

    class Case:
        def __init__(self, skip=None):
            self.settings = type("S", (), {"skip": skip})()

    few, many = [Case()] * most, [Case()] * (most + 1)
    assert choose_regress_engine(few, replayer_found=True).name == "native"
    c = choose_regress_engine(many, replayer_found=True)
    assert c.name == "python" and c.auto and f"{most + 1} cases" in c.reason and "warm python replay child" in c.reason
    assert choose_regress_engine(many, jobs=2, replayer_found=True).name == "native"  # 6 a worker
    assert choose_regress_engine(few + [Case("no GPU")], replayer_found=True).name == "native"  # skipped: not counted
    for where in ("--dask", "--ray"):
        c = choose_regress_engine(None, distributed=where, replayer_found=True)
        assert c.name == "python" and where in c.reason
    c = choose_regress_engine(few, replayer_found=False)
    assert c.name == "python" and "not built or installed" in c.reason


def _small_suite(d: Path) -> Path:
    _axpy(d / "one")
    return d


def test_cli_default_engine_is_said_and_python_forces(tmp_path, monkeypatch):
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    s = _small_suite(tmp_path / "s")
    r = CliRunner().invoke(main, ["regress", str(s), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    want = "native" if native_paths().replayer is not None else "python"
    assert rep["engine"] == want and {c["engine"] for c in rep["cases"]} == {want}
    assert rep["engine_reason"].startswith("--engine auto: ")
    r = CliRunner().invoke(main, ["regress", str(s)], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and f"engine: {want} (--engine auto: " in r.stdout, r.output
    r = CliRunner().invoke(main, ["regress", str(s), "--engine", "python", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["engine"] == "python" and rep["engine_reason"] == "--engine python"
    assert {c["engine"] for c in rep["cases"]} == {"python"}
    # wrp-replay nowhere to be found: the default replays with the python engine and says so
    import wrpkit.run.replay.engines as engines  # noqa: PLC0415

    monkeypatch.setattr(engines, "_find_replayer", lambda: None)
    r = CliRunner().invoke(main, ["regress", str(s), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["engine"] == "python" and "wrp-replay is not built or installed" in rep["engine_reason"]
