"""The parent side of every wrpkit child process: start it, ask it, time it out, read how it ended.

Every child is ``python -m wrpkit.run.contain.child --serve FD`` (:mod:`wrpkit.run.contain.child`),
or a fork of ``wrp regress``'s warm process (:mod:`wrpkit.run.contain.zygote`) that serves the same
loop.  :class:`ServedChild` is that child seen from here, whatever job it runs: a replay
(:class:`~wrpkit.run.contain.worker.ReplayWorker`, which is one), a ``wrp regress`` case, or a job
a higher layer names (``wrp trace``, ``wrp profile`` and ``wrp memcheck``,
:func:`wrpkit.debug.isolation.run_in_child`).  So there is one way to start a child (spawned, taken
from those started ahead, or forked), one request channel with one deadline (:meth:`ServedChild.ask`),
one stage page a crash report reads, and one reading of how a child ended (:meth:`ServedChild.ended`:
a fatal signal is :class:`ChildCrashed`, an answered error is raised again as the same class).
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Mapping, Optional

from ...deadline import Deadline, left
from ...errors import CRASH_SIGNAL_NUMBERS, WrpError, WrpRuntimeError
from .spawn import CHILD_MODULE, child_channel, end_started, output_tail, spawn_served, take_prestarted

#: Bytes of a child's stage page (``"loading"``, ``"replaying"``, ...; :func:`wrpkit.run.contain.child.set_stage`).
STAGE_SIZE = 64


class ChildCrashed(Exception):
    """A child process died of signal ``signum`` at ``stage`` (``"loading"``, ``"replaying"``, ...)."""

    def __init__(self, signum: int, stage: str, stderr: str):
        super().__init__(signum)
        self.signum, self.stage, self.stderr = signum, stage, stderr


def signal_name(signum: int) -> str:
    """The name of a signal number (``SIGSEGV``), from the one crash-signal table where it is one."""
    if signum in CRASH_SIGNAL_NUMBERS:
        return CRASH_SIGNAL_NUMBERS[signum]
    known = signum in signal.Signals.__members__.values()
    return signal.Signals(signum).name if known else f"signal {signum}"


def ended_without_result(returncode: int, output: str) -> WrpRuntimeError:
    """The error of a child that ended with exit code ``returncode`` and no answer, from what it printed."""
    from ..load.file_guard import file_changed_error  # noqa: PLC0415

    changed = file_changed_error(returncode, output)  # its capture was truncated under it: exit 3, the file named
    if changed is not None:
        return changed
    tail = " | ".join(output.strip().splitlines()[-5:])
    return WrpRuntimeError(f"the replay process ended with exit code {returncode} and no result: {tail}",
                           hint="Warp's own diagnostic, if any, is quoted above.")


def error_from(info: dict) -> WrpError:
    """The :class:`WrpError` a child answered as ``info`` (:func:`wrpkit.run.contain.child.error_info`): same class,
    message and plain attributes."""
    from ... import errors  # noqa: PLC0415

    cls = getattr(errors, info.get("class", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, WrpError)):
        cls = WrpRuntimeError
    if issubclass(cls, errors.WrpValidationError):
        return cls(info.get("problems") or [info["message"]], hint=info.get("hint"))
    err = WrpError.__new__(cls)
    WrpError.__init__(err, info["message"], info.get("hint"))
    err.field = err.offset = None  # the message already names them (WrpFormatError)
    for name, value in (info.get("attrs") or {}).items():
        if isinstance(name, str) and name.isidentifier() and not name.startswith("_") and not hasattr(WrpError, name):
            setattr(err, name, value)
    return err


class ServedChild:
    """One child process serving requests over a Unix socket, with its output in a memory file.

    Args:
        env: Variables added to the child's environment (``wrp memcheck`` preloads its allocator); a
            child with its own environment is always started fresh, never taken from those started ahead.

    Attributes:
        die_with_parent: End the child when the thread that started it ends (Linux): a killed
            ``wrp regress`` worker leaves no replay running on its own.
        zygote: A :class:`~wrpkit.run.contain.zygote.Zygote` to fork the child from (``wrp regress``), or
            None to start ``python -m wrpkit.run.contain.child`` (a fork dies with the zygote, which dies
            with its thread).
    """

    def __init__(self, env: Optional[Mapping] = None):
        self.env = dict(env) if env else None
        self.proc = None
        self._sock = None
        self._out_fd = -1
        self._stage = None
        self.die_with_parent = False
        self.zygote = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the child: forked from :attr:`zygote` if there is one, else the one started ahead for this
        process (:func:`~wrpkit.run.contain.spawn.prestart_child`) if it is alive, else a new one.

        Raises:
            WrpRuntimeError: The process could not be started (a resource limit says which).
        """
        from .shared import SharedArea  # noqa: PLC0415

        self._stage = SharedArea(STAGE_SIZE, "wrpkit-stage")
        if self.zygote is not None and self.env is None:
            ours, theirs, self._out_fd = child_channel()
            try:
                self.proc = self.zygote.fork(theirs.fileno(), self._out_fd)
            except WrpRuntimeError:
                self.zygote = None  # it is gone: from now on this child is started the ordinary way
                ours.close()
                os.close(self._out_fd)
                self._out_fd = -1
            else:
                self._sock = ours
                return
            finally:
                theirs.close()
        extra = ("--die-with-parent",) if self.die_with_parent else ()
        try:
            started = take_prestarted(("child", extra)) if self.env is None else None
            if started is not None and started[0].poll() is not None:
                end_started(started)  # it died while it waited
                started = None
            self.proc, self._sock, self._out_fd = started or spawn_served(CHILD_MODULE, extra, self.env)
        except WrpRuntimeError:
            self._stage.close()
            self._stage = None
            raise

    def stage(self) -> str:
        """What the child was doing last (``"starting"``, ``"loading"``, ``"replaying"``, ``"reading"``, ``"idle"``)."""
        if self._stage is None:
            return "starting"
        text = bytes(self._stage.view()).rstrip(b"\0").decode("ascii", "replace")
        return text or "starting"

    def output_tail(self) -> str:
        """The end of what the child printed (Warp's messages, a traceback)."""
        return output_tail(self._out_fd)

    def stop(self) -> None:
        """End the child (if any: a timeout, Ctrl-C, an error here never leaves one running) and forget it."""
        proc, self.proc = self.proc, None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if self._stage is not None:
            self._stage.close()
        self._stage = None
        if self._out_fd >= 0:
            os.close(self._out_fd)
            self._out_fd = -1

    def ask(self, message: dict, fds: list, deadline: Optional[Deadline]) -> tuple:
        """Send one request and take its answer: ``(answer or None if the child ended, fds, deadline)``.

        The one timeout of every child: ``deadline`` (or None) bounds the wait; an interim
        ``{"validated": true}`` (a ``wrp regress`` case) restarts it then (a case's clock, given
        not started, starts there) and is not the answer.

        Raises:
            WrpTimeoutError: ``deadline`` passed (the child is stopped).
        """
        from .shared import ChannelClosed, ChannelTimeout, receive, send  # noqa: PLC0415

        try:
            try:
                send(self._sock, message, fds)
            except OSError:
                pass  # the child ended: the answer (none) says why
            while True:
                answer, got = receive(self._sock, deadline)
                if not answer.get("validated"):
                    return answer, got, deadline
                deadline = None if deadline is None else deadline.restarted()
        except ChannelTimeout:
            self.stop()
            raise deadline.error() from None
        except (ChannelClosed, ConnectionResetError):  # reset: it died with our request unread
            return None, [], deadline
        except BaseException:
            self.stop()  # Ctrl-C or an error here: never leave a child running on its own
            raise

    def ask_job(self, entry: str, message: dict, fds: list, deadline: Optional[Deadline]) -> tuple:
        """:meth:`ask` for a ``job`` that module ``entry`` serves in the child (its ``serve_job``,
        :func:`wrpkit.run.contain.child._serve_job`), handed the stage page before ``fds``."""
        return self.ask({**message, "op": "job", "entry": entry, "stage_size": self._stage.size},
                        [self._stage.fd] + list(fds), deadline)

    def ended(self, answer: Optional[dict], deadline: Optional[Deadline]) -> Exception:
        """The error of a child that answered ``answer`` (an error, or None) and ended; it is stopped.

        Returns:
            :class:`ChildCrashed` for a fatal signal (with the stage and the output's tail), the
            answered error as its own class, or the exit code and output of a child that ended silently.
        """
        proc = self.proc
        stage = self.stage()
        try:
            wait = left(deadline)
            proc.wait(timeout=None if wait is None else max(0.1, wait))
        except subprocess.TimeoutExpired:
            pass
        tail = self.output_tail()
        returncode = proc.poll()
        self.stop()
        if returncode is not None and returncode < 0:
            return ChildCrashed(-returncode, stage, tail)
        if answer is not None:
            return error_from(answer["error"])
        return ended_without_result(returncode if returncode is not None else -1, tail)

