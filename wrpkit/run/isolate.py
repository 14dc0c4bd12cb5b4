"""Replay in a child process, so that a crash never takes the caller down.

A file can pass every record check and still crash the process that replays
it: it runs machine code on data (a stale HashGrid pointer, a launch past its
arrays, flipped bits in a kernel's code).  :class:`ReplayWorker` loads and
replays a prepared capture in a ``python -m wrpkit.run.isolate`` child.  The
child maps the user's file itself (the very file this process validated,
checked by inode and modification time; no private copy), and loads it without
validating it again.  Inputs and results pass through anonymous shared memory
(``memfd``), requests over a Unix socket (:mod:`wrpkit.run.shared`), and the
outputs' statistics are computed in the child over Warp's memory: nothing is
written to disk.  When the child dies of a fatal signal (SIGSEGV, SIGBUS,
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
``import warp``, load); :class:`~wrpkit.run.runtime.IsolatedProgram` keeps one
:class:`ReplayWorker` per program and pays that once.  ``wrp trace`` keeps its
own child (:mod:`wrpkit.debug.trace_isolate`, through :func:`write_source` and
:func:`run_module`).
"""


from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..errors import (
    CRASH_SIGNAL_NUMBERS,
    TIMEOUT_HINT,
    WrpCrashError,
    WrpError,
    WrpRuntimeError,
    WrpTimeoutError,
    timeout_message,
)


#: Seconds the search for the crashing op may take (bounded further by a --timeout).
IDENTIFY_BUDGET_S = 120.0


@dataclass
class ChildRun:
    """What a child replay returned.

    Attributes:
        results: ``{binding: np.ndarray}`` read back after the last replay.
        host_ms: Host wall time of each timed replay, in ms.
        device_ms: CUDA event time of each timed replay, or None on CPU.
        stats: ``{binding: summary}`` computed in the child, where the data is
            (:func:`wrpkit.checks.binding_stats.region_stats`).
    """

    results: dict
    host_ms: list
    device_ms: Optional[list]
    stats: dict = field(default_factory=dict)


class ChildCrashed(Exception):
    """A child process died of signal ``signum`` at ``stage`` (see :func:`run_module`)."""

    def __init__(self, signum: int, stage: str, stderr: str):
        super().__init__(signum)
        self.signum, self.stage, self.stderr = signum, stage, stderr


