"""Resource limits are errors, not crashes (issue 40, deliverable 5).

Each fault is injected on real captures made at test time: an address-space limit
(``prlimit --as``), few file descriptors (``prlimit --nofile``), no process left to start
(a pids cgroup), a memory cgroup smaller than the capture.  Memory the machine, its cgroup or
the address-space limit does not have is exit 3 with the numbers; other resources are exit 1
with the reason in words; nothing is "interrupted", no traceback, no process left behind.
The budget's cgroup reading is also tried on a fake ``/proc`` (cgroup v2 layout) so that a
machine with v1 (or none) checks both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from proc_helpers import ROOT, processes, run, wrp_exe

BIN = Path(sys.executable).parent
MiB = 1 << 20


def _wrp_replay() -> str:
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        return str(native_paths().require_replayer())
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"wrp-replay is not built: {e}")


def _prlimit() -> str:
    exe = shutil.which("prlimit")
    if exe is None:
        pytest.skip("prlimit (util-linux) is not installed")
    return exe


def _assert_clean(proc: subprocess.CompletedProcess, tag: str) -> None:
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, f"{tag}: {text[-3000:]}"
    assert "interrupted" not in text, f"{tag}: {text[-3000:]}"
    assert "internal error" not in text, f"{tag}: {text[-3000:]}"
    assert proc.returncode not in (70, 130, -11, 139), f"{tag}: rc {proc.returncode}: {text[-3000:]}"


def _no_orphans(marker: str) -> None:
    left = processes(lambda argv: any(marker.encode() in a for a in argv))
    assert not left, f"processes left behind: {left}"


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("limits_small")
    proc = run(sys.executable, ROOT / "samples" / "saxpy.py", d, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    suite = d / "suite"
    suite.mkdir()
    for f in d.iterdir():
        if f.name != "suite":
            shutil.move(str(f), suite / f.name)
    return suite


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A 256 MiB capture (bench/bench_scale.py's make_capture)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_scale import make_capture  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    path = tmp_path_factory.mktemp("limits_big") / "big.wrp"
    make_capture(path, 256)
    return path


# ---------------------------------------------------------------------------
# The budget's figures: cgroup v2 on a fake /proc, RLIMIT_AS, the same in Python and C++
# ---------------------------------------------------------------------------

def _fake_proc(tmp: Path, version: int, limits: dict, usage: dict, inactive: int = 0) -> Path:
    """A fake /proc whose process sits in cgroup /a/b of a cgroup file system mounted at tmp/cg."""
    proc, cg = tmp / "proc", tmp / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 67108864 kB\nMemAvailable: 33554432 kB\n")
    (proc / "self" / "status").write_text("VmSize: 1000 kB\n")
    if version == 2:
        (proc / "self" / "cgroup").write_text("0::/a/b\n")
        (proc / "self" / "mountinfo").write_text(f"41 31 0:38 / {cg} rw,relatime - cgroup2 cgroup2 rw\n")
        names = ("memory.max", "memory.current", "inactive_file")
    else:
        (proc / "self" / "cgroup").write_text("4:memory:/a/b\n1:cpu:/\n")
        (proc / "self" / "mountinfo").write_text(f"35 31 0:32 / {cg} rw,relatime - cgroup cgroup rw,memory\n")
        names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    for rel in ("", "a", "a/b"):
        d = cg / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / names[0]).write_text(f"{limits.get(rel, 'max' if version == 2 else 9223372036854771712)}\n")
        (d / names[1]).write_text(f"{usage.get(rel, 0)}\n")
        (d / "memory.stat").write_text(f"anon 1\n{names[2]} {inactive}\n")
    return proc


@pytest.mark.parametrize("version", [2, 1])
def test_the_budget_reads_the_processes_cgroup_and_its_ancestors(tmp_path, version):
    from wrpkit.limits import host_memory  # noqa: PLC0415

    # The cgroup's own limit: 100 MiB, 30 MiB used of which 10 MiB is inactive page cache.
    proc = _fake_proc(tmp_path, version, {"a/b": 100 * MiB}, {"a/b": 30 * MiB}, inactive=10 * MiB)
    hm = host_memory(str(proc))
    assert hm.meminfo == 32 << 30
    assert hm.cgroup is not None and hm.cgroup.limit == 100 * MiB and hm.cgroup.usage == 20 * MiB
    assert hm.available == 80 * MiB
    assert "memory cgroup" in hm.bound and "104857600 bytes" in hm.bound
    # An ancestor's tighter room wins.
    proc = _fake_proc(tmp_path / "2", version, {"a/b": 100 * MiB, "a": 64 * MiB}, {"a/b": 0, "a": 60 * MiB})
    hm = host_memory(str(proc))
    assert hm.available == 4 * MiB and hm.cgroup.folder.endswith("/a")
    # No limit anywhere: MemAvailable.
    proc = _fake_proc(tmp_path / "3", version, {}, {})
    hm = host_memory(str(proc))
    assert hm.cgroup is None and hm.available == 32 << 30 and hm.bound == ""


def test_the_budget_reads_the_address_space_limit():
    prlimit = _prlimit()
    code = ("from wrpkit.limits import host_memory; h = host_memory(); "
            "print(h.available, h.address_space.limit, h.address_space.used); print(h.bound)")
    proc = run(prlimit, f"--as={900 * MiB}", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    avail, limit, used = map(int, proc.stdout.split("\n")[0].split())
    assert limit == 900 * MiB and 0 < used < limit and avail == limit - used
    assert "address-space limit (ulimit -v" in proc.stdout


# ---------------------------------------------------------------------------
# Memory: RLIMIT_AS and a memory cgroup refuse with exit 3 and the numbers
# ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("as_mib", [250, 400, 700])
def test_an_address_space_limit_is_exit_3_with_the_numbers(big, as_mib):
    prlimit = _prlimit()
    limit = f"--as={as_mib * MiB}"
    routes = {"python": [wrp_exe(), "replay", big, "--engine", "python"],
              "native": [wrp_exe(), "replay", big, "--engine", "native"],
              "wrp-replay": [_wrp_replay(), big]}
    for name, argv in routes.items():
        proc = run(prlimit, limit, *argv)
        tag = f"{name} under {limit}"
        _assert_clean(proc, tag)
        assert proc.returncode == 3, f"{tag}: {proc.returncode} {proc.stderr[-2000:]}"
        assert "out of memory" in proc.stderr or "more than the" in proc.stderr, f"{tag}: {proc.stderr}"
        assert "bytes" in proc.stderr, f"{tag}: the numbers: {proc.stderr}"
    _no_orphans(str(big))


def test_in_process_load_under_an_address_space_limit_is_out_of_memory(big):
    prlimit = _prlimit()
    code = ("import sys, wrpkit\n"
            "try:\n    wrpkit.load(sys.argv[1], isolate=sys.argv[2] == '1')\n"
            "except wrpkit.errors.WrpOutOfMemoryError as e:\n    print('OOM', e.exit_code, e.requested, e)\n")
    for isolate in ("0", "1"):
        proc = run(prlimit, f"--as={300 * MiB}", sys.executable, "-c", code, big, isolate)
        assert proc.stdout.startswith("OOM 3 "), (isolate, proc.stdout, proc.stderr[-2000:])
        assert "address-space limit" in proc.stdout


def _cgroup_root(controller: str) -> Path:
    """A writable cgroup hierarchy for ``controller`` (v1 folder or the v2 root), or skip."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    v1 = Path("/sys/fs/cgroup") / controller
    if v1.is_dir() and os.access(v1, os.W_OK):
        return v1
    v2 = Path("/sys/fs/cgroup")
    ctl = v2 / "cgroup.controllers"
    if ctl.is_file() and controller in ctl.read_text().split() and os.access(v2, os.W_OK):
        return v2
    pytest.skip(f"no writable {controller} cgroup here (neither /sys/fs/cgroup/{controller} nor cgroup v2 "
                f"with the {controller} controller)")


