"""Replay in a child process, so that a crash never takes the caller down.

A file can pass every record check and still crash the process that replays
it: it runs machine code on data (a stale HashGrid pointer, a launch past its
arrays, flipped bits in a kernel's code).  :func:`replay_in_child` loads and
replays a prepared capture in a fresh ``python -m wrpkit.run.isolate``
process: the child loads a private copy of the bytes this process validated
(without validating them again), and inputs and results pass through ``.npz``
files in the same private temporary directory.  When the child dies of a fatal signal (SIGSEGV, SIGBUS,
SIGILL, SIGFPE, SIGABRT), the parent raises :class:`~wrpkit.errors.WrpCrashError`
(exit code :data:`~wrpkit.errors.EXIT_CRASH`) and has written nothing.

Warp runs the whole graph in one native call (``capture_launch``), so the op
that crashed cannot be seen from outside.  :func:`replay_in_child` finds it by
experiment: it replays prefixes of the top-level op list in further children
(a bisection, ``log2(ops)`` children) and names the first op whose prefix
crashes, with its kind, kernel, module, and whether the module's SHA-256 was
verified before it ran.  When the budget for that search runs out, or no
prefix reproduces the crash, the message says so.

Cost: :func:`replay_in_child` starts one child process per call (Python start,
``import warp``, load); :class:`ReplayWorker`, which ``load(isolate=True)``
uses, keeps one child per program and pays that once.  See the README's
benchmark table.  The in-process path (:meth:`Program.run`) is unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..errors import (
    TIMEOUT_HINT,
    WrpCrashError,
    WrpError,
    WrpRuntimeError,
    WrpTimeoutError,
    timeout_message,
)

#: The fatal signals a contained replay turns into :class:`WrpCrashError`.
CRASH_SIGNALS = {getattr(signal, n): n for n in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")
                 if hasattr(signal, n)}

#: Seconds the search for the crashing op may take (bounded further by a --timeout).
IDENTIFY_BUDGET_S = 120.0


@dataclass
class ChildRun:
    """What a child replay returned.

    Attributes:
        results: ``{binding: np.ndarray}`` read back after the last replay.
        host_ms: Host wall time of each timed replay, in ms.
        device_ms: CUDA event time of each timed replay, or None on CPU.
    """

    results: dict
    host_ms: list
    device_ms: Optional[list]


class ChildCrashed(Exception):
    """A child process died of signal ``signum`` at ``stage`` (see :func:`run_module`)."""

    def __init__(self, signum: int, stage: str, stderr: str):
        super().__init__(signum)
        self.signum, self.stage, self.stderr = signum, stage, stderr


def _signal_name(signum: int) -> str:
    return CRASH_SIGNALS.get(signum) or (signal.Signals(signum).name if signum in signal.Signals.__members__.values()
                                         else f"signal {signum}")


# ---------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------


def write_source(prep, d: Path) -> tuple:
    """``(source path, modules dir)`` the child loads: a private copy of the bytes this process validated.

    The child loads that copy without validating it again (most of a load's
    cost for a large graph), and a file changed after validation never runs.
    """
    from ..formats import wrp1  # noqa: PLC0415

    data = prep.wrp_bytes if prep.wrp_bytes is not None else wrp1.build_image(prep.model)[0]
    src = d / "capture.wrp"
    src.write_bytes(memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data)
    mdir = d / "capture_modules"
    mdir.mkdir()
    for name, blob in prep.modules.items():
        (mdir / Path(name).name).write_bytes(bytes(memoryview(blob)))
    return os.fspath(src), os.fspath(mdir)


def verify_deferred(prep) -> None:
    """Verify the region checksums of a ``.wrpk`` that :func:`~wrpkit.run.runtime.prepare` deferred.

    In-process, they are verified while Warp loads; the child loads a copy it
    does not verify again, so they are verified here first.

    Raises:
        WrpIntegrityError: A region's data does not match its SHA-256.
    """
    if prep.deferred:
        from ..formats.wrpk import BackgroundVerification  # noqa: PLC0415

        BackgroundVerification(prep.deferred).wait()
        prep.deferred = []


def child_env() -> dict:
    """The environment of a replay child: wrpkit importable, and no faulthandler dump (the parent reports)."""
    env = dict(os.environ)
    env.pop("PYTHONFAULTHANDLER", None)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])]
                                         + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_module(module: str, d: Path, timeout: Optional[float], timeout_total: Optional[float] = None
               ) -> subprocess.CompletedProcess:
    """Run ``python -m module d`` in a child process with wrpkit importable; stdout and stderr are captured.

    The child reports a :class:`WrpError` by writing ``d/error.json``
    (:func:`write_child_error`) and its progress in ``d/stage``
    (``"loading"``, ``"replaying"``, ...).

    Returns:
        The finished process (exit code 0 or a positive one: the caller reads its results).

    Raises:
        ChildCrashed: The child died of a signal.
        WrpTimeoutError: ``timeout`` ran out (the child was killed; the message names ``timeout_total``).
        WrpError: The error the child reported.
        KeyboardInterrupt: Ctrl-C (``subprocess.run`` kills and reaps the child first).
    """
    for name in ("error.json", "stage"):
        (d / name).unlink(missing_ok=True)
    try:
        proc = subprocess.run([sys.executable, "-m", module, os.fspath(d)], capture_output=True,
                              text=True, errors="replace", env=child_env(), timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise WrpTimeoutError(timeout_message(timeout_total or timeout), hint=TIMEOUT_HINT) from None
    except OSError as e:
        raise WrpRuntimeError(f"cannot start the replay process: {e}") from None
    stage = (d / "stage").read_text() if (d / "stage").is_file() else "starting"
    if proc.returncode < 0:
        raise ChildCrashed(-proc.returncode, stage, proc.stderr)
    if (d / "error.json").is_file():
        raise _error_from(json.loads((d / "error.json").read_text()))
    return proc


def no_result_error(proc: subprocess.CompletedProcess) -> WrpRuntimeError:
    """The error for a child that ended without a result and without reporting an error."""
    return ended_without_result(proc.returncode, proc.stderr)


def ended_without_result(returncode: int, output: str) -> WrpRuntimeError:
    """:func:`no_result_error` from a child's exit code and what it printed."""
    tail = " | ".join(output.strip().splitlines()[-5:])
    return WrpRuntimeError(f"the replay process ended with exit code {returncode} and no result: {tail}",
                           hint="Warp's own diagnostic, if any, is quoted above.")


