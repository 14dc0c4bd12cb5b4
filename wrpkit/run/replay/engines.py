"""The two replay engines behind one interface, and where the native artefacts are.

:class:`PythonEngine` replays through Warp in a child process
(:func:`wrpkit.run.contain.isolation.replay_in_child`); :class:`NativeEngine` runs the
C++ ``wrp-replay``.  Both take a :class:`~wrpkit.run.load.prepare.Prepared` and a
:class:`ReplayRequest` and return an :class:`EngineRun`, so ``wrp replay``
and ``wrp regress`` choose an engine and nothing else.  A crash in either is
contained in its child and raised as :class:`~wrpkit.errors.WrpCrashError`.

:func:`native_paths` is the one lookup of ``wrp-replay``, ``libwrp_replay``
and the warp-lang libraries they load.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

from ...deadline import Deadline, left
from ...records import field, record
from ...environment import hit_while_guard, warp_replay_error
from ...errors import (EXIT_CRASH, EXIT_TIMEOUT, WrpBindingError, WrpError, WrpFormatError, WrpOutOfMemoryError,
                       WrpRuntimeError)
from ..contain.spawn import discard_prestarted, held, hold, take_prestarted

NATIVE_EXE = "wrp-replay"
from .native_lib import NATIVE_LIB, PACKAGE_NATIVE as _PACKAGE_NATIVE, find_library as _find_library  # noqa: E402


# ---------------------------------------------------------------------------
# Where the native artefacts are
# ---------------------------------------------------------------------------


@record(frozen=True)
class NativePaths:
    """The native replayer's files as found now (None where absent).

    Attributes:
        replayer: The ``wrp-replay`` executable.
        library: ``libwrp_replay`` (the C API).
        warp_lib_dir: The ``bin/`` folder of the warp-lang this Python uses
            (``warp.so``, ``warp-clang.so``), or None when Warp is not installed.
    """

    replayer: Optional[Path]
    library: Optional[Path]
    warp_lib_dir: Optional[str]

    def require_replayer(self) -> Path:
        """The ``wrp-replay`` path.

        Raises:
            WrpError: It is not built or installed.
        """
        if self.replayer is None:
            raise _unavailable(WrpError(
                f"the native replayer `{NATIVE_EXE}` is not built or installed (looked next to {sys.executable}, "
                "on PATH and in wrpkit/_native/bin/)",
                hint="Install wrpkit with `pip install .` from the source tree, which builds it with CMake, "
                     "or use --engine python."))
        return self.replayer

    def require_library(self) -> Path:
        """The ``libwrp_replay`` path.

        Raises:
            WrpError: The library is not built.
        """
        if self.library is None:
            raise WrpError(f"the native replayer library {NATIVE_LIB} is not built (looked in {_PACKAGE_NATIVE})",
                           hint="Reinstall wrpkit (`pip install .`) to build native/, or use --engine python.")
        return self.library

    def env(self) -> dict:
        """The environment for ``wrp-replay``: this one, with ``WRP_WARP_LIB_DIR`` set to :attr:`warp_lib_dir`
        unless already set."""
        env = dict(os.environ)
        if not env.get("WRP_WARP_LIB_DIR") and self.warp_lib_dir is not None:
            env["WRP_WARP_LIB_DIR"] = self.warp_lib_dir
        return env


def _unavailable(error: WrpError) -> WrpError:
    """``error``, marked as the native engine's being unable to run at all (:func:`engine_unavailable`)."""
    error.engine_unavailable = True
    return error


def _find_replayer() -> Optional[Path]:
    # $WRP_REPLAY, next to the Python executable, on PATH, in wrpkit/_native/bin/: the first that runs.
    exe = NATIVE_EXE + (".exe" if os.name == "nt" else "")
    candidates = []
    if os.environ.get("WRP_REPLAY"):
        candidates.append(Path(os.environ["WRP_REPLAY"]))
    candidates.append(Path(sys.executable).parent / exe)
    which = shutil.which(exe)
    if which:
        candidates.append(Path(which))
    candidates.append(_PACKAGE_NATIVE / "bin" / exe)
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def _warp_lib_dir() -> Optional[str]:
    import importlib.util  # noqa: PLC0415  (found without importing Warp)

    spec = importlib.util.find_spec("warp")
    return os.path.join(os.path.dirname(spec.origin), "bin") if spec is not None and spec.origin else None


