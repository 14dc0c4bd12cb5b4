"""Faults survived, nothing lost (issue 40): every reliability promise of docs/reliability.md, injected on
real captures made at test time and checked as a user meets it, through the installed ``wrp``.

* Outputs that are not regular files (a character device such as ``/dev/full`` or ``/dev/null``, a FIFO,
  ``/dev/stdout``) are written in place, never replaced by a regular file; a write that fails there
  (``/dev/full``: no space; a FIFO whose reader left: broken pipe) is an I/O error (exit 1) naming the path.
  A ``.wrp`` (which comes with its ``<stem>_modules/``) cannot go there: exit 2.
* Every I/O failure is an I/O error: exit 1, the path, the operating system's reason in words, no traceback
  (a full file system, an input or a modules folder this user may not read).
* Nothing is left behind by a command that fails: no partial output, no temporary file, no folder it made.

The devices are reached through symbolic links in the test's own folder (``out.wrpk -> /dev/full``), so a
regression replaces the link, never ``/dev/full`` itself.  The full file system is a small tmpfs (root
only); the unreadable inputs are read as ``nobody`` (root only, with ``setpriv`` or ``runuser``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

import replay_cases as rc
from wrpkit.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from proc_helpers import ROOT, TESTS_DIR

KERNELS = TESTS_DIR / "programs.py"  # defines the kernels of every capture of the captures fixture


def wrp_exe() -> list:
    """The installed ``wrp`` (beside this interpreter, as ``.venv/bin/wrp``), else ``python -m wrpkit.cli``."""
    here = Path(sys.executable).with_name("wrp")
    if here.is_file() and os.access(here, os.X_OK):
        return [str(here)]
    found = shutil.which("wrp")
    return [found] if found else [sys.executable, "-m", "wrpkit.cli"]


def wrp(*args, env=None, prefix=(), timeout=300, stdout=None) -> subprocess.CompletedProcess:
    """``wrp ARGS`` as a user runs it: ``(returncode, stdout, stderr)`` as text."""
    full_env = dict(os.environ, WRP_NO_PROGRESS="1")
    full_env.update(env or {})
    cmd = [*prefix, *wrp_exe(), *map(str, args)]
    if stdout is None:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    return subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout, env=full_env)


def assert_io_error(p: subprocess.CompletedProcess, code: int, *words: str) -> None:
    """Exit ``code``, every one of ``words`` in the message, and no traceback or internal error."""
    text = (p.stdout or "") + p.stderr
    assert p.returncode == code, f"exit {p.returncode}, want {code}:\n{text}"
    assert "Traceback" not in text and "internal error" not in text and "Exception ignored" not in text, text
    for w in words:
        assert w in text, f"{w!r} not in:\n{text}"


def leftovers(folder: Path) -> list:
    """Temporary files a writer could leave in ``folder`` (atomic writes, dump copies, export staging)."""
    return sorted(p.name for p in folder.iterdir()
                  if p.name.endswith((".tmp", ".wrpkit-tmp")) or p.name.startswith((".wrpkit", "wrpkit-")))


@pytest.fixture
def work(tmp_path, captures) -> dict:
    """A copy of a small real capture and a private TMPDIR (checked empty: staging files leave nothing)."""
    cap = rc.copy_capture(captures["views"], tmp_path / "cap")
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    yield {"cap": cap, "dir": tmp_path, "env": {"TMPDIR": str(tmpdir)}}
    assert sorted(os.listdir(tmpdir)) == [], "a command left files in TMPDIR"


def device_link(folder: Path, name: str, device: str) -> Path:
    link = folder / name
    link.symlink_to(device)
    return link


def assert_device_kept(link: Path, device: str) -> None:
    """The link still points at the device, which is still a character device (nothing replaced either)."""
    assert link.is_symlink() and os.readlink(link) == device, f"{link} was replaced"
    assert stat.S_ISCHR(os.stat(link).st_mode) and stat.S_ISCHR(os.stat(device).st_mode), f"{device} was replaced"


# ---------------------------------------------------------------------------
# Promise 1: outputs that are not regular files are written in place, never replaced
# ---------------------------------------------------------------------------

def _writers(cap: Path, d: Path) -> dict:
    """Every command that writes a file, as ``{name: (output file name, argv with {out})}``."""
    suite = d / "suite"
    if not suite.exists():
        rc.copy_capture(cap, suite)
    return {
        "convert-wrpk": ("o.wrpk", ("convert", cap, "{out}")),
        "convert-json": ("o.json", ("convert", cap, "{out}")),
        "upgrade": ("o.wrpk", ("upgrade", cap, "{out}", "--copy-current")),
        "slice": ("o.wrpk", ("slice", cap, "--ops", "0:1", "-o", "{out}")),
        "annotate": ("o.wrpk", ("annotate", cap, "--kernels", KERNELS, "-o", "{out}")),
        "replay-python": ("o.npz", ("replay", cap, "--output", "{out}")),
        "replay-native": ("o.npz", ("replay", cap, "--engine", "native", "--output", "{out}")),
        "regress-junit": ("o.xml", ("regress", suite, "--update", "--junit", "{out}")),
        "regress-html": ("o.html", ("regress", suite, "--update", "--html", "{out}")),
        "trace-save": ("o.trace", ("trace", cap, "--save", "{out}")),
        "profile": ("o.json", ("profile", cap, "--repeat", "1", "-o", "{out}")),
        "graph": ("o.html", ("graph", cap, "-o", "{out}")),
    }


def _have_replayer() -> bool:
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        native_paths().require_replayer()
        return True
    except Exception:  # noqa: BLE001
        return False


def _argv(args, out) -> list:
    return [str(a).format(out=out) if isinstance(a, str) else a for a in args]


def test_dev_full_is_an_io_error_and_stays_a_device(work):
    """The quick case: `wrp convert x.wrp full.wrpk` (full.wrpk -> /dev/full) exits 1 naming the path and
    "No space left on device"; /dev/full stays a character device and nothing is left beside the link."""
    d = work["dir"] / "out"
    d.mkdir()
    link = device_link(d, "full.wrpk", "/dev/full")
    p = wrp("convert", work["cap"], link, env=work["env"])
    assert_io_error(p, EXIT_FAILED, f"cannot write {link}", "No space left on device")
    assert_device_kept(link, "/dev/full")
    assert leftovers(d) == [] and sorted(os.listdir(d)) == ["full.wrpk"]


@pytest.mark.slow  # every writing command, twice (about a minute on 2 cores)
def test_every_writer_writes_devices_in_place(work):
    """Each command that writes a file, pointed at /dev/full, exits 1 with the path and the reason; pointed
    at /dev/null, succeeds; both devices stay devices, and no temporary file is left anywhere."""
    d = work["dir"] / "out"
    d.mkdir()
    writers = _writers(work["cap"], work["dir"])
    if not _have_replayer():
        del writers["replay-native"]  # wrp-replay is not built here
    failures = []
    for name, (fname, args) in writers.items():
        for device, want in (("/dev/full", EXIT_FAILED), ("/dev/null", EXIT_OK)):
            link = device_link(d, f"{name}-{Path(device).name}-{fname}", device)
            p = wrp(*_argv(args, link), env=work["env"])
            try:
                if want == EXIT_OK:
                    assert_io_error(p, EXIT_OK)
                else:
                    assert_io_error(p, EXIT_FAILED, f"cannot write {link}", "No space left on device")
                assert_device_kept(link, device)
            except AssertionError as e:
                failures.append(f"{name} -> {device}: {e}")
    assert not failures, "\n".join(failures)
    assert leftovers(d) == [], leftovers(d)


def test_a_wrp_cannot_go_to_a_device(work):
    """A .wrp comes with its <stem>_modules/ beside it: to a device it is refused before any work (exit 2),
    and no modules folder appears beside the link.  Signing (--key) a device is refused the same way."""
    d = work["dir"] / "out"
    d.mkdir()
    link = device_link(d, "null.wrp", "/dev/null")
    for args in (("convert", work["cap"], link), ("slice", work["cap"], "--ops", "0:1", "-o", link),
                 ("upgrade", work["cap"], link, "--copy-current")):
        p = wrp(*args, env=work["env"])
        assert_io_error(p, EXIT_USAGE, f"cannot write a .wrp to {link}", "null_modules/", ".wrpk")
    assert_device_kept(link, "/dev/null")
    signed = device_link(d, "null.wrpk", "/dev/null")
    p = wrp("convert", work["cap"], signed, "--key", d / "unused.pem", env=work["env"])
    assert_io_error(p, EXIT_USAGE, f"cannot sign {signed}")
    assert sorted(os.listdir(d)) == ["null.wrp", "null.wrpk"]


def test_a_fifo_gets_every_byte_and_stays_a_fifo(work):
    """`wrp convert x.wrp pipe.wrpk` into a FIFO gives its reader exactly the bytes of the regular output."""
    d = work["dir"]
    regular = d / "regular.wrpk"
    assert_io_error(wrp("convert", work["cap"], regular, env=work["env"]), EXIT_OK)
    fifo = d / "pipe.wrpk"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    p = wrp("convert", work["cap"], fifo, env=work["env"])
    reader.join(60)
    if reader.is_alive():  # the writer never opened it: let the reader see an end, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert_io_error(p, EXIT_OK)
    assert got and got[0] == regular.read_bytes()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_whose_reader_left_is_an_io_error(work):
    """The reader of a FIFO closes it after 10 bytes: the writer meets a broken pipe, which is an I/O error
    (exit 1, the path, "Broken pipe"), not a quiet exit 141 (that is for stdout) and never exit 0."""
    fifo = work["dir"] / "pipe.wrpk"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there before the writer opens
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(r, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)  # smaller than the output
        cmd = [*wrp_exe(), "convert", str(work["cap"]), str(fifo)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, **work["env"]))
        assert select.select([r], [], [], 120)[0], "nothing was written into the FIFO"
        os.read(r, 10)
    finally:
        os.close(r)  # the reader leaves while the writer still has bytes to write
    out, err = proc.communicate(timeout=120)
    assert_io_error(subprocess.CompletedProcess(cmd, proc.returncode, out, err), EXIT_FAILED,
                    f"cannot write {fifo}", "Broken pipe")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_stdout_is_written_through_stdout(work):
    """`wrp trace x.wrp --save /dev/stdout` writes the trace into the command's own stdout (a file here),
    after what it printed before; /dev/stdout is never replaced."""
    from wrpkit.special_outputs import special_output  # noqa: PLC0415

    assert special_output("/dev/stdout") == "standard output"  # else a regression could replace it: stop here
    out = work["dir"] / "stdout.txt"
    with open(out, "w") as f:
        p = wrp("trace", work["cap"], "--save", "/dev/stdout", env=work["env"], stdout=f)
    assert p.returncode == EXIT_OK, p.stderr
    text = out.read_text()
    assert '"format": "wrpkit-trace/1"' in text and "trace saved to /dev/stdout" in text
    assert os.path.islink("/dev/stdout")


# ---------------------------------------------------------------------------
# Promise 2: every I/O failure is an I/O error (exit 1, the path, the reason in words)
# ---------------------------------------------------------------------------

@pytest.fixture
def full_fs(tmp_path):
    """A 64 KiB tmpfs, filled up: every write there fails with ENOSPC (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "full"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow  # six commands, three of them replay (about 20 s on 2 cores)
def test_a_full_file_system_is_an_io_error_and_leaves_nothing(work, full_fs):
    """On a full file system, each output (a new folder in it, so the folder must go too) fails with exit 1,
    the path and "No space left on device"; the file system then holds only what was there before."""
    cap = work["cap"]
    suite = work["dir"] / "suite"
    rc.copy_capture(cap, suite)
    cases = [
        (("trace", cap, "--dump", full_fs / "steps"), full_fs / "steps"),
        (("export-runtime", full_fs / "rt"), full_fs / "rt"),
        (("convert", cap, full_fs / "new" / "deeper" / "x.wrpk"), full_fs / "new" / "deeper" / "x.wrpk"),
        (("convert", cap, full_fs / "x.wrp"), full_fs / "x.wrp"),
        (("replay", cap, "--output", full_fs / "o" / "out.npz"), full_fs / "o" / "out.npz"),
        (("regress", suite, "--update", "--junit", full_fs / "r" / "r.xml"), full_fs / "r" / "r.xml"),
    ]
    failures = []
    for args, path in cases:
        p = wrp(*args, env=work["env"])
        try:
            assert_io_error(p, EXIT_FAILED, f"cannot write {path}", "No space left on device")
            left = sorted(str(q.relative_to(full_fs)) for q in full_fs.rglob("*"))
            assert left == ["filler"], f"left behind: {left}"
        except AssertionError as e:
            failures.append(f"{' '.join(map(str, args))}: {e}")
    assert not failures, "\n".join(failures)


def _as_nobody() -> list:
    """The command prefix that runs as ``nobody`` (root only), or skip."""
    if os.geteuid() != 0:
        pytest.skip("reading as another user needs root")
    import pwd  # noqa: PLC0415

    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody here")
    if shutil.which("setpriv"):
        group = "nogroup" if _group_exists("nogroup") else "nobody"
        prefix = ["setpriv", "--reuid=nobody", f"--regid={group}", "--clear-groups"]
    elif shutil.which("runuser"):
        prefix = ["runuser", "-u", "nobody", "--"]
    else:
        pytest.skip("neither setpriv nor runuser is installed")
    # The interpreter may live where nobody may not go (a pyenv Python under a root-only /root).
    if subprocess.run([*prefix, *wrp_exe(), "--version"], capture_output=True).returncode != 0:
        pytest.skip(f"nobody cannot run {wrp_exe()[0]} here (its Python lies in a folder only root may enter)")
    return prefix


def _group_exists(name: str) -> bool:
    import grp  # noqa: PLC0415

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture
def shared(captures):
    """A folder every user can reach, with a copy of a capture; removed afterwards."""
    prefix = _as_nobody()
    d = Path(tempfile.mkdtemp(prefix="wrpkit-faults-", dir="/tmp"))
    try:
        d.chmod(0o777)
        cap = rc.copy_capture(captures["views"], d / "cap")
        for p in (d / "cap", cap, *cap.with_name("views_modules").rglob("*"), cap.with_name("views_modules")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        yield {"dir": d, "cap": cap, "prefix": prefix, "env": {"HOME": str(d), "TMPDIR": str(d)}}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_unreadable_inputs_are_io_errors(shared):
    """Read as nobody: a capture in a folder nobody may search, a capture of mode 000, an --inputs file
    nobody may read and a modules folder nobody may read are each exit 1, the path and "Permission denied":
    not click's "Invalid value" (a usage error), not "does not exist", not a broken module (exit 3)."""
    d, cap, prefix, env = shared["dir"], shared["cap"], shared["prefix"], shared["env"]
    private = d / "private"
    rc.copy_capture(cap, private)
    private.chmod(0o700)  # root's: nobody may not look inside
    hidden = private / cap.name
    zero = d / "zero.wrp"
    shutil.copyfile(cap, zero)
    zero.chmod(0)
    secret = private / "in.npz"
    secret.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty .npz, never reached
    cases = [
        (("inspect", hidden), hidden),
        (("validate", hidden), hidden),
        (("check", hidden), hidden),
        (("convert", hidden, d / "o.wrpk"), hidden),
        (("upgrade", hidden, d / "u.wrp", "--copy-current"), hidden),
        (("inspect", zero), zero),
        (("convert", zero, d / "o.wrpk"), zero),
        (("replay", cap, "--inputs", secret), secret),
        (("regress", private), private),
    ]
    failures = []
    for args, path in cases:
        p = wrp(*args, env=env, prefix=prefix)
        try:
            assert_io_error(p, EXIT_FAILED, "cannot read", str(path), "Permission denied")
            assert "Invalid value" not in p.stderr and "does not exist" not in p.stderr
        except AssertionError as e:
            failures.append(f"{' '.join(map(str, args))}: {e}")
    mdir = cap.with_name("views_modules")
    mdir.chmod(0)
    try:
        for args in (("replay", cap), ("convert", cap, d / "m.wrpk"), ("validate", cap)):
            p = wrp(*args, env=env, prefix=prefix)
            try:
                assert_io_error(p, EXIT_FAILED, "cannot read module file", str(mdir), "Permission denied")
                assert "missing" not in p.stderr
            except AssertionError as e:
                failures.append(f"{' '.join(map(str, args))} (modules folder 000): {e}")
    finally:
        mdir.chmod(0o755)
    assert not failures, "\n".join(failures)
    assert not (d / "o.wrpk").exists() and not (d / "m.wrpk").exists() and not (d / "u.wrp").exists()


def test_an_unwritable_place_is_an_io_error_and_makes_no_folder(shared):
    """As nobody, an output under a folder nobody may write is exit 1 naming it, and no folder is made."""
    d, cap, prefix, env = shared["dir"], shared["cap"], shared["prefix"], shared["env"]
    ro = d / "ro"
    ro.mkdir()
    ro.chmod(0o755)  # root's: nobody may not create anything in it
    for args, words in ((("convert", cap, ro / "a" / "b" / "x.wrpk"), ("cannot create folder", str(ro / "a"))),
                        (("convert", cap, ro / "x.wrpk"), ("cannot write", str(ro / "x.wrpk"))),
                        (("export-runtime", ro / "rt"), ("cannot", str(ro / "rt")))):
        p = wrp(*args, env=env, prefix=prefix)
        assert_io_error(p, EXIT_FAILED, *words, "Permission denied")
    assert os.listdir(ro) == []


def test_every_promise_names_the_tests_that_keep_it():
    """docs/reliability.md names each test of this file, and names no test this file lacks."""
    import re  # noqa: PLC0415

    text = (ROOT / "docs" / "reliability.md").read_text()
    named = set(re.findall(r"`(test_[a-z0-9_]+)`", text))
    here = {name for name in globals() if name.startswith("test_")}
    here.discard("test_every_promise_names_the_tests_that_keep_it")
    assert named == here, f"only in docs/reliability.md: {sorted(named - here)}; not there: {sorted(here - named)}"


# ---------------------------------------------------------------------------
# A file that changes under the reader (issue 40, deliverable 4): a capture truncated while it is read is
# "FILE changed while being read", exit 3, never a death by SIGBUS (native/src/mapped_file.h,
# wrpkit/run/load/file_guard.py).
# ---------------------------------------------------------------------------

EXIT_CHANGED = 3  # docs/exit-codes.md: a file that cannot be used
CHANGED = "changed while being read"


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory) -> dict:
    """A real capture of a few MiB (one float32 array, bench/bench_scale.py's maker) and its ``.wrpk``."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_scale import make_capture  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "bench"))
    d = tmp_path_factory.mktemp("changing")
    make_capture(d / "big.wrp", 24)
    p = wrp("convert", d / "big.wrp", d / "big.wrpk")
    assert p.returncode == 0, p.stderr
    return {"wrp": d / "big.wrp", "wrpk": d / "big.wrpk", "dir": d}


def _library_path():
    from wrpkit.run.replay.engines import _find_library  # noqa: PLC0415

    return _find_library()


def assert_changed_or_done(p: subprocess.CompletedProcess, path: Path, what: str) -> None:
    """Exit 0 (the read finished before the file was cut), the file's own refusal (3: it is truncated), or
    3 with "PATH changed while being read"; never a signal, a traceback or an internal error."""
    text = (p.stdout or "") + (p.stderr or "")
    assert p.returncode >= 0, f"{what}: killed by signal {-p.returncode}:\n{text}"
    assert p.returncode in (0, EXIT_CHANGED), f"{what}: exit {p.returncode}:\n{text}"
    assert "Traceback" not in text and "internal error" not in text and "Bus error" not in text, f"{what}:\n{text}"
    if p.returncode == EXIT_CHANGED and CHANGED in text:  # cut while it was read
        assert f"{path.name} {CHANGED}" in text, f"{what}: the file is not named:\n{text}"
    elif p.returncode == EXIT_CHANGED:  # cut before it was opened (its own check), or between two reads
        # A file cut before it is opened is refused by its own structural check: Python says "truncated",
        # wrp-replay names the section that "does not fit in the N-byte file".
        assert ("truncated" in text or "does not fit in the" in text
                or f"{path.name} changed after it was validated" in text), f"{what}:\n{text}"


_READ_AFTER_CUT = r"""
import hashlib, mmap, os, sys
from wrpkit import file_reads
from wrpkit.run.load import file_guard
path, how = sys.argv[1], sys.argv[2]
file_guard.install()  # as the wrp command line does
m = file_reads.map_file(path, "capture", follow_symlinks=True)
if how == "unguarded":  # another mapping of the same file, not wrpkit's: its fault is still a SIGBUS
    fd = os.open(path, os.O_RDONLY)
    other = mmap.mmap(fd, os.fstat(fd).st_size, access=mmap.ACCESS_READ)
    os.truncate(path, 4096)
    hashlib.sha256(other).hexdigest()
else:
    os.truncate(path, 4096)
    hashlib.sha256(m.buffer).hexdigest()
print("the read finished")
"""


def test_a_mapped_file_truncated_before_it_is_read_is_exit_3_naming_it(big_bundle, tmp_path):
    """Deterministic: a process maps a capture through wrpkit, the file is truncated, then read: one line
    naming it and exit 3 (the library's SIGBUS handler); a mapping that is not wrpkit's still dies of
    SIGBUS (the handler passes what is not its own to the previous disposition)."""
    if _library_path() is None:
        pytest.skip("libwrp_replay is not built: Python reads have no fault handler")
    for name, how in (("cut.wrpk", "guarded"), ("cut.wrp", "guarded"), ("other.wrpk", "unguarded")):
        f = tmp_path / name
        shutil.copy(big_bundle["wrpk" if name.endswith("k") else "wrp"], f)
        p = subprocess.run([sys.executable, "-c", _READ_AFTER_CUT, str(f), how], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
        if how == "unguarded":
            assert p.returncode == -7, (p.returncode, p.stderr)  # SIGBUS, as without wrpkit
            continue
        assert p.returncode == EXIT_CHANGED, (p.returncode, p.stdout, p.stderr)
        assert p.stderr.strip() == (f"error: capture {f} changed while being read (it was truncated or rewritten "
                                    "by another program); run again once it is complete"), p.stderr
        assert "the read finished" not in p.stdout


_C_API_AFTER_CUT = r"""
import ctypes, mmap, os, sys
lib = ctypes.CDLL(sys.argv[1])
lib.wrp_guard_mapping.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
lib.wrp_unguard_mapping.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
path = sys.argv[2]
fd = os.open(path, os.O_RDWR)
size = os.fstat(fd).st_size
mm = mmap.mmap(fd, size)  # writable, so that ctypes can take its address
at = ctypes.addressof(ctypes.c_char.from_buffer(mm))
assert lib.wrp_guard_mapping(at, size, b"host: error: " + path.encode() + b" changed while being read") == 1
if sys.argv[3] == "unguard":
    lib.wrp_unguard_mapping(at, size)
os.ftruncate(fd, 4096)
ctypes.string_at(at + size - 8, 8)
print("the read finished")
"""


def test_the_c_api_guards_a_hosts_mapping(big_bundle, tmp_path):
    """``wrp_guard_mapping``: a host's mapping put under the library's handler ends with the host's line and
    exit 3; once ``wrp_unguard_mapping`` removed it, a fault there is the host's SIGBUS again."""
    lib = _library_path()
    if lib is None:
        pytest.skip("libwrp_replay is not built")
    for how, code in (("guard", EXIT_CHANGED), ("unguard", -7)):
        f = tmp_path / f"{how}.wrpk"
        shutil.copy(big_bundle["wrpk"], f)
        p = subprocess.run([sys.executable, "-c", _C_API_AFTER_CUT, str(lib), str(f), how], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == code, (how, p.returncode, p.stderr)
        if code == EXIT_CHANGED:
            assert p.stderr == f"host: error: {f} changed while being read\n"


def _race_commands(b: dict, out: Path) -> dict:
    cmds = {
        "validate": [*wrp_exe(), "validate", "{cap}"],
        "inspect": [*wrp_exe(), "inspect", "--ops", "{cap}"],
        "convert": [*wrp_exe(), "convert", "{cap}", str(out / "o.wrpk")],
        "replay": [*wrp_exe(), "replay", "{cap}"],
    }
    if _have_replayer():
        from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

        cmds["replay-native"] = [*wrp_exe(), "replay", "--engine", "native", "{cap}"]
        cmds["wrp-replay"] = [str(native_paths().require_replayer()), "{cap}"]
    return cmds


def _run_and_cut(cmd: list, src: Path, cap: Path, delay: float, env: dict) -> subprocess.CompletedProcess:
    """Copy ``src`` to ``cap``, start ``cmd`` on it and truncate it to a few pages after ``delay`` seconds."""
    import time  # noqa: PLC0415

    shutil.copy(src, cap)
    proc = subprocess.Popen([a.format(cap=cap) for a in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=cap.parent)
    time.sleep(delay)
    os.truncate(cap, 3 * 4096 + 100)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow  # six commands, each run and cut at several seeded moments (about a minute on 2 cores)
def test_a_capture_truncated_at_a_random_moment_never_kills_a_reader(big_bundle, tmp_path):
    """As a user meets it: ``wrp validate``/``inspect``/``convert``/``replay`` (both engines) and
    ``wrp-replay`` run on a capture that another program truncates at a random moment (seeded): exit 0
    (the read finished first) or 3 naming the file, never a signal, a traceback or an internal error, and
    ``convert`` leaves no output or temporary file behind when it fails."""
    import random  # noqa: PLC0415
    import time  # noqa: PLC0415

    rng = random.Random(40)
    env = dict(os.environ, WRP_NO_PROGRESS="1")
    out = tmp_path / "out"
    out.mkdir()
    seen = {}
    for kind in ("wrpk", "wrp"):
        src = big_bundle[kind]
        if kind == "wrp":
            shutil.copytree(big_bundle["dir"] / "big_modules", tmp_path / "cap_modules", dirs_exist_ok=True)
        cap = tmp_path / f"cap.{kind}"
        for name, cmd in _race_commands(big_bundle, out).items():
            shutil.copy(src, cap)
            t0 = time.monotonic()
            whole = subprocess.run([a.format(cap=cap) for a in cmd], capture_output=True, text=True, env=env,
                                   cwd=tmp_path, timeout=300)
            took = time.monotonic() - t0
            assert whole.returncode == 0, (name, whole.stderr)
            (out / "o.wrpk").unlink(missing_ok=True)
            for _ in range(4):
                p = _run_and_cut(cmd, src, cap, rng.uniform(0.0, took), env)
                assert_changed_or_done(p, cap, f"{name} {kind}")
                seen[p.returncode] = seen.get(p.returncode, 0) + 1
                if name == "convert":
                    assert leftovers(out) == [], leftovers(out)
                    if p.returncode:
                        assert not (out / "o.wrpk").exists()
                    (out / "o.wrpk").unlink(missing_ok=True)
    assert seen.get(EXIT_CHANGED), f"no run was cut while it read: {seen}"


def test_wrp_replay_reads_an_unreadable_file_or_module_as_an_io_error(captures):
    """wrp-replay (no Python: nobody can run it even where the interpreter is root's) gives an
    unreadable capture or module file exit 1 and "Permission denied", as every wrp command does."""
    replayer = Path(sys.executable).with_name("wrp-replay")
    if not replayer.exists():
        pytest.skip("wrp-replay is not installed")
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("reading as another user needs root and setpriv")
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup" if _group_exists("nogroup") else "--regid=nobody",
              "--clear-groups"]
    if subprocess.run([*prefix, str(replayer), "--version"], capture_output=True).returncode != 0:
        pytest.skip("nobody cannot run wrp-replay here")
    d = Path(tempfile.mkdtemp(prefix="wrpkit-faults-", dir="/tmp"))
    try:
        d.chmod(0o755)
        cap = rc.copy_capture(captures["views"], d / "cap")
        for p in (d / "cap", cap, cap.with_name("views_modules"), *cap.with_name("views_modules").iterdir()):
            p.chmod(0o755 if p.is_dir() else 0o644)
        cap.chmod(0)
        res = subprocess.run([*prefix, str(replayer), str(cap), "--list"], capture_output=True, text=True)
        assert res.returncode == EXIT_FAILED and "Permission denied" in res.stderr and str(cap) in res.stderr
        cap.chmod(0o644)
        module = next(cap.with_name("views_modules").iterdir())
        module.chmod(0)
        res = subprocess.run([*prefix, str(replayer), str(cap), "--list"], capture_output=True, text=True)
        assert res.returncode == EXIT_FAILED and "cannot read module file" in res.stderr, res.stderr
        assert "Permission denied" in res.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