def _run_child(d: Path, job: dict, inputs: Mapping, timeout: Optional[float]) -> ChildRun:
    """Run one child on ``job``; raise what it raised, :class:`ChildCrashed` or :class:`WrpTimeoutError`."""
    for name in ("result.npz", "result.json"):
        (d / name).unlink(missing_ok=True)
    (d / "job.json").write_text(json.dumps(job))
    np.savez(d / "inputs.npz", **{k: np.asarray(v) for k, v in inputs.items()})
    proc = run_module("wrpkit.run.isolate", d, timeout, job["timeout_total"])
    if proc.returncode != 0 or not (d / "result.json").is_file():
        raise no_result_error(proc)
    info = json.loads((d / "result.json").read_text())
    results = {}
    if job["read_back"]:
        with np.load(d / "result.npz", allow_pickle=False) as z:
            results = {k: z[k] for k in z.files}
    return ChildRun(results, info["host_ms"], info["device_ms"])


def _error_from(info: dict) -> WrpError:
    from .. import errors  # noqa: PLC0415

    cls = getattr(errors, info.get("class", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, WrpError)):
        cls = WrpRuntimeError
    if issubclass(cls, errors.WrpValidationError):
        return cls(info.get("problems") or [info["message"]], hint=info.get("hint"))
    err = WrpError.__new__(cls)
    WrpError.__init__(err, info["message"], info.get("hint"))
    err.field = err.offset = None  # the message already names them (WrpFormatError)
    return err