def native_paths() -> NativePaths:
    """Where ``wrp-replay``, ``libwrp_replay`` and Warp's libraries are, looked up now (the environment
    variables ``WRP_REPLAY`` and ``WRP_REPLAY_LIB`` override the search).

    Returns:
        A :class:`NativePaths`; ask it with :meth:`~NativePaths.require_replayer` or
        :meth:`~NativePaths.require_library` for an error that says what to do.
    """
    return NativePaths(_find_replayer(), _find_library(), _warp_lib_dir())


# ---------------------------------------------------------------------------
# The interface
# ---------------------------------------------------------------------------


@record
class ReplayRequest:
    """What to replay and what to bring back, for either engine.

    Attributes:
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        inputs: ``{binding: np.ndarray}``, already checked against the bindings.
        repeat: Timed replays.
        warmup: Untimed replays first.
        verify_checksums: Verify a ``.wrpk``'s blob checksums.
        allow_raw_pointers: Replay kernel arguments that hold live process pointers.
        deadline: When to give up (:class:`~wrpkit.deadline.Deadline`, None: no limit); the
            child keeps the time (wrp-replay is given what is left as its ``--timeout``).
        read_back: The bindings whose values come back.
        stats: ``{binding: spec or None}`` to summarise where the data is (:mod:`wrpkit.checks.binding_stats`).
        max_memory: Bytes the load may allocate (None: the device's free memory).
        raw: Results as the bindings' ``uint8`` bytes instead of typed per their signature.
        identify: On a crash wrp-replay could not place, name the op by a second run with op slots.
        while_replaying: Called in this process once the replay's process runs, while
            it replays (the command line imports its table printer then), or None.
        trust: The :class:`~wrpkit.formats.signature.Trust` the capture was checked against here;
            wrp-replay, which reads the files again itself, checks them again against it.
        kernel_output: The :class:`~wrpkit.run.contain.spawn.KernelOutput` the kernels' own output
            (``wp.printf``) goes to, all of it before the replay returns; None: not shown (the
            python engine's child keeps it with Warp's messages; wrp-replay writes it on the
            stderr the engine reads and does not show).
    """

    device: str = "cpu"
    inputs: Mapping = field(default_factory=dict)
    repeat: int = 1
    warmup: int = 0
    verify_checksums: bool = True
    allow_raw_pointers: bool = False
    deadline: Optional[Deadline] = None
    read_back: list = field(default_factory=list)
    stats: Mapping = field(default_factory=dict)
    max_memory: Optional[int] = None
    raw: bool = False
    identify: bool = True
    while_replaying: Optional[Callable[[], None]] = None
    trust: Optional[object] = None
    kernel_output: Optional[object] = None

    @property
    def replays(self) -> int:
        return self.repeat + self.warmup


@record
class EngineRun:
    """What an engine brings back.

    Attributes:
        results: ``{binding: np.ndarray}`` of :attr:`ReplayRequest.read_back`.
        stats: ``{binding: summary}`` of :attr:`ReplayRequest.stats`.
        host_ms: Host wall time of each timed replay.
        device_ms: Device time of each timed replay, or None where not measured.
    """

    results: dict
    stats: dict
    host_ms: list
    device_ms: Optional[list] = None


class PythonEngine:
    """Replays through Warp in a child process that maps the file itself."""

    name = "python"

    def replay(self, prep, request: ReplayRequest) -> EngineRun:
        """Replay ``prep`` as ``request`` asks.

        Raises:
            WrpCrashError: The child died of a fatal signal (the op named where found).
            WrpTimeoutError: ``request.deadline`` passed.
            WrpError: Whatever the child raised.
        """
        from ..contain.isolation import replay_in_child  # noqa: PLC0415

        run = replay_in_child(prep, request.device, dict(request.inputs), request.repeat, request.warmup,
                              verify_checksums=request.verify_checksums, deadline=request.deadline,
                              read_back=list(request.read_back), stats=dict(request.stats),
                              max_memory=request.max_memory, raw=request.raw, identify=request.identify,
                              kernel_output=request.kernel_output)
        return EngineRun(run.results, dict(run.stats or {}), list(run.host_ms), run.device_ms)


