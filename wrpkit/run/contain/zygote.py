"""One warm process per ``wrp regress`` run, from which every replay child is forked.

A replay child's start is a Python start and ``import warp`` (about 0.6 s);
``-j N`` threads that each start their own child pay it N times side by
side, on cores that are few.  :class:`Zygote` starts ``python -m
wrpkit.run.contain.zygote`` once, as early as a run can (its imports overlap the
parent's scan of the suite); that process imports Warp and the child's
modules, freezes what it imported out of the garbage collector's sight,
and waits.  Each :class:`~wrpkit.run.contain.worker.ReplayWorker` given the zygote
then asks it for a child (:meth:`Zygote.fork`): the zygote forks, and the
fork serves the worker's socket exactly as a ``python -m wrpkit.run.contain.child
--serve`` child does (:func:`wrpkit.run.contain.child._serve_main`); the zygote's own side is
:func:`wrpkit.run.contain.child._zygote_main`, in the one entry point of every child.
Containment is the same: the fork is its own process; its output goes to the worker's
memory file; it dies with the zygote, and the zygote with the thread that
started it.

Exit statuses.  A process can wait only for its own children, and the
forks are the zygote's.  A pidfd would let the run's process kill a fork
and see that it ended, but not how; a child subreaper would hand it the
forks only once the zygote is gone.  So the zygote, their parent, reaps
them (on ``SIGCHLD``) and reports ``(pid, exit code)`` on its control
socket; with each fork it hands over a pidfd, opened while the fork cannot
yet have been reaped, so that a kill never reaches a recycled pid.
:class:`ForkedChild` wraps both in the part of ``subprocess.Popen`` that
``ReplayWorker`` uses.

The zygote forks only from its one thread: Warp's import creates none, and
the only one numpy's OpenBLAS would start is turned off in its environment
(a fork request is refused if another thread exists).  CUDA cannot be
initialised before a fork, so where the CUDA driver is installed the
zygote does not initialise Warp and each fork does (``warm``), as a
spawned child does; where there is none, the zygote initialises Warp's CPU
side once for every fork.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from ...errors import WrpRuntimeError

#: Seconds :meth:`Zygote.fork` waits for the zygote to finish its imports and fork.
FORK_TIMEOUT = 300.0
#: Seconds a wait goes on past its timeout for the status of a fork that has ended (on a busy machine
#: the zygote that reaps it may not have been scheduled yet).
REPORT_GRACE = 10.0


class ForkedChild:
    """A replay child forked by the zygote, as much of ``subprocess.Popen`` as ``ReplayWorker`` uses.

    Attributes:
        pid: Its process id.
        returncode: None while it runs; its exit code, or minus the signal that ended it.
    """

    def __init__(self, zygote: "Zygote", pid: int, pidfd: int):
        self.zygote, self.pid, self._pidfd = zygote, pid, pidfd
        self.returncode: Optional[int] = None

    def _settle(self, code: Optional[int]) -> Optional[int]:
        if code is not None and self.returncode is None:
            self.returncode = code
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
        return self.returncode

    def poll(self) -> Optional[int]:
        """Its exit code if it has ended (as the zygote reported it), else None."""
        if self.returncode is None:
            self._settle(self.zygote.exit_code(self.pid, self._pidfd, 0))
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait until it has ended; its exit code.

        Raises:
            subprocess.TimeoutExpired: ``timeout`` passed first.
        """
        if self.returncode is None:
            code = self.zygote.exit_code(self.pid, self._pidfd, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(f"replay child {self.pid}", timeout)
            self._settle(code)
        return self.returncode

    def kill(self) -> None:
        """Send it SIGKILL (through its pidfd: never another process that reused its pid)."""
        if self.returncode is None and self._pidfd >= 0:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass  # it has ended already


class Zygote:
    """The run's warm process (``python -m wrpkit.run.contain.child --zygote``), started at once; forks replay children.

    Args:
        die_with_parent: End the zygote (and so every fork) when the thread that made it ends.

    A zygote that fails (it cannot start, or dies) makes :meth:`fork` raise
    :class:`~wrpkit.errors.WrpRuntimeError`; ``ReplayWorker`` then starts its
    child the ordinary way, so a run never depends on it.
    """

    @staticmethod
    def supported() -> bool:
        """Whether this system can fork replay children from a zygote (Linux, with pidfds)."""
        return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and \
            hasattr(signal, "pidfd_send_signal")

    def __init__(self, die_with_parent: bool = True):
        import socket  # noqa: PLC0415

        from .shared import memory_file  # noqa: PLC0415
        from .spawn import CHILD_MODULE, child_env  # noqa: PLC0415  (not from .worker: numpy's import would come first)

        self._cond = threading.Condition()
        self._fork_lock = threading.Lock()
        self._forked: list = []  # answers to fork requests, in order
        self._exits: dict = {}  # pid -> exit code, as the zygote reported them
        self.pid: Optional[int] = None  # the zygote's, once it has imported everything
        self.dead = False
        self._sock = None
        self._out_fd = memory_file("wrpkit-zygote-output")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = child_env()
        env["OPENBLAS_NUM_THREADS"] = "1"  # no BLAS thread pool: a fork must be the only thread
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", CHILD_MODULE, "--zygote", str(theirs.fileno())]
                                         + (["--die-with-parent"] if die_with_parent else []),
                                         stdin=subprocess.DEVNULL, stdout=self._out_fd, stderr=self._out_fd,
                                         env=env, pass_fds=(theirs.fileno(),))
        except OSError:
            ours.close()
            self.proc, self.dead = None, True
            return
        finally:
            theirs.close()
        self._sock = ours
        self._reader = threading.Thread(target=self._read, name="wrp-zygote-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Take the zygote's messages as they come: fork answers, exit statuses, and its end."""
        from .shared import ChannelClosed, receive  # noqa: PLC0415

        while True:
            try:
                message, fds = receive(self._sock)
            except (ChannelClosed, OSError, ValueError):
                break
            with self._cond:
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["code"])
                elif "ready" in message:
                    self.pid = int(message["ready"])
                else:
                    self._forked.append((message, fds))
                self._cond.notify_all()
        with self._cond:
            self.dead = True
            self._cond.notify_all()

    def fork(self, sock_fd: int, out_fd: int) -> ForkedChild:
        """A new replay child serving socket ``sock_fd``, its output to ``out_fd`` (both stay open here).

        Raises:
            WrpRuntimeError: The zygote is gone, or refused (the caller starts its child the ordinary way).
        """
        from .shared import send  # noqa: PLC0415

        with self._fork_lock:
            if self.dead:
                raise WrpRuntimeError("the run's warm process has ended")
            try:
                send(self._sock, {"op": "fork"}, [sock_fd, out_fd])
            except OSError as e:
                raise WrpRuntimeError(f"the run's warm process has ended ({e})") from None
            deadline = time.monotonic() + FORK_TIMEOUT
            with self._cond:
                while not self._forked and not self.dead and time.monotonic() < deadline:
                    self._cond.wait(max(0.0, deadline - time.monotonic()))
                if not self._forked:
                    raise WrpRuntimeError("the run's warm process did not fork a replay child")
                answer, fds = self._forked.pop(0)
        if "pid" not in answer or not fds:
            for f in fds:
                os.close(f)
            raise WrpRuntimeError(f"the run's warm process could not fork: {answer.get('error', 'no answer')}")
        for f in fds[1:]:
            os.close(f)
        return ForkedChild(self, int(answer["pid"]), fds[0])

    def exit_code(self, pid: int, pidfd: int, timeout: Optional[float]) -> Optional[int]:
        """Fork ``pid``'s exit code once the zygote has reaped it; None if ``timeout`` passes first.

        A zygote that died took its forks with it (they die with it, of
        SIGKILL); one of them is reported so once its pidfd says it has ended.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while pid not in self._exits and not self.dead:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    # One that has ended has its status on the way (the zygote may be waiting for a
                    # core): a poll or a wait takes it, so that an ended fork never looks alive.
                    if pidfd < 0 or left < -REPORT_GRACE or not select.select([pidfd], [], [], 0)[0]:
                        return None
                self._cond.wait(None if left is None else max(0.01, left))
            if pid in self._exits:
                return self._exits.pop(pid)
        if pidfd < 0:
            return -int(signal.SIGKILL)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return -int(signal.SIGKILL) if select.select([pidfd], [], [], left)[0] else None

    def close(self) -> None:
        """End the zygote (its forks die with it) and wait for it."""
        if self._sock is not None:
            try:
                self._sock.shutdown(2)  # the reader's receive ends; the zygote reads the end and exits
            except OSError:
                pass
        if self.proc is not None:
            try:
                # Still importing (a run that needed no child): no reason to wait for the end of that.
                self.proc.wait(timeout=10 if self.pid is not None else 0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self._sock is not None:
            self._reader.join(10)
            self._sock.close()
            self._sock = None
        if self._out_fd >= 0:
            os.close(self._out_fd)
            self._out_fd = -1


#: The key :func:`prestart` holds the zygote under (:func:`wrpkit.run.contain.spawn.take_prestarted`).
PRESTART_KEY = "zygote"


def prestart() -> None:
    """Start a zygote now, for the next ``wrp regress`` run of this process to take
    (``spawn.take_prestarted(PRESTART_KEY)``).

    ``wrp regress`` calls it first thing, before it imports the rest of
    wrpkit and numpy (0.1-0.2 s) and scans the suite, so that the zygote's
    ``import warp`` runs beside all of that.  This module imports next to
    nothing.  Best effort: where zygotes are not supported nothing starts; one
    nobody takes is ended with the command (``spawn.discard_prestarted``), at the
    latest when this process exits.
    """
    from .spawn import held, hold  # noqa: PLC0415

    if held(PRESTART_KEY) is not None or not Zygote.supported():
        return
    hold(PRESTART_KEY, Zygote(), Zygote.close)


__all__ = ["Zygote", "ForkedChild", "prestart", "PRESTART_KEY"]
