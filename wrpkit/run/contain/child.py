"""Every wrpkit child process: ``python -m wrpkit.run.contain.child --serve FD`` (or ``--zygote FD``).

The one entry point of the child side.  ``--serve FD`` answers requests over the socket ``FD``
until it closes (:func:`_serve_main`), whatever its parent
(:class:`~wrpkit.run.contain.served.ServedChild`) asks:

* ``preload`` / ``warm``: import and start Warp ahead of the work (``warm`` answers when done);
* ``load`` then ``run``: replay the capture the parent validated (:class:`~wrpkit.run.contain.worker.ReplayWorker`);
* ``case``: a whole ``wrp regress`` case (:func:`wrpkit.run.regress.case.serve_case`);
* ``job``: a job of a higher layer (``wrp trace``, ``wrp profile``, ``wrp memcheck``), run by the
  module the request names (``entry``, under ``wrpkit``: its ``serve_job``), so that no module here
  imports a layer above it.

``--zygote FD`` is ``wrp regress``'s warm process instead (:func:`_zygote_main`, parent side
:class:`~wrpkit.run.contain.zygote.Zygote`): it imports Warp once and forks children that serve
the same loop.  Every job receives its capture with :func:`received_capture` and reports its
stage with :func:`set_stage` and its error with :func:`error_info` the same way.
"""

from __future__ import annotations

import os
import select
import signal
import sys

import numpy as np

from ...errors import CRASH_STAGES, WrpError, WrpRuntimeError




# ---------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------


class KernelOutputShown:
    """Show the kernels' own output (C stdio's stdout: ``wp.printf``, CUDA's ``printf``) on ``fd``.

    The parent's :class:`~wrpkit.run.contain.spawn.KernelOutput` handed ``fd`` over.  Each
    ``with`` block points this process's file descriptor 1 at it, and Python's
    ``sys.stdout`` at ``sys.stderr`` meanwhile, so that Warp's own messages (a
    module's "load on device ... took ..." line) stay in the child's output
    memory file and never pass for the kernels'; on leaving, C's buffer is
    flushed (every kernel line is out before the answer is sent) and fd 1 is
    the output memory file again.  A block entered while another is open
    does nothing more.  ``fd`` None: nothing is diverted.
    """

    def __init__(self, fd):
        self.fd = fd
        self._depth = 0
        self._saved = -1
        self._python_stdout = None

    def __call__(self):
        return self

    def __enter__(self):
        self._depth += 1
        if self.fd is None or self._depth > 1:
            return self
        sys.stdout.flush()
        _c_flush()
        self._saved = os.dup(1)
        os.dup2(self.fd, 1)
        self._python_stdout, sys.stdout = sys.stdout, sys.stderr
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self.fd is None or self._depth > 0 or self._saved < 0:
            return False
        _c_flush()  # the kernels' lines C stdio still buffers (CUDA's are out at each synchronisation)
        sys.stdout = self._python_stdout
        os.dup2(self._saved, 1)
        os.close(self._saved)
        self._saved = -1
        return False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _c_flush() -> None:
    """``fflush(NULL)``: write out what C stdio buffers (the kernels' printf)."""
    import ctypes  # noqa: PLC0415

    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------------------
# Child side (python -m wrpkit.run.contain.child --serve FD)
# ---------------------------------------------------------------------------


def error_info(e: WrpError) -> dict:
    """``e`` as JSON values, for the parent to raise again (:func:`wrpkit.run.contain.worker.error_from`).

    Its attributes of plain values travel too (an out-of-memory error's ``requested`` and
    ``device``, a crash's op), so that the parent's error says as much as the child's.
    """
    attrs = {k: v for k, v in vars(e).items()
             if k not in ("message", "hint", "problems") and isinstance(v, (bool, int, float, str, type(None)))}
    return {"class": type(e).__name__, "message": e.message, "hint": e.hint,
            "problems": list(getattr(e, "problems", [])), "attrs": attrs}


def received_capture(message: dict, capture_fd: int, modules_fd: int):
    """The :class:`~wrpkit.run.load.prepare.Prepared` capture a parent handed over (:class:`~wrpkit.run.contain.worker.ChildSource`).

    The capture's file (the user's own, or a memory file) is mapped here and
    ``capture_fd`` closed; the module files are read in place from their
    memory file.  The bytes are the ones the parent validated (and refused
    what it must refuse, raw pointers included): decoded, not validated again.

    Args:
        message: Names ``modules`` (``{name: (offset, size)}``) and ``modules_size``.
        capture_fd: The capture's descriptor.
        modules_fd: The module files' memory file.
    """
    from ..load.prepare import prepare  # noqa: PLC0415
    from .shared import SharedArea, map_readonly  # noqa: PLC0415

    from ..load.file_guard import guard_received  # noqa: PLC0415

    mm, size = map_readonly(capture_fd)
    guard_received(mm, size, capture_fd)  # truncated by another program meanwhile: exit 3 naming it, no SIGBUS
    os.close(capture_fd)
    modules_area = SharedArea(message["modules_size"], fd=modules_fd)
    modules = {name: modules_area.view(off, n) for name, (off, n) in message["modules"].items()}
    prep = prepare(memoryview(mm) if mm is not None else b"", modules, verify_checksums=False,
                   allow_raw_pointers=True, _validated=True)
    prep._keep.append(modules_area)
    return prep