def replay_in_child(prep, device, inputs: Optional[Mapping] = None, repeat: int = 1, warmup: int = 0, *,
                    verify_checksums: bool = True, timeout: Optional[float] = None, read_back: bool = True,
                    identify: bool = True, raw: bool = False, timeout_total: Optional[float] = None) -> ChildRun:
    """Load and replay a prepared capture in a child process.

    Args:
        prep: A :class:`wrpkit.run.runtime.Prepared` (validated; its source
            file, or its bytes and modules, are handed to the child).
        device: The device string.
        inputs: ``{binding: np.ndarray}``, already checked against the bindings.
        repeat: Timed replays.
        warmup: Untimed replays first.
        verify_checksums: Whether a ``.wrpk`` input's blob checksums were verified (said on a crash).
        timeout: Seconds for the whole child run (None: no limit).
        read_back: Return every binding after the last replay.
        identify: On a crash, search for the op that crashed (more children).
        raw: Inputs and results are whole bindings as ``uint8`` bytes.
        timeout_total: The timeout to name in a timeout's message (default ``timeout``).

    Returns:
        A :class:`ChildRun`.

    Raises:
        WrpCrashError: The replay died of a fatal signal; the message names
            the op when it could be identified.
        WrpTimeoutError: ``timeout`` ran out (the child was killed).
        WrpError: Whatever the child raised (the same class and message).
    """
    inputs = dict(inputs or {})
    t0 = time.monotonic()
    verify_deferred(prep)
    with tempfile.TemporaryDirectory(prefix="wrpkit-isolate-") as tmp:
        d = Path(tmp)
        source, modules_dir = write_source(prep, d)
        job = {"source": source, "modules_dir": modules_dir, "device": str(device), "repeat": int(repeat),
               "warmup": int(warmup), "prefix": None, "read_back": read_back, "raw": raw,
               "timeout_total": timeout_total if timeout_total is not None else timeout}
        try:
            return _run_child(d, job, inputs, timeout)
        except ChildCrashed as crash:
            raise _located_crash(prep, crash, d, job, inputs, timeout, t0, identify, verify_checksums) from None


def _located_crash(prep, crash: ChildCrashed, d: Path, job: dict, inputs: Mapping, timeout: Optional[float],
                   t0: float, identify: bool, verify_checksums: bool) -> WrpCrashError:
    """The :class:`WrpCrashError` of a crashed child; a crash while replaying is located by bisecting on
    prefixes (one-shot children on ``job`` and ``inputs``), within what is left of ``timeout``."""
    left = None if timeout is None else timeout - (time.monotonic() - t0)
    op_index, searched = None, False
    n = len(prep.model.ops)
    if identify and crash.stage == "replaying" and n > 0:
        budget = IDENTIFY_BUDGET_S if left is None else min(IDENTIFY_BUDGET_S, left)
        op_index, searched = _identify_op(d, job, inputs, n, budget)
    return crash_error(prep, crash.signum, crash.stage, op_index, searched, verify_checksums=verify_checksums)


def identify_crash(prep, device, inputs: Optional[Mapping], replays: int, *, verify_checksums: bool = True,
                   budget: float = IDENTIFY_BUDGET_S) -> tuple:
    """Find the op of a crash seen elsewhere (e.g. in ``wrp-replay``) by replaying prefixes in children.

    Returns:
        ``(op index or None, whether the search finished)``.
    """
    n = len(prep.model.ops)
    if n == 0:
        return None, False
    with tempfile.TemporaryDirectory(prefix="wrpkit-isolate-") as tmp:
        d = Path(tmp)
        source, modules_dir = write_source(prep, d)
        job = {"source": source, "modules_dir": modules_dir, "device": str(device), "repeat": int(replays),
               "warmup": 0, "prefix": None, "read_back": False, "raw": False,
               "timeout_total": None}
        return _identify_op(d, job, dict(inputs or {}), n, budget)