def _signal_name(signum: int) -> str:
    return CRASH_SIGNAL_NUMBERS.get(signum) or (signal.Signals(signum).name if signum in signal.Signals.__members__.values()
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


# ---------------------------------------------------------------------------
# Parent side: a replay child fed through shared memory
# ---------------------------------------------------------------------------


class ChildSource:
    """What a replay child loads, as descriptors: nothing is copied to disk.

    The capture is the user's own file, opened again here and checked to be
    the very file that was validated (device, inode, size and modification
    time), so the child maps the same pages and makes no copy.  Bytes given
    by a caller (no path) and a decoded ``.json`` go into one shared memory
    file.  Module files travel in another (they are small).

    Raises:
        WrpError: The file changed after it was validated.
    """

    def __init__(self, prep):
        from .shared import SharedArea, layout  # noqa: PLC0415

        self.capture_fd = self._capture_fd(prep)
        self.modules, size = layout({name: memoryview(data).nbytes for name, data in prep.modules.items()})
        self.modules_area = SharedArea(size, "wrpkit-modules")
        for name, (off, n) in self.modules.items():
            if n:
                self.modules_area.view(off, n)[:] = np.frombuffer(memoryview(prep.modules[name]).cast("B"),
                                                                  dtype=np.uint8)

    @staticmethod
    def _capture_fd(prep) -> int:
        from .shared import memory_file  # noqa: PLC0415

        if prep.path is not None and prep.kind in ("wrp", "wrpk") and prep.source_stat is not None:
            try:
                fd = os.open(prep.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                raise WrpError(f"cannot open {prep.path} again for the replay process: {e.strerror}") from None
            st, was = os.fstat(fd), prep.source_stat
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (was.st_dev, was.st_ino, was.st_size,
                                                                      was.st_mtime_ns):
                os.close(fd)
                raise WrpError(f"{prep.path} changed after it was validated; nothing was replayed",
                               hint="Run the command again once the file is no longer being written.")
            return fd
        if prep.kind in ("wrp", "wrpk") and prep.source_buffer is not None:
            data = memoryview(prep.source_buffer).cast("B")
        else:
            data = memoryview(prep.image()).cast("B")
        fd = memory_file("wrpkit-capture")
        try:
            view = memoryview(data)
            done = 0
            while done < view.nbytes:
                done += os.write(fd, view[done:done + (1 << 30)])
        except OSError as e:
            os.close(fd)
            raise WrpError(f"cannot hand the capture to the replay process: {e.strerror}") from None
        return fd

    def close(self) -> None:
        if self.capture_fd >= 0:
            os.close(self.capture_fd)
            self.capture_fd = -1
        self.modules_area.close()


def whole_region(prep, name: str, arr: np.ndarray) -> np.ndarray:
    """The ``uint8`` bytes of binding ``name``'s whole region with input ``arr`` written in.

    An input of the whole region (no signature, or a signature covering it in
    C order) is its own bytes; a view binding's input is written through the
    signature over the region's captured bytes.
    """
    from ..formats import annotations as ann  # noqa: PLC0415
    from .runtime import writes_whole_region  # noqa: PLC0415

    size, sig = prep.sizes[name], prep.signature.get(name)
    arr = np.asarray(arr)
    if writes_whole_region(sig, arr.nbytes, size):
        return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    raw = initial_region(prep.model, name)
    ann.view_region(raw, sig)[...] = arr
    return raw


def initial_region(model, name: str) -> np.ndarray:
    """A copy of binding ``name``'s captured bytes (zeros where the file records none)."""
    rid = next(b.region_id for b in model.bindings if b.name == name)
    region = model.region_map()[rid]
    data = getattr(region, "data", None)
    if data is not None and region.has_initial_data and memoryview(data).nbytes == region.size:
        return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8).copy()
    return np.zeros(region.size, dtype=np.uint8)


class ReplayWorker:
    """A child process that loads a prepared capture once and replays it on request.

    Used for every contained replay: ``wrp replay`` (one request, then it
    ends), :class:`~wrpkit.run.runtime.IsolatedProgram` (one child per
    program, kept between runs), and the search for a crashing op (a child per
    prefix).  The child maps the capture itself (:class:`ChildSource`),
    inputs and results pass through shared memory files (one per request,
    sized to what is asked), statistics are computed in the child over Warp's
    memory, and requests go over a Unix socket pair.  Nothing is written to
    disk.  Warp's own output goes to a memory file of which an error quotes
    the tail.  A child that dies (a crash, a timeout, Ctrl-C, a Warp error)
    is gone: the next request starts a new one, from the file's data.

    Args:
        prep: The :class:`~wrpkit.run.runtime.Prepared` capture (validated here).
        device: The device string.
        prefix: Replay only the first ``prefix`` top-level ops (the crash search).
        source: A :class:`ChildSource` to share (not closed by :meth:`close`).
        max_memory: Bytes the child's load may allocate (None: the device's free memory).
    """

    def __init__(self, prep, device, prefix: Optional[int] = None, source: Optional[ChildSource] = None,
                 max_memory: Optional[int] = None):
        self.prep = prep
        self.device = str(device)
        self.prefix = prefix
        self.max_memory = max_memory
        verify_deferred(prep)
        self._own_source = source is None
        self.source = source
        self.proc: Optional[subprocess.Popen] = None
        self._sock = None
        self._out_fd = -1
        self._stage = None
        self._loaded = False  # the child was sent the current capture (``load``)
        self._warm = False  # the child answered ``warm``: Warp is imported
        self.closed = False
        #: End the child when the thread that started it ends (Linux): a killed ``wrp regress``
        #: worker leaves no replay running on its own.
        self.die_with_parent = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _spawn(self) -> None:
        import socket  # noqa: PLC0415

        from .shared import SharedArea, memory_file  # noqa: PLC0415

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._out_fd = memory_file("wrpkit-child-output")
        self._stage = SharedArea(64, "wrpkit-stage")
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "wrpkit.run.isolate", "--serve",
                                          str(theirs.fileno())] + (["--die-with-parent"] if self.die_with_parent
                                                                   else []),
                                         stdin=subprocess.DEVNULL, stdout=self._out_fd,
                                         stderr=self._out_fd, env=child_env(), pass_fds=(theirs.fileno(),))
        except OSError as e:
            ours.close()
            raise WrpRuntimeError(f"cannot start the replay process: {e}") from None
        finally:
            theirs.close()
        self._sock = ours
        self._loaded = self._warm = False

    def _send_load(self) -> None:
        """Hand the child the current capture (it releases the one it held, if any)."""
        from .shared import send  # noqa: PLC0415

        if self.source is None:
            self.source = ChildSource(self.prep)
        src = self.source
        self._loaded = True
        try:
            send(self._sock, {"op": "load", "device": self.device, "prefix": self.prefix,
                              "max_memory": self.max_memory, "modules": src.modules,
                              "modules_size": src.modules_area.size, "stage_size": self._stage.size},
                 [src.capture_fd, src.modules_area.fd, self._stage.fd])
        except OSError:
            pass  # the child ended at once: the first request says why

    def _start(self) -> None:
        self._spawn()
        self._send_load()

    def retarget(self, prep, device) -> None:
        """Replay another prepared capture from now on, in the same child if it is alive.

        The child keeps Warp imported and loads the new capture at the next
        run (releasing the previous one), so a run over many captures pays the
        process start and ``import warp`` once (``wrp regress``).
        """
        verify_deferred(prep)
        if self._own_source and self.source is not None:
            self.source.close()
        self.source, self._own_source = None, True
        self.prep, self.device = prep, str(device)
        self._loaded = False

    def warm(self, timeout: Optional[float] = 300.0) -> None:
        """Start the child if it is not running, and wait until it has imported Warp.

        A run's ``timeout`` then bounds loading and replaying only, not the
        process start (``wrp regress --timeout``).

        Raises:
            WrpTimeoutError: It was not ready within ``timeout`` seconds (it is stopped).
            WrpRuntimeError: It ended first.
        """
        from .shared import ChannelClosed, ChannelTimeout, receive, send  # noqa: PLC0415

        if self.alive and self._warm:
            return
        self.stop()
        self._spawn()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            send(self._sock, {"op": "warm", "device": self.device})
            answer, _ = receive(self._sock, deadline)
        except ChannelTimeout:
            self.stop()
            raise WrpTimeoutError(f"the replay process did not start within {timeout:g} s",
                                  hint="The machine may be overloaded; retry, or raise the timeout.") from None
        except (ChannelClosed, OSError):
            tail, returncode = self._output_tail(), self.proc.wait()
            self.stop()
            raise ended_without_result(returncode, tail) from None
        except BaseException:
            self.stop()
            raise
        if "error" in (answer or {}):
            self.stop()
            raise _error_from(answer["error"])
        self._warm = True

    def stage(self) -> str:
        """What the child was doing last (``"starting"``, ``"loading"``, ``"replaying"``, ``"reading"``, ``"idle"``)."""
        if self._stage is None:
            return "starting"
        text = bytes(self._stage.view()).rstrip(b"\0").decode("ascii", "replace")
        return text or "starting"

    def stop(self) -> None:
        """End the child (if any) and forget it."""
        proc, self.proc = self.proc, None
        self._loaded = self._warm = False
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for area in (self._stage,):
            if area is not None:
                area.close()
        self._stage = None
        if self._out_fd >= 0:
            os.close(self._out_fd)
            self._out_fd = -1

    def close(self) -> None:
        """End the child and release what it was handed."""
        self.closed = True
        self.stop()
        if self._own_source and self.source is not None:
            self.source.close()
            self.source = None

    def _output_tail(self) -> str:
        if self._out_fd < 0:
            return ""
        try:
            size = os.fstat(self._out_fd).st_size
            return os.pread(self._out_fd, 4000, max(0, size - 4000)).decode("utf-8", "replace")
        except OSError:
            return ""

    def run(self, inputs: Mapping, repeat: int, warmup: int = 0, timeout: Optional[float] = None, *,
            read_back=None, stats: Optional[Mapping] = None) -> ChildRun:
        """Replay in the child: set ``inputs`` (whole bindings as ``uint8``), replay, answer.

        Args:
            inputs: ``{binding: uint8 bytes of its whole region}``.
            repeat: Timed replays.
            warmup: Untimed replays first.
            timeout: Seconds for the request, loading included (None: no limit).
            read_back: Names of the bindings to return (None: every binding).
            stats: ``{binding: spec}`` (:func:`wrpkit.checks.binding_stats.view_spec`)
                to summarise in the child.

        Returns:
            A :class:`ChildRun` whose ``results`` are ``uint8`` views of a
            shared mapping (no copy), one per name of ``read_back``.

        Raises:
            ChildCrashed: The child died of a signal (it is gone).
            WrpTimeoutError: ``timeout`` ran out (the child was killed).
            WrpError: What the child reported (it is gone).
        """
        from .shared import ChannelClosed, ChannelTimeout, SharedArea, layout, receive, send  # noqa: PLC0415

        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.alive:
            self.stop()
            self._start()
        elif not self._loaded:
            self._send_load()  # warmed, or retargeted to another capture
        names = list(self.prep.sizes) if read_back is None else list(read_back)
        in_at, in_size = layout({n: np.asarray(a).nbytes for n, a in inputs.items()})
        out_at, out_size = layout({n: self.prep.sizes[n] for n in names})
        in_area = SharedArea(in_size, "wrpkit-inputs")
        out_area = SharedArea(out_size, "wrpkit-results")
        try:
            for n, (off, size) in in_at.items():
                if size:
                    in_area.view(off, size)[:] = np.ascontiguousarray(inputs[n]).reshape(-1).view(np.uint8)
            message = {"op": "run", "repeat": int(repeat), "warmup": int(warmup), "inputs": in_at,
                       "in_size": in_size, "outputs": out_at, "out_size": out_size, "stats": dict(stats or {})}
            try:
                try:
                    send(self._sock, message, [in_area.fd, out_area.fd])
                except OSError:
                    pass  # the child ended: the answer (none) says why
                answer, _ = receive(self._sock, deadline)
            except ChannelTimeout:
                self.stop()
                raise WrpTimeoutError(timeout_message(timeout), hint=TIMEOUT_HINT) from None
            except ChannelClosed:
                answer = None
            except BaseException:
                self.stop()  # Ctrl-C or an error here: never leave a child replaying on its own
                raise
            if answer is not None and "error" not in answer:
                results = {n: out_area.view(off, size) for n, (off, size) in out_at.items()}
                return ChildRun(results, answer["host_ms"], answer["device_ms"], answer.get("stats", {}))
        finally:
            in_area.close()
            out_area.close()  # the results' views keep its mapping
        proc = self.proc
        stage = self.stage()
        try:
            proc.wait(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        tail = self._output_tail()
        returncode = proc.poll()
        self.stop()
        if returncode is not None and returncode < 0:
            raise ChildCrashed(-returncode, stage, tail)
        if answer is not None:
            raise _error_from(answer["error"])
        raise ended_without_result(returncode if returncode is not None else -1, tail)


def replay_in_child(prep, device, inputs: Optional[Mapping] = None, repeat: int = 1, warmup: int = 0, *,
                    verify_checksums: bool = True, timeout: Optional[float] = None, read_back=True,
                    identify: bool = True, raw: bool = False, timeout_total: Optional[float] = None,
                    stats: Optional[Mapping] = None, max_memory: Optional[int] = None) -> ChildRun:
    """Load and replay a prepared capture in a child process (one request, then it ends).

    Args:
        prep: A :class:`wrpkit.run.runtime.Prepared` (validated; the child
            maps its source file itself, see :class:`ChildSource`).
        device: The device string.
        inputs: ``{binding: np.ndarray}``, already checked against the bindings.
        repeat: Timed replays.
        warmup: Untimed replays first.
        verify_checksums: Whether a ``.wrpk`` input's blob checksums were verified (said on a crash).
        timeout: Seconds for the whole child run (None: no limit).
        read_back: True: every binding; False: none; or the names to return.
        identify: On a crash, search for the op that crashed (more children).
        raw: Inputs are whole bindings as ``uint8`` bytes, and so are the results.
        timeout_total: The timeout to name in a timeout's message (default ``timeout``).
        stats: ``{binding: spec}`` to summarise in the child (``ChildRun.stats``).
        max_memory: Bytes the child's load may allocate (None: the device's free memory).

    Returns:
        A :class:`ChildRun`; its results are views of shared memory, typed per
        the signature unless ``raw``.

    Raises:
        WrpCrashError: The replay died of a fatal signal; the message names
            the op when it could be identified.
        WrpTimeoutError: ``timeout`` ran out (the child was killed).
        WrpError: Whatever the child raised (the same class and message).
    """
    from ..formats import annotations as ann  # noqa: PLC0415

    t0 = time.monotonic()
    whole = {n: (np.asarray(a) if raw else whole_region(prep, n, a)) for n, a in dict(inputs or {}).items()}
    names = list(prep.sizes) if read_back is True else [] if read_back is False else list(read_back)
    worker = ReplayWorker(prep, device, max_memory=max_memory)
    try:
        try:
            run = worker.run(whole, repeat, warmup, timeout, read_back=names, stats=stats)
        except WrpTimeoutError:
            raise WrpTimeoutError(timeout_message(timeout_total or timeout), hint=TIMEOUT_HINT) from None
        except ChildCrashed as crash:
            raise _located_crash(prep, crash, device, whole, repeat + warmup, timeout, t0, identify,
                                 verify_checksums, worker.source) from None
    finally:
        worker.close()
    if not raw:
        for n, arr in list(run.results.items()):
            sig = prep.signature.get(n)
            if sig is not None:
                run.results[n] = ann.view_region(arr, sig)
    return run


def _located_crash(prep, crash: ChildCrashed, device, inputs: Mapping, replays: int, timeout: Optional[float],
                   t0: float, identify: bool, verify_checksums: bool, source=None) -> WrpCrashError:
    """The :class:`WrpCrashError` of a crashed child; a crash while replaying is located by bisecting on
    prefixes (a child per prefix, on the same inputs), within what is left of ``timeout``."""
    left = None if timeout is None else timeout - (time.monotonic() - t0)
    op_index, searched = None, False
    n = len(prep.model.ops)
    if identify and crash.stage == "replaying" and n > 0:
        budget = IDENTIFY_BUDGET_S if left is None else min(IDENTIFY_BUDGET_S, left)
        op_index, searched = _identify_op(prep, device, inputs, replays, n, budget, source)
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
    verify_deferred(prep)
    whole = {name: whole_region(prep, name, a) for name, a in dict(inputs or {}).items()}
    source = ChildSource(prep)
    try:
        return _identify_op(prep, device, whole, replays, n, budget, source)
    finally:
        source.close()


def _identify_op(prep, device, inputs: Mapping, replays: int, n: int, budget: float, source=None) -> tuple:
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
        probe = ReplayWorker(prep, device, prefix=mid, source=source)
        try:
            probe.run(inputs, max(1, replays), 0, left, read_back=[])
            lo = mid
        except ChildCrashed:
            hi = mid
        except WrpError:
            return None, False  # the prefix did not run for another reason: no proof either way
        finally:
            probe.close()
    return hi - 1, True


def replay_in_worker(worker: ReplayWorker, inputs: Mapping, repeat: int, *, verify_checksums: bool = True,
                     timeout: Optional[float] = None, full_state: Optional[Mapping] = None,
                     read_back=None) -> ChildRun:
    """Replay in ``worker``; on a crash, find the op (children from ``full_state``) and raise it.

    Args:
        worker: The program's :class:`ReplayWorker`.
        inputs: Whole bindings (``uint8``) to set before the replay.
        repeat: Replays.
        verify_checksums: Whether a ``.wrpk`` input's blob checksums were verified (said on a crash).
        timeout: Seconds for the request (None: no limit).
        full_state: Every binding the program holds (what a new child needs to replay the same run).
        read_back: Names of the bindings to return (None: every binding).

    Raises:
        WrpCrashError, WrpTimeoutError, WrpError: As :func:`replay_in_child`.
    """
    t0 = time.monotonic()
    try:
        return worker.run(inputs, repeat, 0, timeout, read_back=read_back)
    except ChildCrashed as crash:
        raise _located_crash(worker.prep, crash, worker.device, dict(full_state or inputs), repeat, timeout, t0,
                             True, verify_checksums, worker.source) from None


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


def write_stage(d: Path, text: str) -> None:
    """Record the child's stage (``"loading"``, ``"replaying"``, ...) for a crash report."""
    with open(d / "stage", "w") as f:
        f.write(text)


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


# ---------------------------------------------------------------------------
# Child side (python -m wrpkit.run.isolate --serve FD)
# ---------------------------------------------------------------------------


def _error_info(e: WrpError) -> dict:
    return {"class": type(e).__name__, "message": e.message, "hint": e.hint,
            "problems": list(getattr(e, "problems", []))}


def _load_served(message: dict, fds: list):
    """``(warp, Program, stage area)``: the capture behind ``fds`` loaded as ``message`` says."""
    from ..environment import init_warp  # noqa: PLC0415
    from . import runtime  # noqa: PLC0415
    from .shared import SharedArea, map_readonly  # noqa: PLC0415

    capture_fd, modules_fd, stage_fd = fds[:3]
    stage = SharedArea(message["stage_size"], fd=stage_fd)
    # No banner, and on the CPU no "could not find the CUDA driver" warning.
    wp = init_warp(cpu_only=str(message["device"]).strip().lower() == "cpu")
    mm, _ = map_readonly(capture_fd)
    os.close(capture_fd)
    modules_area = SharedArea(message["modules_size"], fd=modules_fd)
    modules = {name: modules_area.view(off, n) for name, (off, n) in message["modules"].items()}
    # The bytes the parent validated (and refused what it must refuse, raw pointers included):
    # decoded, not validated again.
    prep = runtime.prepare(memoryview(mm) if mm is not None else b"", modules, verify_checksums=False,
                           allow_raw_pointers=True, _validated=True)
    prep._keep.append(modules_area)
    if message["prefix"] is not None:
        from ..formats import wrp1  # noqa: PLC0415

        prep.model.ops = prep.model.ops[:message["prefix"]]
        prep.wrp_bytes = wrp1.build_image(prep.model)[0]
        prep.modules_given, prep.deferred = True, []
    _set_stage(stage, "loading")
    prog = runtime.load_prepared(prep, message["device"], message.get("max_memory"))
    if prep.kind != "wrp" or message["prefix"] is not None:
        prep.wrp_bytes = None  # Warp copied what it needs: the re-encoded image is no longer held
    return wp, prog, stage


def _set_stage(stage, text: str) -> None:
    """Record the child's stage for a crash report (the parent reads the shared page after the child died)."""
    data = text.encode("ascii")[:stage.size]
    view = stage.view()
    view[:] = 0
    view[:len(data)] = np.frombuffer(data, dtype=np.uint8)


def _serve_run(wp, prog, message: dict, fds: list, stage) -> dict:
    """One request: inputs from the shared inputs area, replays, statistics, results into the results area."""
    from ..checks.binding_stats import region_stats  # noqa: PLC0415
    from .shared import SharedArea  # noqa: PLC0415

    in_area = SharedArea(message["in_size"], fd=fds[0])
    out_area = SharedArea(message["out_size"], fd=fds[1])
    try:
        for name, (off, n) in message["inputs"].items():
            prog._write_raw(prog._slot(name), in_area.view(off, n))
        _set_stage(stage, "replaying")
        host_ms, device_ms = _timed_replays(wp, prog, message["warmup"], message["repeat"])
        _set_stage(stage, "reading")
        summary = {}
        for name, spec in message["stats"].items():
            slot = prog._slot(name)
            region = slot.region if prog._is_cpu else prog._read_raw(slot)  # CPU: Warp's memory itself
            summary[name] = region_stats(region, spec)
        for name, (off, n) in message["outputs"].items():
            if n:
                slot = prog._slot(name)
                out_area.view(off, n)[:] = slot.region if prog._is_cpu else prog._read_raw(slot)
    finally:
        in_area.close()
        out_area.close()
    return {"host_ms": host_ms, "device_ms": device_ms, "stats": summary}


def _serve_main(sock_fd: int) -> int:
    """The :class:`ReplayWorker` child: answer every request until the socket closes.

    ``warm`` imports Warp and answers; ``load`` loads the capture it hands
    over (releasing the one loaded before: :meth:`ReplayWorker.retarget`);
    ``run`` replays the loaded one and answers.  An error is answered, then
    the child ends.
    """
    import gc  # noqa: PLC0415
    import socket  # noqa: PLC0415

    from .shared import ChannelClosed, receive, send  # noqa: PLC0415

    sock = socket.socket(fileno=sock_fd)
    wp = prog = stage = None
    while True:
        if stage is not None:
            _set_stage(stage, "idle")
        try:
            message, fds = receive(sock)
        except ChannelClosed:
            return 0
        op = message.get("op")
        try:
            if op == "warm":
                from ..environment import init_warp  # noqa: PLC0415

                init_warp(cpu_only=str(message["device"]).strip().lower() == "cpu")
                send(sock, {"ok": True})
            elif op == "load":
                if prog is not None:
                    prog.close()
                    prog = None
                    gc.collect()  # the previous capture's memory goes before the next one's is taken
                wp, prog, stage = _load_served(message, fds)
            elif op == "run" and prog is not None:
                send(sock, _serve_run(wp, prog, message, fds, stage))
            else:
                return 0
        except WrpError as e:
            send(sock, {"error": _error_info(e)})
            return e.exit_code


def _die_with_parent() -> None:
    """Be killed when the thread that started this process ends (Linux ``PR_SET_PDEATHSIG``)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # noqa: PLC0415

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        if "--die-with-parent" in sys.argv[3:]:
            _die_with_parent()
        sys.exit(_serve_main(int(sys.argv[2])))
    sys.exit(2)
