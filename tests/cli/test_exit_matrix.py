"""One exit code per failure class, in every command (issue 23, item 1).

Every ``wrp`` command (read live from the ``wrp`` group, so a command added
later fails here until it has a row in :data:`RECIPES`) and ``wrp-replay``
meets every failure class of the table: a missing path, a directory, an
unreadable file, a truncated file, another Warp version, an older format, a
bad option, a bad value, an unknown binding, an output that cannot be
written, an output whose folder is missing (created, exit 0) and a closed
pipe.  Each must give the code of :data:`wrpkit.errors.EXIT_CODES` for that
class and a message with no traceback.  Everything runs as a user runs it,
in a fresh process, on a capture stock Warp makes at test time
(``samples/saxpy.py``).

To add a command: add a :class:`Recipe` to :data:`RECIPES` (how to call it
with a good input and, where it writes, an output), and any per-class code
the command documents differently in ``codes``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import replay_cases as rc
from wrpkit.errors import (EXIT_CODES, EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_PIPE, EXIT_USAGE)
from proc_helpers import ROOT, LEGACY_FIXTURES

LEGACY = LEGACY_FIXTURES / "1.16.0"

#: Every failure class of the table, with the code it gets unless a recipe documents another.
CLASSES = {
    "ok": EXIT_OK,                    # the recipe itself works
    "missing": EXIT_USAGE,            # FILE does not exist
    "directory": EXIT_USAGE,          # FILE is a directory
    "unreadable": EXIT_FAILED,        # FILE exists but cannot be read (an I/O error)
    "truncated": EXIT_INVALID,        # FILE is cut short
    "garbage": EXIT_INVALID,          # FILE is not a capture at all
    "other_version": EXIT_INVALID,    # FILE was written by another Warp version
    "older_format": EXIT_INVALID,     # FILE is of an older format (Warp 1.16)
    "bad_option": EXIT_USAGE,         # an option the command does not have
    "bad_value": EXIT_USAGE,          # each of the recipe's bad values / ranges / devices
    "unknown_binding": EXIT_USAGE,    # --input NAME=... for a name the file does not have
    "unwritable_output": EXIT_FAILED,  # the output's folder takes no new files
    "missing_parent": EXIT_OK,        # the output's folder does not exist: it is created
    "closed_pipe": EXIT_PIPE,         # stdout is closed under it (`| head`)
}
#: Classes about FILE (skipped by commands that read no capture).
FILE_CLASSES = ("missing", "directory", "unreadable", "truncated", "garbage", "other_version", "older_format")


@dataclass
class Recipe:
    """How to call one command in the matrix.

    Attributes:
        args: Its arguments; ``{file}`` is the capture, ``{out}`` the output
            path (a fresh place for each run), ``{base}`` a good capture,
            ``{suite}`` its folder (with its inputs and golden), ``{dir}`` a
            fresh folder.
        out: The output's name (``{out}`` is a path ending in it); None when
            the command writes nothing.
        inputs: It takes ``--input NAME=X.npy``.
        bad_values: Argument lists that must each be refused as usage errors
            (bad value, range, output form, a device this machine lacks).
        takes_file: It reads a capture (FILE classes apply).
        codes: Per-class codes this command documents differently.
        skip: Classes the recipe cannot try, each with its reason in a comment.
    """

    args: tuple
    out: str | None = None
    inputs: bool = False
    bad_values: tuple = ()
    takes_file: bool = True
    codes: dict = field(default_factory=dict)
    skip: tuple = ()


NO_GPU = "cuda:99"  # a device no machine here has

#: One row per ``wrp`` command; test_every_command_has_a_recipe fails for a command without one.
#: Commands that read a file of another Warp version or an older format as it is (they never load it).
READS_ANY_VERSION = {"other_version": EXIT_OK, "older_format": EXIT_OK}

RECIPES = {
    "inspect": Recipe(("{file}", "--ops"), codes=READS_ANY_VERSION),
    "validate": Recipe(("{file}",), codes=READS_ANY_VERSION),
    # An older format is one `wrp upgrade` away from loading: check answers 1 (documented).
    "check": Recipe(("{file}",), bad_values=(("{file}", "--device", NO_GPU), ("{file}", "--device", "tpu")),
                    codes={"older_format": EXIT_FAILED}),
    "convert": Recipe(("{file}", "{out}"), out="x.wrpk", bad_values=(("{file}", "{dir}/x.bin"),),
                      codes=READS_ANY_VERSION),
    "replay": Recipe(("{file}", "--output", "{out}"), out="out.npz", inputs=True,
                     bad_values=(("{file}", "--repeat", "0"), ("{file}", "--device", NO_GPU),
                                 ("{file}", "--timeout", "-1"), ("{file}", "--rtol", "-1"))),
    "trace": Recipe(("{file}", "--save", "{out}"), out="t.trace", inputs=True,
                    bad_values=(("{file}", "--device", NO_GPU), ("{file}", "--timeout", "-1"),
                                ("{file}", "--engine", "gpu"))),
    # memcheck writes nothing; a clean capture is 0 (1 is "an out-of-bounds access found").
    "memcheck": Recipe(("{file}",), inputs=True,
                       bad_values=(("{file}", "--device", NO_GPU), ("{file}", "--timeout", "-1"),
                                   ("{file}", "--engine", "gpu"))),
    "graph": Recipe(("{file}", "-o", "{out}"), out="g.html", bad_values=(("{file}", "-o", "{dir}/g.png"),),
                    codes=READS_ANY_VERSION),
    # upgrade of an older format is what it is for (0); a current file is copied (--copy-current).
    "upgrade": Recipe(("{file}", "{out}", "--copy-current"), out="new.wrp", codes={"older_format": EXIT_OK},
                      bad_values=(("{file}", "{dir}/n.wrp", "--collision", "bogus"),)),
    "slice": Recipe(("{file}", "--ops", "0:1", "-o", "{out}"), out="s.wrp", inputs=True,
                    bad_values=(("{file}", "--ops", "0:99", "-o", "{dir}/s.wrp"),
                                ("{file}", "--ops", "a:b", "-o", "{dir}/s.wrp"),
                                ("{file}", "--ops", "0:1", "-o", "{dir}/s.bin"),
                                ("{file}", "--ops", "0:1", "-o", "{dir}/s.wrp", "--device", NO_GPU))),
    # 1 means "different" for diff: a file that cannot be read is 2, "could not compare".  A file
    # is compared with itself (identical: 0) whatever its version.
    "diff": Recipe(("{file}", "{file}"), codes={"unreadable": EXIT_USAGE, **READS_ANY_VERSION}),
    "export-runtime": Recipe(("{out}",), out="rt", takes_file=False),
    # The sample's capture is stock: annotate types it from the script that made it.  It rewrites
    # records only, as convert does, so another Warp version's file is typed too (0); the Warp 1.16
    # fixture's kernels were recorded from another script, which is a usage error (2: no kernel matches).
    "annotate": Recipe(("{file}", "--kernels", str(ROOT / "samples" / "saxpy.py"), "-o", "{out}"), out="typed.wrp",
                       codes={"other_version": EXIT_OK, "older_format": EXIT_USAGE},
                       bad_values=(("{file}", "--kernels", "{dir}/nosuch.py", "-o", "{dir}/t.wrp"),
                                   ("{file}", "--kernels", str(ROOT / "samples" / "saxpy.py"), "-o", "{dir}/t.bin"))),
    "profile": Recipe(("{file}", "--repeat", "1", "-o", "{out}"), out="p.json", inputs=True,
                      bad_values=(("{file}", "--device", NO_GPU), ("{file}", "--repeat", "0"),
                                  ("{file}", "--timeout", "-1"), ("{file}", "--engine", "gpu"),
                                  ("{file}", "--clock", "moon"))),
    # regress reads a folder (the sample's: its capture, inputs and golden), not a capture.
    # sign validates FILE as validate does, and signs a capture of any Warp version as it is.
    "sign": Recipe(("{file}", "--key", "{key}", "-o", "{out}"), out="x.sig", codes=READS_ANY_VERSION,
                   bad_values=(("{file}", "--key", "{dir}/nosuch.pem", "-o", "{dir}/x.sig"),
                               ("{file}", "--key", "{file}", "-o", "{dir}/x.sig"))),
    "regress": Recipe(("{suite}", "--junit", "{out}"), out="r.xml", takes_file=False,
                      bad_values=(("{dir}/nosuch",), ("{suite}", "-j", "0"), ("{suite}", "--timeout", "-1"))),
}


def wrp_commands() -> list:
    """The commands ``wrp`` has now, as ``wrp --help`` lists them."""
    import click  # noqa: PLC0415

    from wrpkit.cli import main  # noqa: PLC0415

    return main.list_commands(click.Context(main))


def run(cmd, timeout=600, close_stdout=False, env=None):
    """A command in a fresh process: ``(exit code, stdout, stderr)``; with ``close_stdout`` its stdout is a closed pipe."""
    env = dict(env or os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [str(c) for c in cmd]
    if not close_stdout:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return _as_shell(p.returncode), p.stdout, p.stderr
    r, w = os.pipe()
    os.close(r)  # no reader: the command's first write to stdout meets a closed pipe
    try:
        p = subprocess.run(cmd, stdout=w, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)
    finally:
        os.close(w)
    return _as_shell(p.returncode), "", p.stderr


def _as_shell(code: int) -> int:
    """An exit status as a shell reports it: a process a signal ended is 128 + the signal."""
    return 128 - code if code < 0 else code


def wrp_cmd(*args):
    return [sys.executable, "-m", "wrpkit.cli", *args]


def unreadable_file(tmp: Path) -> Path:
    """A ``.wrp`` path that exists but cannot be read.

    Mode 000 for a normal user; root reads any mode, so for root a link to a
    write-only sysfs attribute, which refuses reads to everyone.
    """
    path = tmp / "unreadable.wrp"
    if os.geteuid() != 0:
        path.write_bytes(b"WRP1")
        path.chmod(0)
        return path
    import glob  # noqa: PLC0415

    for name in sorted(glob.glob("/sys/devices/*/*/rescan") + glob.glob("/sys/bus/*/rescan")
                       + glob.glob("/sys/class/*/*") + glob.glob("/sys/bus/*/*/*")):
        f = Path(name)
        try:
            if not (f.is_file() and (f.stat().st_mode & 0o777) == 0o200):
                continue
            path.symlink_to(f)
            try:
                open(path, "rb").close()  # noqa: SIM115
            except PermissionError:
                return path  # only ever opened for reading: nothing is written to it
            path.unlink()
        except OSError:
            continue
    pytest.skip("no file here that root cannot read")


def unwritable_dir(tmp: Path) -> Path:
    """A folder that takes no new files: mode 0555, or for root (who ignores modes) sysfs."""
    if os.geteuid() == 0:
        return Path("/sys")
    d = tmp / "ro"
    d.mkdir()
    d.chmod(0o555)
    return d


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """A good capture and one input file per failure class (all made at test time, but the Warp 1.16 one)."""
    tmp = tmp_path_factory.mktemp("matrix")
    subprocess.run([sys.executable, str(ROOT / "samples" / "saxpy.py"), str(tmp / "good")], check=True,
                   capture_output=True)
    good = tmp / "good" / "saxpy.wrp"
    truncated = rc.copy_capture(good, tmp / "truncated")
    truncated.write_bytes(good.read_bytes()[:200])
    garbage = tmp / "garbage.wrp"
    garbage.write_bytes(b"this is not a capture\n" * 10)
    adir = tmp / "adir.wrp"
    adir.mkdir()
    older = rc.copy_capture(LEGACY / "saxpy.wrp", tmp / "older")
    other = rc.rewrite_capture(good, tmp / "other", lambda p: setattr(p, "warp_version", "1.18.2"))
    return {"ok": good, "missing": tmp / "missing.wrp", "directory": adir, "unreadable": unreadable_file(tmp),
            "truncated": truncated, "garbage": garbage, "other_version": other, "older_format": older,
            "unwritable": unwritable_dir(tmp), "npy": _npy(tmp), "tmp": tmp}


def _npy(tmp: Path) -> Path:
    p = tmp / "v.npy"
    np.save(p, np.zeros(4, dtype=np.float32))
    return p


_counter = [0]


def _fresh(tmp: Path) -> Path:
    _counter[0] += 1
    d = tmp / f"run{_counter[0]}"
    d.mkdir()
    return d


def _fill(args, file, out, base, d):
    return [str(a).format(file=file, out=out, base=base, dir=d, suite=Path(base).parent, key=_signing_key())
            for a in args]


@functools.lru_cache(maxsize=None)
def _signing_key() -> str:
    """An EC private key made by openssl once per run (``{key}`` in a recipe), removed at exit."""
    import atexit  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    d = Path(tempfile.mkdtemp(prefix="wrp-matrix-key-"))
    atexit.register(shutil.rmtree, d, True)
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(d / "key.pem")],
                   check=True, capture_output=True)
    return str(d / "key.pem")


def matrix_cases(name: str, recipe: Recipe, files: dict) -> list:
    """``[(class, argv, expected code, check)]`` of one command; check(stdout, stderr) adds assertions."""
    tmp = files["tmp"]
    good = files["ok"]
    cases = []

    def code(cls):
        return recipe.codes.get(cls, CLASSES[cls])

    def argv(file=good, out_dir=None, extra=(), args=recipe.args):
        d = out_dir or _fresh(tmp)
        out = d / recipe.out if recipe.out else d / "unused"
        return wrp_cmd(name, *_fill(args, file, out, good, d), *extra), out

    cmd, out = argv()
    cases.append(("ok", cmd, code("ok"), None, out if recipe.out else None))
    if recipe.takes_file:
        for cls in FILE_CLASSES:
            if cls in recipe.skip:
                continue
            cmd, _ = argv(file=files[cls])
            cases.append((cls, cmd, code(cls), None, None))
    cmd, _ = argv(extra=("--no-such-option",))
    cases.append(("bad_option", cmd, code("bad_option"), None, None))
    for bad in recipe.bad_values:
        cmd, _ = argv(args=bad)
        cases.append(("bad_value", cmd, code("bad_value"), None, None))
    if recipe.inputs:
        cmd, _ = argv(extra=("--input", f"nosuch={files['npy']}"))
        cases.append(("unknown_binding", cmd, code("unknown_binding"), "nosuch", None))
    if recipe.out:
        cmd, _ = argv(out_dir=files["unwritable"] / f"wrpkit-matrix-{os.getpid()}" / "x")
        cases.append(("unwritable_output", cmd, code("unwritable_output"), "cannot", None))
        cmd, _ = argv(out_dir=files["unwritable"])
        cases.append(("unwritable_output", cmd, code("unwritable_output"), "cannot", None))
        d = _fresh(tmp) / "new" / "deeper"
        cmd, out = argv(out_dir=d)
        cases.append(("missing_parent", cmd, code("missing_parent"), None, out))
    cmd, _ = argv()
    cases.append(("closed_pipe", cmd, code("closed_pipe"), None, None))
    return cases


def _run_case(case):
    cls, cmd, want, words, out = case
    rc_, stdout, stderr = run(cmd, close_stdout=(cls == "closed_pipe"))
    problems = []
    if rc_ != want:
        problems.append(f"exit {rc_}, want {want}")
    text = stdout + stderr
    if "Traceback" in text or "Exception ignored" in text or "internal error" in text:
        problems.append("a traceback or internal error")
    if rc_ not in (EXIT_OK, EXIT_PIPE) and not text.strip():
        problems.append("no message")
    if words and words not in text:
        problems.append(f"{words!r} not in the message")
    # A CPU capture: no command prints Warp's banner or its "no CUDA driver" warning (item 3).
    if cls == "ok" and ("Could not find or load the NVIDIA CUDA driver" in text or "initialized:" in text):
        problems.append("Warp's banner or CUDA-driver warning in a CPU-only command")
    if cls in ("ok", "missing_parent") and out is not None and rc_ == EXIT_OK and not out.exists():
        problems.append(f"{out} was not written")
    if cls == "closed_pipe" and ("error" in stderr.lower() or "pipe" in stderr.lower()):
        problems.append("a closed pipe is not quiet")
    if problems:
        return f"{cls}: {' '.join(map(str, cmd[2:]))}: {'; '.join(problems)}\n    {text.strip()[-600:]}"
    return None


def test_every_command_has_a_recipe():
    """A command that is not in the matrix fails here: add its row to RECIPES."""
    missing = sorted(set(wrp_commands()) - set(RECIPES))
    assert not missing, f"commands without a row in tests/cli/test_exit_matrix.py RECIPES: {missing}"


def test_every_class_has_a_documented_code():
    for cls, code in CLASSES.items():
        assert code in EXIT_CODES, cls


@pytest.mark.parametrize("name", sorted(RECIPES))
@pytest.mark.slow  # over 15 s in the fast lane (measured, 2 shared cores)
def test_matrix(name, files):
    """Every failure class of one command gives its code, with a message and no traceback."""
    if name not in wrp_commands():
        pytest.skip(f"wrp has no {name!r} command on this branch")
    cases = matrix_cases(name, RECIPES[name], files)
    with ThreadPoolExecutor(3) as pool:
        failures = [f for f in pool.map(_run_case, cases) if f]
    assert not failures, "\n".join(failures)


def test_matrix_wrp_replay(files, replayer):
    """wrp-replay meets the same classes with the same codes."""
    good = files["ok"]
    tmp = files["tmp"]

    def out(d):
        return f"--output=y={d / 'y.npy'}"

    cases = [("ok", [replayer, good, out(_fresh(tmp))], EXIT_OK, None, None)]
    for cls in FILE_CLASSES:
        cases.append((cls, [replayer, files[cls]], CLASSES[cls], None, None))
    cases += [
        ("bad_option", [replayer, good, "--no-such-option"], EXIT_USAGE, None, None),
        ("bad_value", [replayer, good, "--repeat", "0"], EXIT_USAGE, None, None),
        ("bad_value", [replayer, good, "--device", NO_GPU], EXIT_USAGE, None, None),
        ("bad_value", [replayer, good, "--timeout", "-1"], EXIT_USAGE, None, None),
        ("unknown_binding", [replayer, good, f"--input=nosuch={files['npy']}"], EXIT_USAGE, "nosuch", None),
        ("unwritable_output", [replayer, good, out(files["unwritable"])], EXIT_FAILED, "cannot", None),
        ("missing_parent", [replayer, good, out(_fresh(tmp) / "new" / "deeper")], EXIT_OK, None, None),
        ("closed_pipe", [replayer, good, "--list"], EXIT_PIPE, None, None),
    ]
    # older_format: wrp-replay validates it under its own rules, then refuses to replay it (3).
    with ThreadPoolExecutor(3) as pool:
        failures = [f for f in pool.map(_run_case, cases) if f]
    assert not failures, "\n".join(failures)