def _load_served(message: dict, fds: list):
    """``(loaded capture, stage area)``: the capture behind ``fds`` loaded as ``message`` says, behind the
    one interface of :mod:`wrpkit.run.replay.loaded`.

    With ``op_slots``, a fourth descriptor: the memory file the op slot is copied into as the child
    dies; the capture is then run by the C API (:class:`~wrpkit.run.replay.loaded.NativeLoaded`, a
    graph with an op slot before each op), for the one run that names the op a crashed replay died
    in (:func:`wrpkit.run.contain.crash.located_crash`).  Else by Warp's Python.
    """
    from ..warp_bridge.start import init_warp  # noqa: PLC0415
    from ..load.program import load_prepared  # noqa: PLC0415
    from ..replay.loaded import NativeLoaded, WarpLoaded  # noqa: PLC0415
    from .shared import SharedArea  # noqa: PLC0415

    capture_fd, modules_fd, stage_fd = fds[:3]
    stage = SharedArea(message["stage_size"], fd=stage_fd)
    prep = received_capture(message, capture_fd, modules_fd)
    if message.get("op_slots"):
        set_stage(stage, "loading")
        # The parent validated the capture and refused what it must (raw pointers included).
        loaded = NativeLoaded.open(prep.image(), dict(prep.modules), message["device"], op_slots=True,
                                   allow_raw_pointers=True)
        loaded.guard_op_slot(fds[3])
        return loaded, stage
    # No banner, and on the CPU no "could not find the CUDA driver" warning.
    init_warp(cpu_only=str(message["device"]).strip().lower() == "cpu")
    set_stage(stage, "loading")
    prog = load_prepared(prep, message["device"], message.get("max_memory"))
    if prep.kind != "wrp":
        prep.wrp_bytes = None  # Warp copied what it needs: the re-encoded image is no longer held
    return WarpLoaded(prog), stage


def set_stage(stage, text: str) -> None:
    """Record the child's stage for a crash report (the parent reads the shared page after the child died).

    Raises:
        ValueError: ``text`` is not a key of :data:`~wrpkit.errors.CRASH_STAGES`, which words it.
    """
    if text not in CRASH_STAGES:
        raise ValueError(f"unknown crash stage {text!r}: add it to wrpkit.errors.CRASH_STAGES")
    data = text.encode("ascii")[:stage.size]
    view = stage.view()
    view[:] = 0
    view[:len(data)] = np.frombuffer(data, dtype=np.uint8)


def _serve_run(loaded, message: dict, fds: list, stage) -> dict:
    """One request: inputs from the shared inputs area, replays, statistics, results into the results area.

    With ``kernel_output``, a third descriptor: where the replays' kernel output goes
    (:class:`KernelOutputShown`), every replay's, warmups included, as Warp's own replay prints it.
    """
    from ...checks.binding_stats import region_stats  # noqa: PLC0415
    from .shared import SharedArea  # noqa: PLC0415

    in_area = SharedArea(message["in_size"], fd=fds[0])
    out_area = SharedArea(message["out_size"], fd=fds[1])
    shown = KernelOutputShown(fds[2] if message.get("kernel_output") and len(fds) > 2 else None)
    try:
        if message.get("reset"):
            # The memory no binding names too, which only this process can reach (Warp's route: a
            # slotted run is a fresh load).
            loaded.reset()
        for name, (off, n) in message["inputs"].items():
            loaded.write(name, in_area.view(off, n))
        set_stage(stage, "replaying")
        with shown:
            host_ms, device_ms = loaded.timed(message["warmup"], message["repeat"])
            loaded.all_ran()  # a crash from now on comes after the last op (said so where a slot is kept)
        set_stage(stage, "reading")
        summary = {}
        for name, spec in message["stats"].items():
            summary[name] = region_stats(loaded.region(name), spec)  # CPU: Warp's memory itself
        for name, (off, n) in message["outputs"].items():
            if n:
                out_area.view(off, n)[:] = loaded.region(name)
    finally:
        in_area.close()
        out_area.close()
        shown.close()
    return {"host_ms": host_ms, "device_ms": device_ms, "stats": summary}


