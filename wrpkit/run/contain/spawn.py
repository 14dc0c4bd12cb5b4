"""Starting wrpkit's child processes, and starting them before they are needed.

Every child is ``python -m wrpkit.run.contain.child --serve FD`` (:data:`CHILD_MODULE`): it talks
over one end of a Unix socket pair and prints into a memory file (:func:`spawn_served`), and runs
whatever job it is asked (:mod:`wrpkit.run.contain.child`).

A child's own start (the interpreter, ``import warp`` and Warp's initialisation) costs about as
much as the parent's start and its validation of the capture, and does not depend on them.  So a
command starts what it will need first and takes it later, through the one registry here:
:func:`hold` keeps a started thing under a key with the function that ends it,
:func:`take_prestarted` hands it over, and :func:`discard_prestarted` ends whatever nobody took (at
the latest when the process exits).  Three things are started ahead that way: a replay child
(:func:`prestart_child`, ``wrp replay`` on the Python engine), ``wrp regress``'s warm process
(:func:`wrpkit.run.contain.zygote.prestart`) and ``wrp-replay``
(:func:`wrpkit.run.replay.engines.prestart_replayer`), with the kernels' output it was given
(:func:`early_kernel_output`).  This module imports nothing heavy (no
numpy), so that it can run before anything else.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from ...errors import WrpRuntimeError

#: The module every child runs (``python -m``).
CHILD_MODULE = "wrpkit.run.contain.child"

#: ``{key: (what was started, the function that ends it)}``: started ahead (:func:`hold`), not yet taken.
_prestarted: dict = {}


def child_env() -> dict:
    """The environment of a child: wrpkit importable, and no faulthandler dump (the parent reports)."""
    env = dict(os.environ)
    env.pop("PYTHONFAULTHANDLER", None)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[3])]  # above wrpkit/
                                         + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def child_channel() -> tuple:
    """``(our socket, the child's socket, an output memory file)``: what a served child is started with.

    :func:`spawn_served` passes the child's socket to a new process; a
    ``wrp regress`` worker passes it to a fork of the zygote instead.
    """
    import socket  # noqa: PLC0415

    from .shared import memory_file  # noqa: PLC0415

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return ours, theirs, memory_file("wrpkit-child-output")


def spawn_served(module: str, extra: tuple = (), env: Optional[dict] = None) -> tuple:
    """Start ``python -m module --serve FD [extra]``, FD being one end of a new Unix socket pair.

    ``env``: variables added to the child's environment (``wrp memcheck`` preloads its allocator).

    The child has wrpkit importable (:func:`child_env`), no stdin, and its
    stdout and stderr in a memory file (read with :func:`output_tail`), so
    Warp's output never reaches the terminal and nothing is written to disk.

    Returns:
        ``(process, our end of the socket, the output's fd)``.

    Raises:
        WrpRuntimeError: The process could not be started.
    """
    ours, theirs, out_fd = child_channel()
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, "--serve", str(theirs.fileno()), *extra],
                                stdin=subprocess.DEVNULL, stdout=out_fd, stderr=out_fd, env={**child_env(), **(env or {})},
                                pass_fds=(theirs.fileno(),))
    except OSError as e:
        ours.close()
        os.close(out_fd)
        from ...limits import is_resource_error, resource_error  # noqa: PLC0415

        if is_resource_error(e):  # no process, file or memory left for it: the limit in words
            raise resource_error(e, "start the replay process") from None
        raise WrpRuntimeError(f"cannot start the replay process: {e}") from None
    finally:
        theirs.close()
    return proc, ours, out_fd


def output_tail(out_fd: int, size: int = 4000) -> str:
    """The last ``size`` bytes a child printed into its output memory file (:func:`spawn_served`)."""
    if out_fd < 0:
        return ""
    try:
        end = os.fstat(out_fd).st_size
        return os.pread(out_fd, size, max(0, end - size)).decode("utf-8", "replace")
    except OSError:
        return ""


class KernelOutput:
    """Where the kernels' own output of a replay in another process goes: a pass-through, never formatted.

    Kernel code prints (``wp.printf``, ``print`` in a kernel, CUDA's device
    ``printf``) with C's stdio, to its process's file descriptor 1.  In a
    child that is the output memory file that Warp's messages go to
    (:func:`spawn_served`), so a replay in a child would print nothing.  A
    child asked to show it (``run`` requests of :mod:`wrpkit.run.contain.child`,
    :func:`wrpkit.debug.isolation.run_in_child`, ``wrp-replay
    --kernel-output-fd``) points its fd 1 at :meth:`fd` while its replays
    run, sends Warp's own Python-level messages elsewhere, and flushes C's
    buffer before it answers, so every kernel line is out before the caller
    prints anything of its own.

    This is the one place that decides where those bytes go, and it decides
    nothing about them: the command line (or the Python API) names a stream,
    and the child writes into it.  A stream with a file descriptor (a
    terminal, a pipe, a file) is written directly by the child, as it runs,
    through a copy of that descriptor; any other (``io.StringIO``, click's test
    runner, pytest's ``capsys``) gets what the child wrote into a memory file,
    copied by :meth:`flush` once the request is answered.  ``stream=None``
    discards it (``/dev/null``).

    Args:
        stream: A file object (text or binary), or None to discard.
    """

    def __init__(self, stream):
        self.stream = stream
        self._fd = -1
        self._spooled = False
        self._copied = 0

    def fd(self) -> int:
        """The descriptor to hand the child (the same one each time; this object closes it)."""
        self._flush_stream()  # what this process printed before comes first
        if self._fd < 0:
            if self.stream is None:
                self._fd = os.open(os.devnull, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            else:
                try:
                    self._fd = os.dup(self.stream.fileno())
                except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
                    from .shared import memory_file  # noqa: PLC0415

                    self._fd = memory_file("wrpkit-kernel-output")
                    self._spooled = True
        return self._fd

    def flush(self) -> None:
        """Copy into the stream what a child wrote since the last call (for a stream without a descriptor)."""
        if not self._spooled or self._fd < 0:
            return
        end = os.fstat(self._fd).st_size
        while self._copied < end:
            data = os.pread(self._fd, min(end - self._copied, 1 << 20), self._copied)
            if not data:
                break
            self._copied += len(data)
            buffer = getattr(self.stream, "buffer", None)
            try:
                if buffer is not None:
                    self.stream.flush()
                    buffer.write(data)
                else:
                    self.stream.write(data.decode("utf-8", "replace"))
            except (OSError, ValueError):  # a closed stream: the kernels' output is dropped, the replay stands
                self._copied = end
                break
        self._flush_stream()

    def close(self) -> None:
        """Copy what is left (:meth:`flush`) and close the descriptor."""
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _flush_stream(self) -> None:
        flush = getattr(self.stream, "flush", None)
        if flush is not None:
            try:
                flush()
            except (OSError, ValueError):
                pass



#: The key :func:`early_kernel_output` holds its :class:`KernelOutput` under (:func:`hold`).
EARLY_OUTPUT_KEY = "kernel-output"


def early_kernel_output(stream) -> "KernelOutput":
    """The :class:`KernelOutput` for ``stream`` that a replayer started before the command line was
    parsed is given (``wrp replay``, :mod:`wrpkit.cli.replay_start`), held among the things started
    ahead; :func:`kernel_output_for` hands it to the command."""
    output = KernelOutput(stream)
    hold(EARLY_OUTPUT_KEY, output, KernelOutput.close)
    return output


def kernel_output_for(stream) -> "KernelOutput":
    """A :class:`KernelOutput` for ``stream``: the one made early for it (so that a replayer started
    then is handed the same descriptor), else a new one."""
    early = take_prestarted(EARLY_OUTPUT_KEY)
    if early is not None and early.stream is stream:
        return early
    if early is not None:
        early.close()
    return KernelOutput(stream)


def kernel_output_of(target) -> tuple:
    """``(KernelOutput or None, owned)`` for a ``kernel_output=`` argument.

    ``target``: a :class:`KernelOutput` (the caller's, left open), a stream
    (a :class:`KernelOutput` made for it: ``owned``, the callee closes it),
    ``"stdout"`` (this process's ``sys.stdout`` now), or None (the kernels'
    output is not shown: it stays in the child's output, as Warp's messages do).
    """
    if target is None or isinstance(target, KernelOutput):
        return target, False
    if isinstance(target, str) and target == "stdout":
        target = sys.stdout
    return KernelOutput(target), True


def hold(key, started, end) -> None:
    """Keep ``started`` (a process started ahead) under ``key`` for :func:`take_prestarted`; ``end(started)``
    ends it if nobody takes it (:func:`discard_prestarted`, or this process's exit).  One held before
    under the same key is ended first."""
    discard_prestarted(key)
    if not _prestarted:
        atexit.register(discard_prestarted)
    _prestarted[key] = (started, end)


def held(key):
    """What is held under ``key``, still held (None if nothing is)."""
    entry = _prestarted.get(key)
    return None if entry is None else entry[0]


def take_prestarted(key):
    """What :func:`hold` keeps under ``key``, now the caller's (to use or end); None if nothing is."""
    entry = _prestarted.pop(key, None)
    return None if entry is None else entry[0]


def discard_prestarted(key=None) -> None:
    """End what is held under ``key`` (None: everything held) that nobody took."""
    keys = list(_prestarted) if key is None else [key]
    for k in keys:
        entry = _prestarted.pop(k, None)
        if entry is not None:
            started, end = entry
            end(started)


def prestart_child(message: dict, extra: tuple = ()) -> None:
    """Start a child now and send it ``message`` (it answers nothing), for the next
    :class:`~wrpkit.run.contain.served.ServedChild` of this process to take.

    Best effort: a child that cannot be started is simply not there, and the
    one that is needed is started when it is.
    """
    from .shared import send  # noqa: PLC0415

    key = ("child", tuple(extra))
    if held(key) is not None:
        return
    try:
        started = spawn_served(CHILD_MODULE, extra)
    except WrpRuntimeError:
        return
    try:
        send(started[1], message)
    except OSError:
        end_started(started)
        return
    hold(key, started, end_started)


def end_started(started: tuple) -> None:
    """End a child :func:`spawn_served` started (``(process, socket, output fd)``) and reap it."""
    proc, sock, out_fd = started
    # Kill before closing the socket: a child that has finished its preload would
    # otherwise see the close and exit by itself, and which of the two happens would
    # depend on how far its ``import warp`` got.
    if proc.poll() is None:
        proc.kill()
    sock.close()
    proc.wait()
    os.close(out_fd)
