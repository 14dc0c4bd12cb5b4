"""Ctrl-C and SIGTERM at any moment: exit 130, one line, no traceback, no output left, no process left.

Each command runs as a terminal's foreground job does (its own process group, SIGINT at its
default), and the whole group gets SIGINT (what Ctrl-C sends) or SIGTERM at seeded random moments
from the first instruction of ``wrp`` on: during the interpreter's start, the imports, the
parse, the replay's child, the writes.  A run the signal reaches after it finished has exited 0
with its output whole; every other run must exit 130 with ``interrupted`` as its last line.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import interruptible

pytestmark = pytest.mark.slow  # dozens of process starts per command

WRP = str(Path(sys.executable).parent / "wrp")
TRIES = int(os.environ.get("WRPKIT_INTERRUPT_TRIES", "12"))


def _group_alive(pgid: int) -> list:
    """``["PID COMMAND LINE"]`` of the processes still running in the command's process group.

    A zombie has ended (its exit status waits for a parent that is gone, where this machine's
    init does not reap): it holds no resource but its process-table entry, so it is not counted."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid or fields[0] == "Z":
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace")
            alive.append(f"{entry} {args[:200]}")
        except (OSError, IndexError, ValueError):
            continue
    return alive


def _interrupt_at_random(cmd: list, output: Path, sig: int, seed: int, window: float) -> list:
    """Run ``cmd`` TRIES times, each sent ``sig`` after a random delay; the problems seen."""
    rng = random.Random(seed)
    problems = []
    for i in range(TRIES):
        delay = rng.uniform(0.0, window)
        if output.exists():
            output.unlink() if output.is_file() else shutil.rmtree(output)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=interruptible)
        time.sleep(delay)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        out, err = proc.communicate(timeout=120)
        time.sleep(0.2)  # children the command ended have gone
        left = _group_alive(proc.pid)
        if left:
            subprocess.run(["pkill", "-KILL", "-g", str(proc.pid)])
            problems.append(f"try {i} ({delay:.3f} s): processes left behind: {left}")
        tail = err.strip().splitlines()[-1] if err.strip() else ""
        if "Traceback" in err or "Fatal Python error" in err:
            problems.append(f"try {i} ({delay:.3f} s): a traceback:\n{err[-1500:]}")
        elif proc.returncode == 0:
            if not output.exists():
                problems.append(f"try {i} ({delay:.3f} s): exit 0 but no {output.name}")
        elif proc.returncode == -sig and not err.strip():
            # Sent at once, it ended wrp before the launcher's first instruction, as it ends any program
            # (test_the_launcher_holds_signals_until_wrpkit_takes_them): nothing ran, so nothing is written.
            if output.exists():
                problems.append(f"try {i} ({delay:.3f} s): killed before it started, yet {output.name} exists")
        elif proc.returncode != 130 or tail != "interrupted":
            problems.append(f"try {i} ({delay:.3f} s): exit {proc.returncode}, last line {tail!r}")
        elif output.exists() and (why := _not_whole(output)):
            # An output published before the signal came stays, whole; a torn one is a failure.
            problems.append(f"try {i} ({delay:.3f} s): interrupted, and {output.name} is not whole: {why}")
    return problems


def _not_whole(output: Path) -> str:
    """Why an output is not a whole file of its kind, or "" when it is."""
    import json  # noqa: PLC0415
    import xml.etree.ElementTree as ET  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    try:
        if output.suffix == ".npz":
            with np.load(output) as z:
                [z[k] for k in z.files]
        elif output.suffix in (".trace", ".json"):
            json.loads(output.read_text())
        elif output.suffix == ".xml":
            ET.parse(output)
        elif output.suffix == ".wrpk":
            res = subprocess.run([WRP, "validate", str(output)], capture_output=True, text=True)
            return res.stderr if res.returncode else ""
    except Exception as e:  # noqa: BLE001  (any failure to read it whole is the finding)
        return f"{type(e).__name__}: {e}"
    return ""


def _commands(cap: Path, tmp: Path) -> dict:
    out = tmp / "out.npz"
    suite = tmp / "suite"
    return {
        "replay python": ([WRP, "replay", cap, "--output", out], out),
        "replay native": ([WRP, "replay", cap, "--engine", "native", "--output", out], out),
        "trace": ([WRP, "trace", cap, "--save", tmp / "t.trace"], tmp / "t.trace"),
        "profile": ([WRP, "profile", cap, "--repeat", "2", "-o", tmp / "p.json"], tmp / "p.json"),
        "regress -j 2": ([WRP, "regress", suite, "-j", "2", "--junit", tmp / "r.xml"], tmp / "r.xml"),
        "convert": ([WRP, "convert", cap, tmp / "c.wrpk"], tmp / "c.wrpk"),
    }