def replay_here(prep, device: str, state: dict, stage) -> tuple:
    """Load ``prep`` and replay it once in this process (a ``wrp regress`` case).

    Args:
        prep: The case, validated here.
        device: The device string.
        state: Whole bindings' bytes to write first.
        stage: The shared page where the stage is recorded (the parent reads it after a crash).

    Returns:
        ``({binding: uint8 bytes}, host ms of the replay)``.
    """
    import gc  # noqa: PLC0415

    from ..warp_bridge.start import init_warp  # noqa: PLC0415
    from ..load.program import load_prepared  # noqa: PLC0415

    from ..replay.loaded import WarpLoaded  # noqa: PLC0415

    init_warp(cpu_only=str(device).strip().lower() == "cpu")
    set_stage(stage, "loading")
    loaded = WarpLoaded(load_prepared(prep, device))
    try:
        for name, data in state.items():
            loaded.write(name, data)
        set_stage(stage, "replaying")
        host_ms, _ = loaded.timed(0, 1)
        set_stage(stage, "reading")
        raw = {n: np.array(loaded.region(n), copy=True) for n in prep.sizes}
    finally:
        loaded.close()
        gc.collect()  # this capture's memory goes before the next one's is taken
    return raw, (host_ms[0] if host_ms else None)


def _serve_main(sock_fd: int) -> int:
    """The :class:`~wrpkit.run.contain.worker.ReplayWorker` child: answer every request until the socket closes.

    ``warm`` imports Warp and answers; ``load`` loads the capture it hands
    over (releasing the one loaded before: :meth:`ReplayWorker.retarget`);
    ``run`` replays the loaded one and answers; ``case`` runs a whole
    ``wrp regress`` case here (:func:`wrpkit.run.regress.case.serve_case`:
    its verdict is the answer, and the child goes on).  An error is answered,
    then the child ends.
    """
    import gc  # noqa: PLC0415
    import socket  # noqa: PLC0415

    from .shared import ChannelClosed, SharedArea, receive, send  # noqa: PLC0415

    sock = socket.socket(fileno=sock_fd)
    loaded = stage = None
    while True:
        if stage is not None:
            set_stage(stage, "idle")
        try:
            message, fds = receive(sock)
        except ChannelClosed:
            return 0
        op = message.get("op")
        try:
            if op == "preload":  # spawn.prestart: ready Warp while the parent is still reading the file
                from ..warp_bridge.start import init_warp  # noqa: PLC0415

                init_warp(cpu_only=str(message["device"]).strip().lower() == "cpu")
                from ...checks import binding_stats  # noqa: F401, PLC0415  (what a load and a run import)
                from ..load import prepare, program  # noqa: F401, PLC0415
                from ..replay import loaded as _loaded  # noqa: F401, PLC0415
            elif op == "warm":
                from ..warp_bridge.start import init_warp  # noqa: PLC0415

                init_warp(cpu_only=str(message["device"]).strip().lower() == "cpu")
                # Warp and its imports stay for the child's life: the collection after each
                # released capture (``load``) then walks only what came later (30 ms less a case).
                gc.freeze()
                send(sock, {"ok": True})
            elif op == "load":
                if loaded is not None:
                    loaded.close()
                    loaded = None
                    gc.collect()  # the previous capture's memory goes before the next one's is taken
                loaded, stage = _load_served(message, fds)
            elif op == "run" and loaded is not None:
                send(sock, _serve_run(loaded, message, fds, stage))
            elif op == "job":  # a higher layer's job, run by the module the request names
                send(sock, {"result": _serve_job(message, fds)})
            elif op == "case":  # wrp regress: a whole case, read and validated here
                from ..regress.case import payload_from_file, serve_case  # noqa: PLC0415

                if stage is None:
                    stage = SharedArea(message["stage_size"], fd=fds[0])
                else:
                    os.close(fds[0])
                job = message["job"]
                if "payload_at" in job:  # a remote worker's case: its files' bytes in a memory file
                    try:
                        job = payload_from_file(job, fds[1])
                    finally:
                        os.close(fds[1])
                answer, out_fds = serve_case(job, lambda *a: replay_here(*a, stage),
                                             lambda: send(sock, {"validated": True}))
                try:
                    send(sock, answer, out_fds)
                finally:
                    for f in out_fds:
                        os.close(f)
            else:
                return 0
        except WrpError as e:
            send(sock, {"error": error_info(e)})
            return e.exit_code