class NativeEngine:
    """Replays with the C++ ``wrp-replay`` in a child process.

    wrp-replay maps the file itself (a capture read from bytes is handed to it
    as a memory file, a bundle where it has module files); inputs and results
    pass through memory files (``/dev/fd/N``), nothing is written on disk.
    The outputs' statistics come from its ``--stats``, except for bindings
    the file does not type, which are read back and summarised here.
    """

    name = "native"

    def replay(self, prep, request: ReplayRequest) -> EngineRun:
        """Replay ``prep`` as ``request`` asks.

        Raises:
            WrpError: wrp-replay is not installed, or refused the file (its exit code's class).
            WrpCrashError: It died of a fatal signal (the op named where found).
            WrpTimeoutError: ``request.deadline`` passed.
        """
        from ..contain.shared import memory_file  # noqa: PLC0415

        paths = native_paths()
        exe = paths.require_replayer()
        recorded = prep.annotations.signature_map() if prep.annotations is not None else {}
        # wrp-replay types a binding by the file's own signature; the others are summarised here.
        here = [n for n, spec in request.stats.items() if spec is not None and n not in recorded]
        wanted = list(dict.fromkeys(list(request.read_back) + here))
        fds = []
        pending = take_prestarted(REPLAYER_KEY)
        try:
            source = self._source(prep, fds)
            # the folder the checks ran on
            modules_dir = prep.modules_dir if prep.path is not None and prep.kind == "wrp" else None
            args = replayer_args(exe, source, request, modules_dir)
            if pending is not None:
                if pending.args == args and not request.inputs and not wanted:
                    # Started before this process read the file, and waiting (if the file is large
                    # enough to be refused for what no op reaches) for the checks that have now passed.
                    t0 = time.perf_counter()
                    pending.approve()
                    proc = _run_replayer(exe, args, paths.env(), fds, request, started=pending.child)
                    pending = None
                    return self._finish(prep, proc, request, {}, here, (time.perf_counter() - t0) * 1e3)
                pending.discard()  # started for other arguments (a guess at the modules folder missed)
                pending = None
            for name, arr in request.inputs.items():
                fd = _npy_memory_file(arr, "wrpkit-input")
                fds.append(fd)
                args += ["--input", f"{name}=/dev/fd/{fd}"]
            outs = {}
            for name in wanted:
                fd = memory_file("wrpkit-result")
                fds.append(fd)
                outs[name] = fd
                args += ["--output", f"{name}=/dev/fd/{fd}"]
            t0 = time.perf_counter()
            proc = _run_replayer(exe, args, paths.env(), fds, request)
            return self._finish(prep, proc, request, outs, here, (time.perf_counter() - t0) * 1e3)
        finally:
            if request.kernel_output is not None:
                request.kernel_output.flush()  # every kernel line is out before the caller prints its report
            if pending is not None:
                pending.discard()
            for fd in fds:
                os.close(fd)  # the results' mappings stay until they go

    def _finish(self, prep, proc, request: ReplayRequest, outs: dict, here: list, wall_ms: float) -> EngineRun:
        """The EngineRun of a wrp-replay that ended: its report, the bindings it wrote into ``outs``' memory files.

        Raises:
            WrpError: It exited non-zero (its exit code's class).
        """
        from ...checks.binding_stats import raw_stats_of, region_stats  # noqa: PLC0415

        try:
            report = json.loads(proc.stdout) if proc.stdout.strip() else {}
        except json.JSONDecodeError:
            report = {}
        report = report if isinstance(report, dict) else {}
        if proc.returncode != 0:
            raise self._failure(prep, proc, report, request)
        results = {}
        for name, fd in outs.items():
            if not os.fstat(fd).st_size:
                raise WrpRuntimeError(f"{NATIVE_EXE} did not write binding {name!r}")
            arr = _read_npy_fd(fd, "native engine output")
            sig = None if request.raw else prep.signature.get(name)
            results[name] = typed_like(arr, prep.sizes[name], sig)
        summary = dict(report.get("stats") or {})
        for name in here:
            import numpy as np  # noqa: PLC0415  (only for what wrp-replay did not summarise)

            raw = np.ascontiguousarray(results[name]).reshape(-1).view(np.uint8)
            summary[name] = region_stats(raw, request.stats[name])
        for name in request.stats:
            if name not in summary:
                summary[name] = raw_stats_of([prep.sizes[name]])
        results = {n: results[n] for n in request.read_back}
        host = _native_timings(report) or [wall_ms / max(1, request.repeat)]
        return EngineRun(results, summary, host, None)

    @staticmethod
    def _source(prep, fds: list) -> str:
        """The path wrp-replay opens: the file, or a memory file holding the capture read from bytes or
        from a ``.json`` (which wrp-replay does not read: it gets the same program as a bundle)."""
        if prep.path is not None and prep.kind in ("wrp", "wrpk"):
            return os.fspath(prep.path)
        from ..contain.shared import memory_file  # noqa: PLC0415

        fd = memory_file("wrpkit-capture")
        fds.append(fd)
        if prep.kind == "json" or (prep.kind == "wrp" and prep.modules):
            # A .wrp finds its module files in a folder; a bundle carries them (the same program and bytes).
            from ...formats.wrpk.builder import iter_wrpk_chunks  # noqa: PLC0415

            chunks = iter_wrpk_chunks(prep.model, prep.modules)
        else:
            chunks = [prep.source_buffer]
        from ...atomic_writes import pwrite_all  # noqa: PLC0415

        offset = 0
        for chunk in chunks:
            pwrite_all(fd, chunk, offset)
            offset += memoryview(chunk).nbytes
        return f"/dev/fd/{fd}"

    @staticmethod
    def _failure(prep, proc, report: dict, request: ReplayRequest) -> WrpError:
        """The error of a wrp-replay that exited non-zero."""
        from ...errors import CRASH_SIGNAL_NUMBERS  # noqa: PLC0415

        if proc.returncode == EXIT_TIMEOUT and request.deadline is not None:
            return request.deadline.error()  # the seconds the user gave, not those left when it started
        msg = report.get("error")
        if not msg:
            msg = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-10:])
        if proc.returncode == EXIT_CRASH or -proc.returncode in CRASH_SIGNAL_NUMBERS:
            return _native_crash(prep, proc.returncode, request, report.get("crash"))
        msg = f"{NATIVE_EXE} failed (exit code {proc.returncode}): {msg}"
        if proc.returncode == 3 and ("out of memory" in msg.lower() or " free; " in msg.lower()):
            asked = report.get("requested_bytes")
            return WrpOutOfMemoryError(msg, hint="Free memory or replay on a larger device; --max-memory SIZE "
                                                 "replays it anyway if you know it fits.", device=request.device,
                                       requested=asked if isinstance(asked, int) and asked > 0 else None)
        if proc.returncode == 1 and hit_while_guard(msg):
            return warp_replay_error(msg, said="")  # what the python engine says of the same loop
        cls = {2: WrpBindingError, 3: WrpFormatError}.get(proc.returncode, WrpRuntimeError)
        err = cls(msg, hint="Rerun with --engine python to compare.")
        if proc.returncode == 1 and "Warp runtime not found" in msg:
            _unavailable(err)  # its warp.so is missing: --engine auto falls back to the python engine
        return err