@pytest.fixture(scope="module")
def setup(captures, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("interrupts")
    src = Path(captures["views"])
    cap = tmp / src.name
    shutil.copyfile(src, cap)
    shutil.copytree(src.with_name(src.stem + "_modules"), tmp / (src.stem + "_modules"))
    suite = tmp / "suite"
    for name in ("a", "b", "c"):
        (suite / name).mkdir(parents=True)
        shutil.copyfile(cap, suite / name / cap.name)
        shutil.copytree(tmp / (src.stem + "_modules"), suite / name / (src.stem + "_modules"))
    assert subprocess.run([WRP, "regress", suite, "--update"], capture_output=True).returncode == 0
    return cap, tmp


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("name", ["replay python", "replay native", "trace", "profile", "regress -j 2", "convert"])
def test_a_signal_at_any_moment_is_one_line_and_exit_130(setup, name, sig):
    cap, tmp = setup
    cmd, output = _commands(cap, tmp)[name]
    if "native" in name and not (Path(sys.executable).parent / "wrp-replay").exists():
        pytest.skip("wrp-replay is not installed")
    # How long the command takes whole: the signals fall over that time and a little after.
    t0 = time.perf_counter()
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    window = (time.perf_counter() - t0) * 1.1
    problems = _interrupt_at_random([str(c) for c in cmd], output, sig, seed=hash((name, int(sig))) & 0xFFFF,
                                    window=window)
    assert not problems, "\n".join(problems)


def test_the_launcher_holds_signals_until_wrpkit_takes_them():
    """A signal sent at once is never a traceback or a "Fatal Python error": it ends wrp before its
    first instruction (killed by it, as any program is), or the launcher holds it for wrpkit (130)."""
    launcher = Path(WRP)
    if launcher.read_bytes()[:4] != b"\x7fELF":
        pytest.skip("wrp is not the native launcher (an editable install made before it)")
    for _ in range(5):
        proc = subprocess.Popen([WRP, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=interruptible)
        os.killpg(proc.pid, signal.SIGINT)  # at once: before Python has started
        out, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, 130, -signal.SIGINT), err
        if proc.returncode == -signal.SIGINT:
            assert not err  # ended before the launcher's first instruction: nothing ran
        assert "Traceback" not in err and "Fatal Python" not in err
        if proc.returncode == 130:
            assert err.strip().splitlines()[-1] == "interrupted"


UNRAISABLE = """
import signal, sys, time, weakref
import wrpkit.__main__ as m
signal.signal(signal.SIGTERM, m._terminated)
sys.unraisablehook = m._unraisable
class O: pass
o = O()
def cb(_):  # a callback Python cannot raise from, as importlib's module-lock one
    signal.raise_signal(signal.SIGTERM)
r = weakref.ref(o, cb)
try:
    del o
    time.sleep(2)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
"""


def test_a_signal_inside_a_callback_python_cannot_raise_from_is_delivered_again():
    """The CI run once met "Exception ignored in: <function _get_module_lock.<locals>.cb>" and a
    KeyboardInterrupt traceback: SIGTERM landed while importlib ran a weakref callback. The
    interrupt is sent again and raised in the command's own code."""
    done = subprocess.run([sys.executable, "-c", UNRAISABLE], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "interrupted" and "Exception ignored" not in done.stderr, done.stderr


_WRAPPED_INTERRUPT = r"""
import importlib.abc, importlib.util, os, signal, sys

class SignalAtSetName:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIG{sig})  # lands inside class creation, as in ipaddress's import

class Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        class Interface:  # Python 3.11 wraps what __set_name__ raises in a RuntimeError
            hostmask = SignalAtSetName()

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "{module}":
            return importlib.util.spec_from_loader(name, Loader())
        return None

sys.meta_path.insert(0, Finder())
sys.argv = ["wrp"] + {argv!r}
import wrpkit.__main__
sys.exit(wrpkit.__main__.main())
"""


@pytest.mark.parametrize("sig", ["INT", "TERM"])
@pytest.mark.parametrize("module,argv", [
    ("wrpkit.run.load.file_guard", ["validate", "x.wrp"]),    # an import before the command's own handler
    ("wrpkit.cli.validate", ["validate", "x.wrp"]),      # the command's import, inside it
    ("wrpkit.cli.inspect_run", ["inspect", "x.wrp"]),    # inspect's route without click
], ids=["before-handler", "command-import", "inspect"])
def test_a_signal_wrapped_in_another_error_is_still_interrupted(module, argv, sig):
    """A KeyboardInterrupt raised inside an import's class creation reaches wrp as a RuntimeError
    (its cause): CI saw a traceback from ipaddress's IPv6Interface. Every handler reports it as
    the interrupt it is."""
    code = _WRAPPED_INTERRUPT.format(module=module, argv=argv, sig=sig)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         preexec_fn=interruptible)  # SIGINT at its default, as in a terminal
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "interrupted", res.stderr