class _Cgroup:
    def __init__(self, controller: str, settings: dict):
        root = _cgroup_root(controller)
        self.path = root / f"wrpktest-{uuid.uuid4().hex[:8]}"
        try:
            self.path.mkdir()
        except OSError as e:
            pytest.skip(f"cannot make a cgroup under {root}: {e}")
        for name, value in settings.items():
            for candidate in ([name] if isinstance(name, str) else name):
                f = self.path / candidate
                if f.exists():
                    f.write_text(str(value))
                    break
            else:
                self.close()
                pytest.skip(f"cgroup {self.path} has none of {name}")

    def run(self, argv, timeout=300) -> subprocess.CompletedProcess:
        wrapper = ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh", *map(str, argv)]
        return run(*wrapper, timeout=timeout)

    def members(self) -> list:
        return [p for p in (self.path / "cgroup.procs").read_text().split() if p]

    def close(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


@pytest.mark.slow
def test_a_memory_cgroup_smaller_than_the_capture_is_refused_before_allocating(big):
    cg = _Cgroup("memory", {("memory.max", "memory.limit_in_bytes"): 100 * MiB})
    try:
        routes = {"python": [wrp_exe(), "replay", big, "--engine", "python"],
                  "native": [wrp_exe(), "replay", big, "--engine", "native"],
                  "wrp-replay": [_wrp_replay(), big]}
        for name, argv in routes.items():
            proc = cg.run(argv)
            _assert_clean(proc, name)
            assert proc.returncode == 3, f"{name}: killed by the kernel or another code: {proc.returncode} " \
                                         f"{proc.stderr[-2000:]}"
            assert "memory cgroup" in proc.stderr and "104857600 bytes" in proc.stderr, f"{name}: {proc.stderr}"
            assert "nothing was allocated" in proc.stderr, f"{name}: {proc.stderr}"
        assert cg.members() == []
        # --max-memory still overrides the budget (and the kernel then has its say: no claim here).
    finally:
        cg.close()


# ---------------------------------------------------------------------------
# Other resources: exit 1, the reason in words
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_few_file_descriptors_are_exit_1_in_words(small):
    prlimit = _prlimit()
    cap = small / "saxpy.wrp"
    check = ["--inputs", small / "saxpy_inputs.npz", "--check", small / "saxpy_expected.npz"]
    failures = 0
    for n in (5, 6, 7, 8, 9, 10, 13, 15, 17):
        for name, argv in {"python": [wrp_exe(), "replay", cap, "--engine", "python", *check],
                           "native": [wrp_exe(), "replay", cap, "--engine", "native", *check],
                           "regress": [wrp_exe(), "regress", small],
                           "wrp-replay": [_wrp_replay(), cap]}.items():
            proc = run(prlimit, f"--nofile={n}", *argv)
            tag = f"{name} --nofile={n}"
            _assert_clean(proc, tag)
            assert proc.returncode in (0, 1), f"{tag}: {proc.returncode} {proc.stderr[-2000:]}"
            if proc.returncode:
                failures += 1
                # regress prints it in its report's table, wrapped: the words are read without the table
                words = " ".join(re.sub(r"[│┃|]", " ", proc.stdout + proc.stderr).split()).lower()
                assert "too many open files" in words, f"{tag}: {proc.stdout} {proc.stderr}"
    assert failures, "no limit was tight enough to fail"
    _no_orphans(str(small))


@pytest.mark.slow
def test_no_process_left_to_start_is_an_error_not_interrupted(small):
    cg = _Cgroup("pids", {"pids.max": 1})
    try:
        cap = small / "saxpy.wrp"
        for name, argv in {"python": [wrp_exe(), "replay", cap, "--engine", "python"],
                           "native": [wrp_exe(), "replay", cap, "--engine", "native"],
                           "regress": [wrp_exe(), "regress", small]}.items():
            proc = cg.run(argv)
            _assert_clean(proc, name)
            assert proc.returncode == 1, f"{name}: {proc.returncode} {proc.stderr[-2000:]}"
            text = " ".join((proc.stdout + proc.stderr).replace("│", " ").split())  # a table wraps lines
            assert "can be started" in text and "pids.max" in text, f"{name}: {text[-2000:]}"
        assert cg.members() == []
        # One process more: numpy's OpenBLAS may not start its threads (it used to raise SIGINT on itself).
        (cg.path / "pids.max").write_text("2")
        proc = cg.run([wrp_exe(), "replay", cap, "--engine", "python"])
        _assert_clean(proc, "pids.max 2")
        assert cg.members() == []
    finally:
        cg.close()


@pytest.mark.slow
def test_rlimit_nproc_as_a_user_is_an_error_not_interrupted(small):
    # RLIMIT_NPROC binds only a user without CAP_SYS_RESOURCE: run as nobody, where that user can run
    # this interpreter and read the capture.
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv (util-linux) to run as another user")
    prlimit = _prlimit()
    as_nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    import tempfile  # noqa: PLC0415

    shared = Path(tempfile.mkdtemp(prefix="wrpk-nproc-"))
    try:
        _nproc_as_nobody(shared, small, as_nobody, prlimit)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _nproc_as_nobody(shared: Path, small: Path, as_nobody: list, prlimit: str) -> None:
    shared.chmod(0o755)
    small = Path(shutil.copytree(small, shared / "suite"))
    for p in [small, *small.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    probe = run(*as_nobody, wrp_exe(), "inspect", small / "saxpy.wrp")
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot run wrp or read the capture here (an interpreter in a private home?): "
                    f"{probe.stderr.strip()[-300:]}")
    for name, argv in {"python": [wrp_exe(), "replay", small / "saxpy.wrp", "--engine", "python"],
                       "native": [wrp_exe(), "replay", small / "saxpy.wrp", "--engine", "native"]}.items():
        proc = run(*as_nobody, prlimit, "--nproc=1", *argv)
        _assert_clean(proc, name)
        assert proc.returncode == 1, f"{name}: {proc.returncode} {proc.stderr[-2000:]}"
        assert "no new process can be started" in proc.stderr, f"{name}: {proc.stderr}"
    _no_orphans(str(small))