#: The engines by their ``--engine`` name.
ENGINES = {"python": PythonEngine, "native": NativeEngine}

#: The ``--engine`` values of ``wrp replay`` and ``wrp regress``: ``auto`` (the default) picks one
#: (:func:`choose_engine`).
ENGINE_CHOICES = ("auto", "python", "native")

#: ``wrp regress --engine auto``: the most cases a worker replays for which the native engine is the faster.
#: wrp-replay starts for each case (about 0.1 s: its start and Warp's libraries), the python engine once per
#: worker (about 1 s: a child importing Warp) and then takes about 0.03 s a case (2026-12-06, a shared 2-core
#: box, medians of 3: 1 case 0.8 s against 1.6 s, 10 cases 1.5 s against 1.8 s, 30 cases 3.9 s against 2.5 s).
NATIVE_MAX_CASES_PER_WORKER = 10

#: Why ``auto`` picks the native engine.
NATIVE_REASON = f"--engine auto: no option needs the python engine, and {NATIVE_EXE} is faster"


@record(frozen=True)
class EngineChoice:
    """The engine a run uses and why.

    Attributes:
        name: ``python`` or ``native``.
        reason: Why, in words (``wrp replay`` prints it; its ``--json`` has it as ``engine_reason``).
        auto: Picked by ``--engine auto`` (so a native engine that cannot run falls back to python).
    """

    name: str
    reason: str
    auto: bool = False