def _serve_job(message: dict, fds: list):
    """Run a ``job`` request: its module's ``serve_job(message, fds, stage)`` (``fds[0]`` is the stage
    page; the rest are the job's), with ``stage(text)`` recording the stage; its result (JSON values).

    Raises:
        WrpRuntimeError: The request names no module of wrpkit that serves jobs.
    """
    import importlib  # noqa: PLC0415

    from .shared import SharedArea  # noqa: PLC0415

    entry = str(message.get("entry", ""))
    if not entry.startswith("wrpkit."):
        raise WrpRuntimeError(f"a child job must be served by a module of wrpkit, not {entry!r}")
    serve = getattr(importlib.import_module(entry), "serve_job", None)
    if serve is None:
        raise WrpRuntimeError(f"{entry} serves no child job (it has no serve_job)")
    stage = SharedArea(message["stage_size"], fd=fds[0])
    return serve(message, fds[1:], lambda text: set_stage(stage, text))


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


# ---------------------------------------------------------------------------
# The zygote's side (python -m wrpkit.run.contain.child --zygote FD [--die-with-parent])
# ---------------------------------------------------------------------------


def _has_cuda_driver() -> bool:
    """Whether the CUDA driver library can be loaded (loading it initialises nothing)."""
    import ctypes  # noqa: PLC0415

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading  # noqa: PLC0415

        return threading.active_count()


def _reap(sock) -> None:
    """Report every fork that has ended: ``{"exit": pid, "code": exit code or -signal}``."""
    from .shared import send  # noqa: PLC0415

    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _in_fork(fds: list, zygote_pid: int, die_with_parent: bool) -> int:
    """The fork's life: output to the worker's memory file, then serve its socket (never returns)."""
    code = 1
    try:
        sock_fd, out_fd = fds[0], fds[1]
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        if die_with_parent:
            _die_with_parent()
        if os.getppid() != zygote_pid:  # the zygote ended before this fork could follow it
            os._exit(1)
        code = _serve_main(sock_fd)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001  (a fork never returns into the zygote's loop)
        import traceback  # noqa: PLC0415

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _zygote_main(ctl_fd: int, die_with_parent: bool) -> int:
    """Import what a replay child needs, then fork one per request until the control socket closes."""
    import gc  # noqa: PLC0415
    import socket  # noqa: PLC0415

    import warp  # noqa: F401,PLC0415  (the cost every fork is spared)

    from ..load import prepare, program  # noqa: F401,PLC0415
    from ..replay import loaded  # noqa: F401,PLC0415
    from ..regress import case as regress_case  # noqa: F401,PLC0415
    from ...checks import binding_stats, compare  # noqa: F401,PLC0415
    from .shared import ChannelClosed, receive, send  # noqa: PLC0415

    if not _has_cuda_driver():
        # No driver, so no CUDA state a fork could inherit: Warp's CPU start-up is done once here.
        from ..warp_bridge.start import init_warp  # noqa: PLC0415

        init_warp(cpu_only=True)

    # What was imported stays: the collector never walks it again (a fork's collection of a
    # released capture costs microseconds, not 30 ms), and its pages stay shared with the forks.
    gc.collect()
    gc.freeze()
    sock = socket.socket(fileno=ctl_fd)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd is written
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)  # a full pipe already says "reap"
    send(sock, {"ready": os.getpid()})
    me = os.getpid()
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            _reap(sock)
        if sock not in ready:
            continue
        try:
            message, fds = receive(sock)
        except ChannelClosed:
            return 0
        if message.get("op") != "fork" or len(fds) < 2:
            for f in fds:
                os.close(f)
            send(sock, {"error": "not a fork request"})
            continue
        if _threads() != 1:
            for f in fds:
                os.close(f)
            send(sock, {"error": f"the warm process has {_threads()} threads; it forks only with one"})
            continue
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for f in (wake_r, wake_w):
                os.close(f)
            sock.close()
            _in_fork(fds, me, die_with_parent)
        for f in fds:
            os.close(f)
        try:
            pidfd = os.pidfd_open(pid)  # it cannot have been reaped yet: only this loop reaps
        except OSError as e:  # a kernel without pidfds (before Linux 5.3): no fork it could not kill
            os.kill(pid, signal.SIGKILL)
            send(sock, {"error": f"pidfd_open: {e.strerror}"})
            continue
        send(sock, {"pid": pid}, [pidfd])
        os.close(pidfd)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("--serve", "--zygote") or not sys.argv[2].isdigit():
        sys.exit(2)
    if "--die-with-parent" in sys.argv[3:]:
        _die_with_parent()
    if sys.argv[1] == "--zygote":
        sys.exit(_zygote_main(int(sys.argv[2]), "--die-with-parent" in sys.argv[3:]))
    sys.exit(_serve_main(int(sys.argv[2])))
