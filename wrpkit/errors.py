"""Exceptions raised by wrpkit.

Every error wrpkit raises derives from :class:`WrpError`, carries a message a
user can act on and, where one exists, a ``hint`` saying what to do next.
The CLI prints ``str(error)`` and the hint, never a traceback, and maps each
class to an exit code (see :data:`EXIT_CODES`).
"""

from __future__ import annotations

import signal
from typing import Optional

# ---------------------------------------------------------------------------
# Exit codes: the one table of ``wrp`` and ``wrp-replay`` (its C++ twin is
# native/cli/cli_error.h; README "Exit codes" documents both).  Each failure
# class has one code in every route.
# ---------------------------------------------------------------------------

#: Success.
EXIT_OK = 0
#: A check or replay failed: ``--check`` mismatch, ``wrp check`` found the
#: file not loadable for a reason below none of the other classes, Warp's
#: runtime failed, or an I/O error (a file that exists cannot be read, an
#: output cannot be written: read-only directory, disk full).
EXIT_FAILED = 1
#: Usage error: a bad option or value, a path the user typed that does not
#: exist, an unknown binding, an input of the wrong size or dtype, a device
#: the file was not captured for (or that this machine does not have).
EXIT_USAGE = 2
#: The file cannot be used: invalid, corrupted, unsafe, incomplete (missing
#: or altered module files), written by another format or Warp version, or
#: needing more memory than the device has (checked before anything is
#: allocated; an allocation that fails anyway is the same status).
EXIT_INVALID = 3
#: The replay itself crashed (a fatal signal in kernel code or in Warp's
#: runtime: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) and was contained.
EXIT_CRASH = 4
#: A bug in wrpkit (the last line of defence; ``WRP_DEBUG=1`` shows a traceback).
EXIT_INTERNAL = 70
#: ``--timeout`` ran out (as coreutils ``timeout``); nothing was written.
EXIT_TIMEOUT = 124
#: Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: stdout was closed under the command (``wrp inspect --ops x.wrp | head``): it
#: stops quietly, as a Unix tool that SIGPIPE ends (128 + SIGPIPE, as a shell
#: reports it; wrp-replay keeps SIGPIPE's default action, so it ends the same way).
EXIT_PIPE = 141

#: The fatal signals a contained replay reports as a crash (:data:`EXIT_CRASH`),
#: each with what it usually means in a replay.  The one table of them: the
#: Python replay routes read it, and tools/gen_crash_signals.py writes its C++
#: twin native/cli/crash_signals.h (``wrp-replay``'s guard) from it.
CRASH_SIGNALS = {
    "SIGSEGV": "invalid memory access: an index past an array's end, or a stale pointer",
    "SIGBUS": "a misaligned or unmapped memory access",
    "SIGILL": "an illegal instruction: code built for another CPU, or a trap",
    "SIGFPE": "an arithmetic fault: integer division by zero",
    "SIGABRT": "an abort: a failed assertion in Warp's runtime or the C++ library",
}

#: Where a contained replay was when it crashed: ``{stage: words}``.  The key is what a
#: child writes on its stage page and what ``wrp-replay --json`` puts in its crash
#: object's ``"stage"``; the words follow "the replay crashed with SIG..." in both
#: (tools/gen_crash_signals.py writes them into native/cli/crash_signals.h).  Only a
#: crash while ``"replaying"`` has an op to name.
CRASH_STAGES = {
    "loading": "while Warp loaded the capture (before any op ran)",
    "replaying": "while replaying",
    "reading": "after the last replay, while its results were read",
    "writing": "after the replay, while its result was written",
    "idle": "between requests, while the replay process waited for the next one",
}

#: ``{signal number: name}`` of :data:`CRASH_SIGNALS` on this platform (SIGBUS
#: is 7 on Linux, 10 on macOS).
CRASH_SIGNAL_NUMBERS = {int(getattr(signal, name)): name for name in CRASH_SIGNALS if hasattr(signal, name)}