def choose_engine(requested: str = "auto", *, device: Optional[str] = "cpu", needs_python: Optional[str] = None,
                  replayer_found: Optional[bool] = None) -> EngineChoice:
    """The engine for ``--engine requested``: ``python`` or ``native`` as named; ``auto`` the native
    engine (the faster: ``wrp-replay``, no child importing Warp) wherever the options allow it.

    ``auto`` picks the python engine where

    * ``device`` is a CUDA device: the python engine also times each replay on the device
      (CUDA events, ``device_ms``), which wrp-replay does not;
    * ``needs_python`` names another reason (an option only the python engine serves);
    * wrp-replay is not built or installed (:func:`native_paths`).

    Args:
        requested: ``auto``, ``python`` or ``native``.
        device: The ``--device`` given (None: each capture's own, which may be CUDA).
        needs_python: Why the caller's options need the python engine, or None.
        replayer_found: Whether wrp-replay is there (None: look now).

    Raises:
        WrpError: ``requested`` is no engine.
    """
    if requested in ENGINES:
        return EngineChoice(requested, f"--engine {requested}")
    if requested != "auto":
        raise WrpError(f"no engine {requested!r} (engines: {', '.join(ENGINE_CHOICES)})")
    if needs_python:
        return EngineChoice("python", needs_python, auto=True)
    dev = (device or "").strip().lower()
    if not dev.startswith("cpu"):
        return EngineChoice("python", "--engine auto: " + (f"--device {device}" if device else "each capture's own "
                            "device (cpu or cuda:0)") + " needs the python engine, which times replays on a CUDA "
                            f"device too (device ms; {NATIVE_EXE} times the host only)", auto=True)
    if replayer_found is None:
        replayer_found = _find_replayer() is not None
    if not replayer_found:
        return EngineChoice("python", f"--engine auto: {NATIVE_EXE} is not built or installed (looked next to "
                                      f"{sys.executable}, on PATH and in wrpkit/_native/bin/), so the python engine "
                                      "replayed instead", auto=True)
    return EngineChoice("native", NATIVE_REASON, auto=True)


def engine_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the native engine could not run at all (wrp-replay missing, not executable, or
    without Warp's runtime), where the python engine would: ``--engine auto`` then falls back to it."""
    return bool(getattr(error, "engine_unavailable", False))


def engine(name: str):
    """The engine called ``name`` (``python`` or ``native``).

    Raises:
        WrpError: No engine has that name.
    """
    try:
        return ENGINES[name]()
    except KeyError:
        raise WrpError(f"no engine {name!r} (engines: {', '.join(ENGINES)})") from None


# ---------------------------------------------------------------------------
# Native engine helpers
# ---------------------------------------------------------------------------


def typed_like(arr: np.ndarray, size: int, sig) -> np.ndarray:
    """A native engine output as ``sig`` types it (raw ``uint8`` bytes without one); views, no copies."""
    import numpy as np  # noqa: PLC0415

    from ...formats import annotations as ann  # noqa: PLC0415

    raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    if raw.nbytes == size:  # the data stays where wrp-replay wrote it
        return raw if sig is None else ann.view_region(raw, sig)
    return np.asarray(arr)


def replayer_args(exe: Path, source: str, request: ReplayRequest, modules_dir) -> list:
    """wrp-replay's command line for ``request`` (inputs and outputs apart): the one place it is formed."""
    args = [os.fspath(exe), source, "--device", request.device, "--repeat", str(request.repeat),
            "--warmup", str(request.warmup), "--json", "--raw-times", "--stats"]
    if modules_dir is not None:
        args += ["--modules-dir", os.fspath(modules_dir)]
    if not request.verify_checksums:
        args.append("--no-verify")  # wrp-replay reads .wrpk bundles itself, blobs straight from the mmap
    if request.allow_raw_pointers:
        args.append("--allow-raw-pointers")
    if request.max_memory is not None:
        args += ["--max-memory", str(request.max_memory)]
    if request.deadline is not None:
        args += ["--timeout", repr(request.deadline.left())]
    if request.kernel_output is not None:
        args += ["--kernel-output-fd", str(request.kernel_output.fd())]
    if request.trust is not None:
        for key in request.trust.sources:
            args += ["--trusted-key", key]
        if request.trust.signature is not None:
            args += ["--signature", os.fspath(request.trust.signature)]
    return args


class PrestartedReplayer:
    """A wrp-replay started before this process read the file (:func:`prestart_replayer`).

    It maps and validates the file and loads Warp's libraries meanwhile; a file
    that declares more than ``approve_above`` bytes waits, before anything is
    allocated, for :meth:`approve` (``--approve-fd``), so that a refusal this
    process alone makes (regions no op reaches) comes first.
    """

    def __init__(self, args: list, child: subprocess.Popen, approve_fd: int, approve_above: Optional[int]):
        self.args = args
        self.child = child
        self._approve_fd = approve_fd
        self.approve_above = approve_above  # what prestart_replayer was given

    def approve(self) -> None:
        """Let it allocate and replay."""
        with contextlib.suppress(OSError):  # it may have ended already (a file it refused)
            os.write(self._approve_fd, b"y")
        self._close()

    def discard(self) -> None:
        """Stop it and reap it (waiting, it withdraws at the end of its approval pipe)."""
        self._close()
        with contextlib.suppress(OSError):
            self.child.kill()
        with contextlib.suppress(Exception):
            self.child.communicate()

    def _close(self) -> None:
        if self._approve_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._approve_fd)
            self._approve_fd = -1