def _identify_op(d: Path, job: dict, inputs, n: int, budget: float) -> tuple:
    """Bisect on op prefixes: ``(index of the first op whose prefix crashes, whether the search finished)``.

    The full graph is known to crash; the empty prefix is known not to.
    """
    deadline = time.monotonic() + budget
    lo, hi = 0, n  # prefix lo runs, prefix hi crashes
    while hi - lo > 1:
        left = deadline - time.monotonic()
        if left <= 1:
            return None, False
        mid = (lo + hi) // 2
        probe = dict(job, prefix=mid, read_back=False, timeout_total=None)
        try:
            _run_child(d, probe, inputs, left)
            lo = mid
        except ChildCrashed:
            hi = mid
        except WrpError:
            return None, False  # the prefix did not run for another reason: no proof either way
    return hi - 1, True


def module_verification(prep, verify_checksums: bool = True) -> dict:
    """``{binary_filename: how its bytes were verified, or ""}`` for every module of ``prep``.

    A module counts as verified when the SHA-256 that wrpkit recorded at save
    time was checked against it before it ran, or when it came from a
    ``.wrpk`` whose blob checksums were verified.
    """
    digests = prep.annotations.digest_map() if prep.annotations is not None else {}
    out = {}
    for mod in prep.model.modules:
        name = mod.binary_filename
        if name in digests:
            out[name] = "its SHA-256 recorded at save time was verified before it ran"
        elif prep.kind == "wrpk" and verify_checksums and not prep.modules_given:
            out[name] = "its SHA-256 recorded in the bundle was verified before it ran"
        else:
            out[name] = ""
    return out


NO_DIGEST_HINT = ("corrupt or mismatched kernel code cannot be caught before it runs; save the capture with "
                  "wrpkit (wrpkit.save or wrpkit.capture) or bundle it (wrp convert FILE out.wrpk) to record "
                  "module digests")


def op_at_path(ops, path: str):
    """The op at ``path`` as ``wrp inspect --ops`` writes it (``"1"``, ``"1.2"``, ``"1.e0"``), or None."""
    from .. import model as m  # noqa: PLC0415

    op = None
    try:
        for k, part in enumerate(str(path).split(".")):
            if k:
                if isinstance(op, m.If):
                    ops = op.else_ops if part.startswith("e") else op.then_ops
                elif isinstance(op, m.While):
                    ops = op.body
                else:
                    return None
            op = ops[int(part.lstrip("e"))]
    except (ValueError, IndexError):
        return None
    return op


def crash_error(prep, signum: int, stage: str, op_index: Optional[int], searched: bool, *,
                verify_checksums: bool = True, path: Optional[str] = None,
                iteration: Optional[int] = None) -> WrpCrashError:
    """The :class:`WrpCrashError` for a replay that died of ``signum``.

    Args:
        prep: The :class:`~wrpkit.run.runtime.Prepared` capture.
        signum: The fatal signal.
        stage: ``"replaying"`` when ops were running, else the crash came while loading.
        op_index: The top-level op that crashed, or None.
        searched: Whether a search for the op finished (said when ``op_index`` is None).
        verify_checksums: Whether a ``.wrpk``'s blob checksums were verified.
        path: Where the op was seen running (``wrp trace``): its path inside
            IF/WHILE bodies; it names the nested op rather than the top-level one.
        iteration: The innermost WHILE iteration of that op, if any.
    """
    from .. import model as m  # noqa: PLC0415

    sig = _signal_name(signum)
    verified = module_verification(prep, verify_checksums)
    modules = {mod.module_hash: mod.binary_filename for mod in prep.model.modules}
    kind = kernel = module = None
    digest_ok = None
    if stage != "replaying":
        where = "while Warp loaded the capture (before any op ran)"
    elif op_index is None:
        where = ("in an op that could not be identified (" +
                 ("no prefix of the graph reproduced the crash" if searched else
                  "the search for it ran out of time") + ")")
    else:
        op = (op_at_path(prep.model.ops, path) if path is not None else None) or prep.model.ops[op_index]
        kind = op.op_type.name
        where = f"in op {op_index} ({kind}"
        if isinstance(op, m.KernelLaunch):
            kernel, module = op.kernel_key, modules.get(op.module_hash)
            where += f" of kernel {kernel!r}, module {module!r}"
        where += ")"
        if path is not None:
            if path != str(op_index) or iteration is not None:
                where += f" at path {path}" + (f", WHILE iteration {iteration}" if iteration is not None else "")
            where += " (the op the trace was running)"
        elif op_index > 0:
            where += f" (found by replaying prefixes of the graph: ops 0..{op_index - 1} replay without crashing)"
    msg = f"the replay crashed with {sig} {where}; nothing was written"
    if module is not None:
        how = verified.get(module, "")
        digest_ok = bool(how)
        msg += f". Module {module!r}: " + (how if how else "no digest was recorded, so " + NO_DIGEST_HINT)
        hint = ("The kernel code is as saved, so the crash comes from the data it was given: run `wrp check` "
                "for stale pointers and launches past their arrays." if how else
                "Run `wrp check` for stale pointers and launches past their arrays; recapture if the module "
                "files may have been altered.")
    else:
        unverified = sorted(n for n, how in verified.items() if not how)
        if unverified:
            msg += (f". Modules without a recorded digest ({', '.join(repr(n) for n in unverified[:3])}"
                    f"{', ...' if len(unverified) > 3 else ''}): " + NO_DIGEST_HINT)
        hint = "Run `wrp check` for stale pointers and launches past their arrays."
    return WrpCrashError(msg, hint=hint, signal_name=sig, op_index=op_index, op_kind=kind, kernel=kernel,
                         module=module, digest_verified=digest_ok, path=path, iteration=iteration)