#: Every exit code with its meaning, in the order the README lists them.
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_FAILED: "a check or replay failed, or an I/O error (cannot read/write a file)",
    EXIT_USAGE: "usage: bad option, path not found, unknown binding, bad input, device",
    EXIT_INVALID: "file invalid, unsafe, incomplete, other version, or too big for memory",
    EXIT_CRASH: "the replay crashed (a fatal signal); contained, nothing was written",
    EXIT_INTERNAL: "internal error (a bug)",
    EXIT_TIMEOUT: "--timeout ran out; nothing was written",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C or SIGTERM); no output is left half-written",
    EXIT_PIPE: "stdout was closed (a reader such as head quit); output stopped quietly",
}

def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling or because of, a Ctrl-C or SIGTERM.

    A signal's ``KeyboardInterrupt`` does not always reach the command as itself: raised inside a
    class body's ``__set_name__`` (Python 3.11 wraps it in a ``RuntimeError``), a module's import
    or an ``except`` clause that raises another error, it arrives as the cause or context of
    another exception. Every top-level handler asks this, so that such a signal is "interrupted"
    (exit 130), never an internal error or a traceback.

    Args:
        exc: The exception that reached a top-level handler.

    Returns:
        True when a ``KeyboardInterrupt`` is in its cause or context chain.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class WrpError(Exception):
    """Base class of every wrpkit error.

    Args:
        message: What went wrong.
        hint: What the user can do about it, or None.
    """

    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class WrpFormatError(WrpError):
    """The bytes are not a well-formed file of the expected format.

    Args:
        message: What is wrong.
        field: Dotted name of the field that is wrong, e.g. ``"ops[3].total_size"``.
        offset: Absolute byte offset of that field in the file, or None.
        hint: What to do next.
    """

    exit_code = EXIT_INVALID

    def __init__(self, message: str, field: Optional[str] = None, offset: Optional[int] = None,
                 hint: Optional[str] = None):
        where = ""
        if field is not None:
            where = field
            if offset is not None:
                where += f" at byte {offset}"
            where += ": "
        elif offset is not None:
            where = f"at byte {offset}: "
        super().__init__(where + message, hint)
        self.field = field
        self.offset = offset


class WrpVersionError(WrpFormatError):
    """The file was written by another WRP1 format or Warp version (exit 3 everywhere)."""


class WrpIntegrityError(WrpFormatError):
    """A checksum does not match: the file or one of its blobs was altered."""


class WrpValidationError(WrpError):
    """A structurally decodable file breaks one or more validation rules.

    Args:
        problems: Every problem found, each a one-line message.
    """

    exit_code = EXIT_INVALID

    def __init__(self, problems: list, hint: Optional[str] = None):
        self.problems = list(problems)
        head = self.problems[0] if self.problems else "invalid file"
        more = f" (and {len(self.problems) - 1} more problems)" if len(self.problems) > 1 else ""
        super().__init__(head + more, hint)


class WrpModuleError(WrpError):
    """A module file the graph needs is missing, empty, unsafe or altered."""

    exit_code = EXIT_INVALID


class WrpSignatureError(WrpError):
    """A capture that trusted keys must sign is unsigned, signed by no trusted key, malformed in its
    signature, or changed after signing (``schema/SIGNATURE-RULES.md``)."""

    exit_code = EXIT_INVALID


class WrpUsageError(WrpError):
    """A bad option or value the user typed (an output name of no known form, a bad range)."""

    exit_code = EXIT_USAGE


class WrpDeviceError(WrpError):
    """The file cannot run on the requested device: another family, an unknown or absent device (a usage error)."""

    exit_code = EXIT_USAGE


class WrpNotFoundError(WrpError):
    """A path the user typed does not exist (a usage error)."""

    exit_code = EXIT_USAGE


class WrpIOError(WrpError):
    """A file that exists cannot be read, or an output cannot be written (read-only directory, disk full)."""

    exit_code = EXIT_FAILED


class WrpBindingError(WrpError):
    """An input does not fit its binding (unknown name, size or dtype)."""

    exit_code = EXIT_USAGE