#: The key :func:`prestart_replayer` holds its replayer under (:func:`wrpkit.run.contain.spawn.hold`).
REPLAYER_KEY = "wrp-replay"


def prestart_replayer(file, request: ReplayRequest, modules_dir=None, approve_above: Optional[int] = 0) -> None:
    """Start wrp-replay for ``file`` now, for the native engine's next :meth:`NativeEngine.replay` to use.

    ``wrp replay --engine native`` calls it before it imports the model: wrp-replay's
    start, Warp's libraries and the mapping of the file then overlap this
    process's own reading and checks.  The replay uses it only if the command
    line it forms is the same (no inputs or outputs, the same modules folder);
    otherwise it is stopped and a new one started, so a wrong guess costs time,
    never an answer.  Nothing is started when wrp-replay is not installed.

    Args:
        file: The capture's path, as the replay will resolve it.
        request: The replay's request (no inputs or outputs).
        modules_dir: The modules folder the user named, or None.
        approve_above: Files declaring more than this many bytes wait for the
            checks before they allocate (0: every file waits; None: none does).
    """
    paths = native_paths()
    if paths.replayer is None:
        discard_prestarted(REPLAYER_KEY)
        return
    path = Path(os.fspath(file))
    if path.suffix.lower() == ".json":
        discard_prestarted(REPLAYER_KEY)
        return  # replayed from a bundle made of it in memory, once it is read (NativeEngine._source)
    if modules_dir is None and path.suffix.lower() != ".wrpk":
        from ...module_dirs import find_modules_dir  # noqa: PLC0415

        modules_dir = find_modules_dir(path)  # as the file's own reader finds it
    args = replayer_args(paths.replayer, os.fspath(path), request, modules_dir)
    pending = held(REPLAYER_KEY)
    if pending is not None and pending.args == args and pending.approve_above == approve_above:
        # Started earlier for the same command line (wrpkit/cli/replay_start.py); a small capture's
        # may have replayed already: its report waits in its pipes, read as any replayer's.
        return
    discard_prestarted(REPLAYER_KEY)
    read_end, write_end = os.pipe() if approve_above is not None else (-1, -1)
    wait = ["--approve-fd", str(read_end), "--approve-above", str(int(approve_above))] if read_end >= 0 else []
    try:
        child = subprocess.Popen(args + wait, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=paths.env(),
                                 pass_fds=((read_end,) if read_end >= 0 else ()) + _kernel_fds(request))
    except OSError:
        if write_end >= 0:
            os.close(write_end)
        return  # the replay starts its own and reports why it cannot
    finally:
        if read_end >= 0:
            os.close(read_end)
    hold(REPLAYER_KEY, PrestartedReplayer(args, child, write_end, approve_above), PrestartedReplayer.discard)