# ---------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------


class ReplayWorker:
    """A child process that loads a prepared capture once and replays it on request.

    :class:`~wrpkit.run.runtime.IsolatedProgram` keeps one, so that a replay in
    isolation costs a request and the bindings' bytes, not a process start,
    ``import warp`` and a load per call.  The child holds the loaded graph, so
    its memory persists between runs as in a :class:`~wrpkit.run.runtime.Program`.
    Requests go through files in a private temporary directory (``job.json``,
    ``inputs.npz``; ``result.*`` or ``error.json`` back), a line on the child's
    stdin says "go", and a line on a pipe of its own says "done" (Warp prints on
    stdout, which goes to ``d/output.txt``).  A child that dies (a crash, a
    timeout, Ctrl-C, a Warp error) is gone: the next request starts a new one,
    from the file's data.
    """

    def __init__(self, prep, device):
        self.prep = prep
        self.device = str(device)
        self._tmp = tempfile.TemporaryDirectory(prefix="wrpkit-isolate-")
        self.d = Path(self._tmp.name)
        verify_deferred(prep)
        self.source, self.modules_dir = write_source(prep, self.d)
        self.proc: Optional[subprocess.Popen] = None
        self._done_fd: Optional[int] = None
        self._targets = 0  # captures given by retarget (wrp regress: one warm child for many captures)
        self._warm = False
        #: End the child when the thread that started it ends (Linux): a killed ``wrp regress`` worker
        #: leaves no replay running on its own.
        self.die_with_parent = False

    def retarget(self, prep, device) -> None:
        """Replay another prepared capture from now on, in the same child if it is alive.

        The child keeps Warp imported and loads the new capture at the next
        run (releasing the previous one), so a run over many captures pays the
        process start and ``import warp`` once (``wrp regress``).
        """
        import shutil  # noqa: PLC0415

        verify_deferred(prep)
        old = Path(self.source).parent
        self._targets += 1
        sub = self.d / f"capture{self._targets}"
        sub.mkdir()
        self.prep, self.device = prep, str(device)
        self.source, self.modules_dir = write_source(prep, sub)
        if old != self.d:
            shutil.rmtree(old, ignore_errors=True)

    def warm(self, timeout: Optional[float] = 300.0) -> None:
        """Start the child if it is not running, and wait until it has imported Warp.

        A run's ``timeout`` then bounds loading and replaying only, not the
        process start (``wrp regress --timeout``).

        Raises:
            WrpTimeoutError: It was not ready within ``timeout`` seconds (it is stopped).
            WrpRuntimeError: It ended first.
        """
        import select  # noqa: PLC0415

        if self.alive and self._warm:
            return
        self.stop()
        self._start()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self.proc.stdin.write(b"warm\n")
            self.proc.stdin.flush()
            line = b""
            while not line.endswith(b"\n"):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WrpTimeoutError(f"the replay process did not start within {timeout:g} s",
                                          hint="The machine may be overloaded; retry, or raise the timeout.")
                ready, _, _ = select.select([self._done_fd], [], [], left)
                if ready:
                    chunk = os.read(self._done_fd, 64)
                    if not chunk:
                        raise ended_without_result(self.proc.wait(), self._output_tail())
                    line += chunk
        except BaseException:
            self.stop()
            raise
        self._warm = True

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def job(self, repeat: int, warmup: int, timeout_total: Optional[float]) -> dict:
        """The job of a one-shot child (:func:`_run_child`) replaying the same source (for the op search)."""
        return {"source": self.source, "modules_dir": self.modules_dir, "device": self.device, "repeat": int(repeat),
                "warmup": int(warmup), "prefix": None, "read_back": False, "raw": True,
                "timeout_total": timeout_total}

    def _start(self) -> None:
        for name in ("error.json", "stage"):
            (self.d / name).unlink(missing_ok=True)
        (self.d / "job.json").write_text(json.dumps(self.job(0, 0, None)))
        done_r, done_w = os.pipe()
        out = open(self.d / "output.txt", "wb")  # noqa: SIM115  (the child's stdout and stderr)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "wrpkit.run.isolate", "--serve", os.fspath(self.d),
                                          str(done_w)] + (["--die-with-parent"] if self.die_with_parent else []),
                                         stdin=subprocess.PIPE, stdout=out, stderr=out, env=child_env(),
                                         pass_fds=(done_w,))
        except OSError as e:
            os.close(done_r)
            raise WrpRuntimeError(f"cannot start the replay process: {e}") from None
        finally:
            os.close(done_w)
            out.close()
        self._done_fd = done_r

    def stop(self) -> None:
        """End the child (if any) and forget it."""
        proc, self.proc = self.proc, None
        self._warm = False
        if self._done_fd is not None:
            os.close(self._done_fd)
            self._done_fd = None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdin:
                proc.stdin.close()

    def close(self) -> None:
        """End the child and remove the temporary directory."""
        self.stop()
        self._tmp.cleanup()

    def _output_tail(self) -> str:
        try:
            return (self.d / "output.txt").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def run(self, inputs: Mapping, repeat: int, warmup: int = 0, timeout: Optional[float] = None) -> ChildRun:
        """Replay in the child: set ``inputs`` (whole bindings as ``uint8``), replay, read every binding back.

        Raises:
            ChildCrashed: The child died of a signal (it is gone).
            WrpTimeoutError: ``timeout`` ran out (the child was killed).
            WrpError: What the child reported (it is gone).
        """
        import select  # noqa: PLC0415

        started = not self.alive
        if started:
            self.stop()
            self._start()
        d = self.d
        for name in ("result.npz", "result.json", "error.json"):
            (d / name).unlink(missing_ok=True)
        np.savez(d / "inputs.npz", **{k: np.asarray(v) for k, v in inputs.items()})
        (d / "job.json").write_text(json.dumps(dict(self.job(repeat, warmup, timeout), read_back=True)))
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            try:
                self.proc.stdin.write(b"run\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # the child ended: its status says why (below)
            line = b""
            while not line.endswith(b"\n"):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.stop()
                    raise WrpTimeoutError(timeout_message(timeout), hint=TIMEOUT_HINT)
                ready, _, _ = select.select([self._done_fd], [], [], left)
                if not ready:
                    continue
                chunk = os.read(self._done_fd, 64)
                if not chunk:
                    break  # the child ended
                line += chunk
        except BaseException:
            if self.alive and not line.endswith(b"\n"):
                self.stop()  # Ctrl-C or an error here: never leave a child replaying on its own
            raise
        if line.endswith(b"\n") and (d / "result.json").is_file():
            info = json.loads((d / "result.json").read_text())
            with np.load(d / "result.npz", allow_pickle=False) as z:
                results = {k: z[k] for k in z.files}
            return ChildRun(results, info["host_ms"], info["device_ms"])
        proc = self.proc
        proc.wait()  # it answered with an error, or ended without answering: either way it is ending
        stage = (d / "stage").read_text() if (d / "stage").is_file() else "starting"
        self.stop()
        if proc.returncode < 0:
            raise ChildCrashed(-proc.returncode, stage, self._output_tail())
        if (d / "error.json").is_file():
            raise _error_from(json.loads((d / "error.json").read_text()))
        raise ended_without_result(proc.returncode, self._output_tail())


def replay_in_worker(worker: ReplayWorker, inputs: Mapping, repeat: int, *, verify_checksums: bool = True,
                     timeout: Optional[float] = None, full_state: Optional[Mapping] = None) -> ChildRun:
    """Replay in ``worker``; on a crash, find the op (one-shot children from ``full_state``) and raise it.

    Args:
        worker: The program's :class:`ReplayWorker`.
        inputs: Whole bindings (``uint8``) to set before the replay.
        repeat: Replays.
        verify_checksums: Whether a ``.wrpk`` input's blob checksums were verified (said on a crash).
        timeout: Seconds for the request (None: no limit).
        full_state: Every binding the program holds (what a new child needs to replay the same run).

    Raises:
        WrpCrashError, WrpTimeoutError, WrpError: As :func:`replay_in_child`.
    """
    t0 = time.monotonic()
    try:
        return worker.run(inputs, repeat, 0, timeout)
    except ChildCrashed as crash:
        raise _located_crash(worker.prep, crash, worker.d, worker.job(repeat, 0, None), dict(full_state or inputs),
                             timeout, t0, True, verify_checksums) from None


def write_stage(d: Path, text: str) -> None:
    """Record the child's stage (``"loading"``, ``"replaying"``, ...) for a crash report."""
    with open(d / "stage", "w") as f:
        f.write(text)


def _load_job(d: Path, job: dict) -> tuple:
    """``(warp, Program)``: the job's private copy loaded (a prefix of it when ``job["prefix"]`` is set)."""
    from ..environment import init_warp  # noqa: PLC0415

    # No banner, and on the CPU no "could not find the CUDA driver" warning.
    wp = init_warp(cpu_only=str(job["device"]).strip().lower() == "cpu")
    from . import runtime  # noqa: PLC0415

    modules = None
    if job["modules_dir"]:
        modules = {p.name: p.read_bytes() for p in Path(job["modules_dir"]).iterdir() if p.is_file()}
    # A private copy of bytes the parent validated (and refused what it must refuse, raw pointers
    # included): decoded, not validated again.
    prep = runtime.prepare(job["source"], modules, verify_checksums=False, allow_raw_pointers=True,
                           _validated=True)
    if job["prefix"] is not None:
        from ..formats import wrp1  # noqa: PLC0415

        prep.model.ops = prep.model.ops[:job["prefix"]]
        prep.wrp_bytes = wrp1.build_image(prep.model)[0]
        prep.modules_given, prep.deferred = True, []
    write_stage(d, "loading")
    return wp, runtime.load_prepared(prep, job["device"])


def _replay_job(d: Path, wp, prog, job: dict) -> None:
    """Set ``d/inputs.npz``, replay as the job says, and write ``d/result.json`` (and ``result.npz``)."""
    from ..fileio import atomic_write  # noqa: PLC0415

    with np.load(d / "inputs.npz", allow_pickle=False) as z:
        for name in z.files:
            if job["raw"]:  # whole regions as bytes, already checked by the parent's Program
                prog._write_raw(prog._slot(name), np.ascontiguousarray(z[name]).reshape(-1).view(np.uint8))
            else:
                prog.set(name, z[name])
    write_stage(d, "replaying")
    host_ms, device_ms = _timed_replays(wp, prog, job["warmup"], job["repeat"])
    write_stage(d, "reading")
    if job["read_back"]:
        import io  # noqa: PLC0415

        buf = io.BytesIO()
        read = (lambda n: prog._read_raw(prog._slot(n))) if job["raw"] else prog.get  # noqa: E731
        np.savez(buf, **{name: read(name) for name in prog.bindings})
        atomic_write(d / "result.npz", [buf.getvalue()])
    atomic_write(d / "result.json", [json.dumps({"host_ms": host_ms, "device_ms": device_ms}).encode()])


def _child_main(d: Path) -> int:
    job = json.loads((d / "job.json").read_text())
    try:
        wp, prog = _load_job(d, job)
        _replay_job(d, wp, prog, job)
        return 0
    except WrpError as e:
        return write_child_error(d, e)


def _serve_main(d: Path, done_fd: int) -> int:
    """The :class:`ReplayWorker` child: load once, then replay on every line of stdin until it closes.

    ``warm`` imports Warp and answers; a ``run`` whose job names another
    source (:meth:`ReplayWorker.retarget`) releases the loaded capture and
    loads that one.
    """
    done = os.fdopen(done_fd, "wb", buffering=0)
    wp = prog = None
    loaded = None
    try:
        for line in sys.stdin.buffer:
            if line.strip() == b"warm":
                from ..environment import init_warp  # noqa: PLC0415

                job = json.loads((d / "job.json").read_text())
                init_warp(cpu_only=str(job["device"]).strip().lower() == "cpu")
                done.write(b"done\n")
                continue
            if line.strip() != b"run":
                return 0
            job = json.loads((d / "job.json").read_text())
            if prog is not None and loaded != (job["source"], job["device"]):
                prog.close()
                prog = None
            if prog is None:
                wp, prog = _load_job(d, job)
                loaded = (job["source"], job["device"])
            _replay_job(d, wp, prog, job)
            write_stage(d, "idle")
            done.write(b"done\n")
        return 0
    except WrpError as e:
        code = write_child_error(d, e)
        done.write(b"done\n")
        return code


def write_child_error(d: Path, e: WrpError) -> int:
    """Report ``e`` to the parent (``d/error.json``, read back by :func:`run_module`); return its exit code."""
    from ..fileio import atomic_write  # noqa: PLC0415

    info = {"class": type(e).__name__, "message": e.message, "hint": e.hint,
            "problems": list(getattr(e, "problems", []))}
    atomic_write(d / "error.json", [json.dumps(info).encode()])
    return e.exit_code


def _timed_replays(wp, prog, warmup: int, repeat: int) -> tuple:
    """Replay ``warmup`` untimed then ``repeat`` timed times: ``(host_ms, device_ms or None)``."""
    graph, launch = prog.graph, wp.capture_launch
    perf = time.perf_counter
    host_ms, device_ms = [], []
    try:
        for _ in range(warmup):
            launch(graph)
        if prog.device.is_cuda:
            wp.synchronize_device(prog.device)
            stream = prog.device.stream
            start = wp.Event(prog.device, enable_timing=True)
            end = wp.Event(prog.device, enable_timing=True)
            for _ in range(repeat):
                t0 = perf()
                stream.record_event(start)
                launch(graph)
                stream.record_event(end)
                wp.synchronize_device(prog.device)
                host_ms.append((perf() - t0) * 1e3)
                device_ms.append(float(wp.get_event_elapsed_time(start, end)))
            return host_ms, device_ms
        for _ in range(repeat):
            t0 = perf()
            launch(graph)
            host_ms.append((perf() - t0) * 1e3)
    except RuntimeError as e:
        raise WrpRuntimeError(f"Warp failed to replay the graph: {e}") from None
    return host_ms, None


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        if "--die-with-parent" in sys.argv[4:] and sys.platform.startswith("linux"):
            import ctypes  # noqa: PLC0415

            try:
                ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
            if os.getppid() == 1:  # the parent died before prctl took effect
                sys.exit(1)
        sys.exit(_serve_main(Path(sys.argv[2]), int(sys.argv[3])))
    sys.exit(_child_main(Path(sys.argv[1])))