class WrpUsageError(WrpError):
    """A bad value the user gave a command or function: an op or step range outside the program (usage)."""

    exit_code = EXIT_USAGE


class WrpKernelsError(WrpUsageError):
    """A ``--kernels`` file cannot be used: missing, fails to import, none of its kernels matches, or the
    file to annotate is already typed (usage)."""


class WrpRuntimeError(WrpError):
    """Warp's runtime failed to load or replay the graph."""

    exit_code = EXIT_FAILED


class WrpCrashError(WrpRuntimeError):
    """The replay died of a fatal signal in a contained child; nothing was written.

    Attributes:
        signal_name: ``"SIGSEGV"``, ``"SIGBUS"``, ``"SIGILL"``, ``"SIGFPE"`` or ``"SIGABRT"``.
        op_index: Index of the top-level op that crashed (as ``wrp inspect --ops``
            numbers it), or None when it could not be identified.
        op_kind: The op's type name (``"KERNEL_LAUNCH"``, ...), or None.
        kernel: The launched kernel's key, or None.
        module: The kernel's module file, or None.
        digest_verified: Whether that module's SHA-256 was verified before it
            ran (None when no module is known).
        path: Where ``wrp trace`` saw the op running inside IF/WHILE bodies
            (``"1.2"``), or None (a replay, or a top-level op not traced).
        iteration: The innermost WHILE iteration of that op, or None.
    """

    exit_code = EXIT_CRASH

    def __init__(self, message: str, hint: Optional[str] = None, *, signal_name: str = "", op_index=None,
                 op_kind=None, kernel=None, module=None, digest_verified=None, path=None, iteration=None):
        super().__init__(message, hint)
        self.path = path
        self.iteration = iteration
        self.signal_name = signal_name
        self.op_index = op_index
        self.op_kind = op_kind
        self.kernel = kernel
        self.module = module
        self.digest_verified = digest_verified


class WrpOutOfMemoryError(WrpError):
    """The capture needs more memory than the device has: refused before anything is allocated
    (its declared memory against the device's free memory), or an allocation failed (a mapping,
    wrpkit's own, or Warp's).  One status everywhere: exit 3, ``WRP_ERR_OUT_OF_MEMORY`` in the C API.

    Attributes:
        requested: Bytes asked for (the capture's declared total, or the failed allocation).
        device: The device (``"cpu"``, ``"cuda:0"``).
        available: Bytes the device had free when checked, or None when unknown.
    """

    exit_code = EXIT_INVALID

    def __init__(self, message: str, hint: Optional[str] = None, *, requested: Optional[int] = None,
                 device: Optional[str] = None, available: Optional[int] = None):
        super().__init__(message, hint)
        self.requested = requested
        self.device = device
        self.available = available


class WrpTimeoutError(WrpError):
    """A replay did not finish within its ``--timeout``; nothing was written."""

    exit_code = EXIT_TIMEOUT


def timeout_message(seconds: float, replays: int = 1) -> str:
    """The one-line message of an expired ``--timeout`` (the same words as wrp-replay's).

    Args:
        seconds: The timeout.
        replays: Replays asked for (``--repeat`` plus ``--warmup``): more than one is
            named as a cause too, not only a WHILE loop.
    """
    if replays > 1:
        return (f"the replays did not finish within {seconds:g} s ({replays} replays (--repeat, --warmup) take "
                "longer, or a WHILE loop does not end?); no output was written")
    return (f"the replay did not finish within {seconds:g} s (a WHILE loop that does not end?); "
            "no output was written")


#: The hint printed with :func:`timeout_message`.
TIMEOUT_HINT = "The file's WHILE loops may never end with these inputs; check them, or raise --timeout."


def timeout_hint(replays: int = 1) -> str:
    """The hint of an expired ``--timeout`` for ``replays`` replays."""
    if replays > 1:
        return "Lower --repeat or --warmup, or raise --timeout; if one replay alone does not end, check its WHILE loops."
    return TIMEOUT_HINT