def _run_replayer(exe: Path, args: list, env: dict, fds: list, request: ReplayRequest,
                  started: Optional[subprocess.Popen] = None) -> subprocess.CompletedProcess:
    """Run wrp-replay (or wait for the one ``started``) to its end, calling ``request.while_replaying``
    meanwhile; its exit code and output.

    Raises:
        WrpRuntimeError: It cannot be started.
    """
    child = started
    if child is None:
        try:
            child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     pass_fds=tuple(fds) + _kernel_fds(request))
        except OSError as e:
            from ...limits import is_resource_error, resource_error  # noqa: PLC0415

            if is_resource_error(e):  # no process, file or memory left for it: the limit in words
                raise resource_error(e, f"run {exe}") from None
            raise _unavailable(WrpRuntimeError(f"cannot run {exe}: {e}")) from None  # auto: python instead
    with child:
        try:
            if request.while_replaying is not None:
                request.while_replaying()
            # wrp-replay stops itself; this timeout is only a backstop (it kills the child)
            wait = left(request.deadline)
            out, err = child.communicate(timeout=None if wait is None else wait + 30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return subprocess.CompletedProcess(args, EXIT_TIMEOUT, "", "")
        except BaseException:  # Ctrl-C: the replayer does not outlive this process
            child.kill()
            raise
    return subprocess.CompletedProcess(args, child.returncode, out, err)


def _kernel_fds(request: ReplayRequest) -> tuple:
    """The descriptor ``--kernel-output-fd`` names (:func:`replayer_args`), for ``pass_fds``."""
    return (request.kernel_output.fd(),) if request.kernel_output is not None else ()


def _native_timings(report: dict) -> Optional[list]:
    """Per-replay host times in ms from ``wrp-replay --json`` (``timings.replays_ms``)."""
    t = report.get("timings")
    if not isinstance(t, dict):
        return None
    v = t.get("replays_ms")
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
        return [float(x) for x in v]
    if isinstance(t.get("median_ms"), (int, float)):
        return [float(t.get("min_ms", t["median_ms"])), float(t["median_ms"]), float(t.get("max_ms", t["median_ms"]))]
    return None


def _native_crash(prep, returncode: int, request: ReplayRequest, crash=None):
    """The WrpCrashError for a ``wrp-replay`` that crashed.

    wrp-replay says what happened in its ``--json`` error's ``crash`` object: the ``signal``, the
    ``stage`` (``"loading"`` or ``"replaying"``) and, from its op slot, ``op_index`` and ``path``
    (or ``unknown``: why no op is named).  Only when it could not say (killed before it reported) is
    the signal taken from its exit status and the op named here, by the same second run with op
    slots (unless ``request.identify`` is off).
    """
    import signal as sig  # noqa: PLC0415

    from ...op_slots import SECOND_RUN  # noqa: PLC0415
    from ..contain.crash import Located, crash_error, identify_crash  # noqa: PLC0415

    crash = crash if isinstance(crash, dict) else {}
    signum = -returncode if returncode < 0 else 0
    named = crash.get("signal")
    if not signum and isinstance(named, str) and named.startswith("SIG") and hasattr(sig, named):
        signum = int(getattr(sig, named))
    loading = crash.get("stage") == "loading"
    found, path, unknown = crash.get("op_index"), crash.get("path"), crash.get("unknown")
    if loading:
        located = Located()
    elif isinstance(found, int) and 0 <= found < len(prep.model.ops):
        located = Located(found, path if isinstance(path, str) else None, "")
    elif isinstance(unknown, str) and unknown:  # wrp-replay's second run said why (AFTER_LAST_OP among them)
        located = Located(why=unknown)
    elif request.identify:
        located = identify_crash(prep, request.device, dict(request.inputs), request.replays)
    else:
        located = Located()
    return crash_error(prep, signum or int(sig.SIGSEGV), "loading" if loading else "replaying", located.index,
                       located.why, verify_checksums=request.verify_checksums, path=located.path, how=SECOND_RUN)


def _npy_memory_file(arr: np.ndarray, name: str) -> int:
    """A memory file (no name on disk) holding ``arr`` as ``.npy``; its fd, at offset 0."""
    import numpy as np  # noqa: PLC0415

    from ..contain.shared import memory_file  # noqa: PLC0415

    fd = memory_file(name)
    with os.fdopen(os.dup(fd), "wb") as f:
        np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_npy_fd(fd: int, what: str) -> np.ndarray:
    """The array a ``.npy`` memory file holds, mapped (no copy)."""
    import numpy as np  # noqa: PLC0415

    try:
        return np.load(f"/proc/self/fd/{fd}", mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise WrpRuntimeError(f"cannot read {what}: {e}") from None


__all__ = ["native_paths", "NativePaths", "NATIVE_EXE", "NATIVE_LIB", "ReplayRequest", "EngineRun", "PythonEngine",
           "NativeEngine", "ENGINES", "engine", "typed_like", "replayer_args", "prestart_replayer", "REPLAYER_KEY",
           "PrestartedReplayer", "ENGINE_CHOICES", "EngineChoice", "choose_engine",
           "engine_unavailable", "NATIVE_REASON", "NATIVE_MAX_CASES_PER_WORKER"]
