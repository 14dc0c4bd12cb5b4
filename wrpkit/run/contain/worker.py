"""Replay in a child process, so that a crash never takes the caller down.

A file can pass every record check and still crash the process that replays
it: it runs machine code on data (a stale HashGrid pointer, a launch past its
arrays, flipped bits in a kernel's code).  :class:`ReplayWorker` loads and
replays a prepared capture in a ``python -m wrpkit.run.contain.child`` child.  The
child maps the user's file itself (the very file this process validated,
checked by inode and modification time; no private copy), and loads it without
validating it again.  Inputs and results pass through anonymous shared memory
(``memfd``), requests over a Unix socket (:mod:`wrpkit.run.contain.shared`), and the
outputs' statistics are computed in the child over Warp's memory: nothing is
written to disk.  When the child dies of a fatal signal (SIGSEGV, SIGBUS,
SIGILL, SIGFPE, SIGABRT), the parent raises :class:`~wrpkit.errors.WrpCrashError`
(exit code :data:`~wrpkit.errors.EXIT_CRASH`) and has written nothing.

This module is the parent side of that protocol; the child is
:mod:`wrpkit.run.contain.child`, one contained replay is
:func:`wrpkit.run.contain.isolation.replay_in_child`, and the op a crash came from is
found and named by :mod:`wrpkit.run.contain.crash`.

Cost: :func:`~wrpkit.run.contain.isolation.replay_in_child` starts one child process per call (Python start,
``import warp``, load); an isolated :class:`~wrpkit.run.load.program.Program` keeps one
:class:`ReplayWorker` per program and pays that once.  A :class:`ReplayWorker` is a
:class:`~wrpkit.run.contain.served.ServedChild`, as the child of ``wrp trace``, ``wrp profile`` and
``wrp memcheck`` is (:mod:`wrpkit.debug.isolation`, handed the same :class:`ChildSource`).
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

import numpy as np

from ...deadline import Deadline
from ...records import field, record
from ...errors import WrpError, WrpFormatError, WrpTimeoutError
from .served import ServedChild, ended_without_result, error_from






@record
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


# ---------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------


def verify_deferred(prep) -> None:
    """Verify the region checksums of a ``.wrpk`` that :func:`~wrpkit.run.load.prepare.prepare` deferred.

    In-process, they are verified while Warp loads; the child loads a copy it
    does not verify again, so they are verified here first.

    Raises:
        WrpIntegrityError: A region's data does not match its SHA-256.
    """
    if prep is not None and prep.deferred:
        from ...formats.wrpk.blobs import BackgroundVerification  # noqa: PLC0415

        BackgroundVerification(prep.deferred).wait()
        prep.deferred = []


def start_verification(prep):
    """Start verifying the region checksums :func:`~wrpkit.run.load.prepare.prepare` deferred, on threads.

    Returns the :class:`~wrpkit.formats.wrpk.blobs.BackgroundVerification`
    (``wait()`` it before the data is used), or None when there is nothing
    to verify.  ``prep.deferred`` is emptied: the checks are now the caller's.
    """
    if prep is None or not prep.deferred:
        return None
    from ...formats.wrpk.blobs import BackgroundVerification  # noqa: PLC0415

    verification = BackgroundVerification(prep.deferred)
    prep.deferred = []
    return verification


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
        WrpFormatError: The file changed after it was validated (exit 3, as a file changed while being read).
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
                raise WrpFormatError(f"{prep.path} changed after it was validated; nothing was replayed",
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
    from ...formats import annotations as ann  # noqa: PLC0415
    from ..load.prepare import writes_whole_region  # noqa: PLC0415

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


class ReplayWorker(ServedChild):
    """A child process that loads a prepared capture once and replays it on request.

    Used for every contained replay: ``wrp replay`` (one request, then it
    ends), an isolated :class:`~wrpkit.run.load.program.Program` (one child per
    program, kept between runs), the second run that names a crashing op
    (``op_slots``), and ``wrp regress`` (one per worker thread, handed whole cases by
    :meth:`run_case`, its child forked from the run's zygote).  The child
    maps the capture itself (:class:`ChildSource`), inputs and results pass through shared memory files (one per request,
    sized to what is asked), statistics are computed in the child over Warp's
    memory, and requests go over a Unix socket pair.  Nothing is written to
    disk.  Warp's own output goes to a memory file of which an error quotes
    the tail.  A child that dies (a crash, a timeout, Ctrl-C, a Warp error)
    is gone: the next request starts a new one, from the file's data.

    Args:
        prep: The :class:`~wrpkit.run.load.prepare.Prepared` capture (validated here).
        device: The device string.
        op_slots: A shared memory file (:class:`~wrpkit.run.contain.shared.SharedArea` of
            :data:`wrpkit.op_slots.SLOT`.size bytes): the child replays a copy of the graph that
            writes the op slot before each op, through the C API, and the slot is copied there
            if it crashes (:func:`wrpkit.run.contain.crash.located_crash`).
        source: A :class:`ChildSource` to share (not closed by :meth:`close`).
        max_memory: Bytes the child's load may allocate (None: the device's free memory).
    """

    def __init__(self, prep, device, op_slots=None, source: Optional[ChildSource] = None,
                 max_memory: Optional[int] = None):
        super().__init__()
        self.prep = prep
        self.device = str(device)
        self.op_slots = op_slots
        self.max_memory = max_memory
        # A .wrpk's region data is hashed here while the child starts and loads it (as Warp
        # loads it in-process: region data is data, and module code was verified already);
        # nothing is replayed until every checksum matched (_verified).
        self._verification = start_verification(prep)
        self._refused: Optional[WrpError] = None  # what the verification raised, raised again at each run
        self._own_source = source is None
        self.source = source
        self._loaded = False  # the child was sent the current capture (``load``)
        self._warm = False  # the child answered ``warm``: Warp is imported
        self.closed = False

    def _send_load(self) -> None:
        """Hand the child the current capture (it releases the one it held, if any)."""
        from .shared import send  # noqa: PLC0415

        if self.source is None:
            self.source = ChildSource(self.prep)
        src = self.source
        self._loaded = True
        try:
            send(self._sock, {"op": "load", "device": self.device, "op_slots": self.op_slots is not None,
                              "max_memory": self.max_memory, "modules": src.modules,
                              "modules_size": src.modules_area.size, "stage_size": self._stage.size},
                 [src.capture_fd, src.modules_area.fd, self._stage.fd]
                 + ([self.op_slots.fd] if self.op_slots is not None else []))
        except OSError:
            pass  # the child ended at once: the first request says why

    def retarget(self, prep, device) -> None:
        """Replay another prepared capture from now on, in the same child if it is alive.

        The child keeps Warp imported and loads the new capture at the next
        run (releasing the previous one), so a run over many captures pays the
        process start and ``import warp`` once (``wrp regress``).
        """
        self._drop_verification()
        self._refused = None
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
        self.start()
        try:
            send(self._sock, {"op": "warm", "device": self.device})
            answer, _ = receive(self._sock, Deadline.after(timeout))
        except ChannelTimeout:
            self.stop()
            raise WrpTimeoutError(f"the replay process did not start within {timeout:g} s",
                                  hint="The machine may be overloaded; retry, or raise the timeout.") from None
        except (ChannelClosed, OSError):
            tail, returncode = self.output_tail(), self.proc.wait()
            self.stop()
            raise ended_without_result(returncode, tail) from None
        except BaseException:
            self.stop()
            raise
        if "error" in (answer or {}):
            self.stop()
            raise error_from(answer["error"])
        self._warm = True

    def stop(self) -> None:
        """End the child (if any) and forget it."""
        super().stop()
        self._loaded = self._warm = False

    def _verified(self) -> None:
        """Wait until the capture's deferred checksums are verified (this thread helps hash).

        Raises:
            WrpIntegrityError: A region's data does not match (the child, which may hold it, is stopped).
        """
        if self._refused is not None:  # the data did not match once: it never will be replayed
            raise self._refused
        verification, self._verification = self._verification, None
        if verification is not None:
            try:
                verification.wait()
            except WrpError as e:
                self._refused = e
                self.stop()
                raise
            except BaseException:  # Ctrl-C while hashing: the checks are not done, keep them for later
                self._verification = verification
                self.stop()
                raise

    def _drop_verification(self) -> None:
        """Finish a verification no replay will wait for, so that no thread reads the data after it is released."""
        verification, self._verification = self._verification, None
        if verification is not None:
            try:
                verification.wait()
            except WrpError:
                pass  # the capture is not replayed any more: nothing to refuse

    def close(self) -> None:
        """End the child and release what it was handed."""
        self.closed = True
        self._drop_verification()
        self.stop()
        if self._own_source and self.source is not None:
            self.source.close()
            self.source = None

    def run(self, inputs: Mapping, repeat: int, warmup: int = 0, deadline: Optional[Deadline] = None, *,
            read_back=None, stats: Optional[Mapping] = None, reset: bool = False, kernel_output=None) -> ChildRun:
        """Replay in the child: set ``inputs`` (whole bindings as ``uint8``), replay, answer.

        Args:
            inputs: ``{binding: uint8 bytes of its whole region}``.
            repeat: Timed replays.
            warmup: Untimed replays first.
            deadline: When to give up (None: no limit); the child's load counts, as wrp-replay's does.
            read_back: Names of the bindings to return (None: every binding).
            stats: ``{binding: spec}`` (:func:`wrpkit.checks.binding_stats.view_spec`)
                to summarise in the child.
            reset: Restore all of the child's graph memory to the captured bytes first
                (:meth:`~wrpkit.run.load.program.Program.reset`; a child started now is fresh anyway).
            kernel_output: A :class:`~wrpkit.run.contain.spawn.KernelOutput`: the replays' kernel output
                (``wp.printf``) goes there, all of it before this returns; None: it stays in the
                child's output, with Warp's messages.

        Returns:
            A :class:`ChildRun` whose ``results`` are ``uint8`` views of a
            shared mapping (no copy), one per name of ``read_back``.

        Raises:
            ChildCrashed: The child died of a signal (it is gone).
            WrpTimeoutError: ``deadline`` passed (the child was killed).
            WrpError: What the child reported (it is gone).
        """
        from .shared import SharedArea, layout  # noqa: PLC0415

        if not self.alive:
            self.stop()  # forgets what the child was sent: a new one is sent the capture now
            self.start()
            self._send_load()
        elif not self._loaded:
            self._send_load()  # warmed, or retargeted to another capture
        self._verified()  # the child loads meanwhile; it replays nothing before this
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
                       "in_size": in_size, "outputs": out_at, "out_size": out_size, "stats": dict(stats or {}),
                       "reset": bool(reset), "kernel_output": kernel_output is not None}
            fds = [in_area.fd, out_area.fd] + ([kernel_output.fd()] if kernel_output is not None else [])
            try:
                answer, _, deadline = self.ask(message, fds, deadline)
            finally:
                if kernel_output is not None:
                    kernel_output.flush()  # the kernels' lines, before the caller says anything of its own
            if answer is not None and "error" not in answer:
                results = {n: out_area.view(off, size) for n, (off, size) in out_at.items()}
                return ChildRun(results, answer["host_ms"], answer["device_ms"], answer.get("stats", {}))
        finally:
            in_area.close()
            out_area.close()  # the results' views keep its mapping
        raise self.ended(answer, deadline)

    def run_case(self, job: dict, timeout: Optional[float] = None, files: int = -1) -> tuple:
        """``wrp regress``: read, validate, replay and compare one case in the child.

        The child (:func:`wrpkit.run.regress.case.serve_case`) reads the
        case's files itself and says when it has validated them; ``timeout``
        counts from then (loading, replaying and comparing), as :meth:`run`'s
        bounds a load and a replay.  A remote worker's case comes without
        its files, and ``files`` is the memory file that holds them
        (:func:`~wrpkit.run.regress.case.payload_to_file`).  Call :meth:`warm` first.

        Returns:
            ``(answer, fds)``: ``answer["result"]`` holds the case's verdict fields.

        Raises:
            ChildCrashed: The child died of a signal (it is gone).
            WrpTimeoutError: ``timeout`` ran out (the child was killed).
            WrpError: The child ended without an answer (it is gone).
        """
        self._drop_verification()  # a case's child reads and checks the case's files itself
        if not self.alive:
            self.warm()
        clock = None if timeout is None else Deadline(timeout, started=False)  # started once validated
        answer, fds, deadline = self.ask({"op": "case", "job": job, "stage_size": self._stage.size},
                                          [self._stage.fd] + ([files] if files >= 0 else []), clock)
        if answer is not None and "error" not in answer:
            return answer, fds
        raise self.ended(answer, deadline)
