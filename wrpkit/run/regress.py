"""``wrpkit.regress``: replay a folder of captures against their goldens, as CI does.

A suite is a folder.  Each case is a capture ``NAME.wrp`` (with
``NAME_modules/``) or ``NAME.wrpk``, with optional inputs
``NAME_inputs.npz`` and a golden ``NAME_expected.npz`` (the files the
samples write).  Cases nest in subfolders; a case's name is its path below
the suite, without the extension (``cloth/step``).  An optional
``wrp-suite.toml`` at the suite's root sets tolerances, devices, timeouts,
skips and expected failures (:func:`read_suite_config`).

Each case is validated (:func:`wrpkit.run.prepare.prepare` on its bytes),
then replayed contained, in a child process (the ``ReplayWorker`` of
``load(isolate=True)``; one warm child per worker, which loads each case in
turn, so Warp is imported once per worker, not once per case; or
``wrp-replay`` for ``engine="native"``), and compared with its golden
(:func:`wrpkit.checks.compare.compare_arrays`: values, shapes and dtypes,
NaN-aware).  Verdicts:

* ``pass``: every binding of the golden matches;
* ``fail``: it replays, but differs;
* ``error``: it cannot be used (invalid, another Warp version, no golden, a
  golden lacking an output binding, a crash, a timeout, a worker that died);
* ``skip``: it needs a device this machine lacks (or the suite says so);
* ``xfail`` / ``xpass``: a case the suite expects to fail did / did not.

Fan-out: serially (this process and one replay child), on ``jobs`` local
replay processes (each driven by a thread of this process), on a Dask distributed scheduler
(``dask="tcp://host:port"``) or a Ray cluster (``ray="auto"`` or an
address).  Remote workers get every case's files as bytes.  Results come
back in case order and equal a serial run's.
"""

from __future__ import annotations

import fnmatch
import io
import math
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..checks.compare import json_safe
from ..errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, WrpDeviceError, WrpError, WrpNotFoundError

#: The suite's settings file, at the suite's root.
SUITE_FILE = "wrp-suite.toml"
#: Every verdict, in the order summaries list them.
VERDICTS = ("pass", "fail", "error", "skip", "xfail", "xpass")
#: Seconds a case may take when neither the suite nor the caller says (a hang must not block CI).
DEFAULT_TIMEOUT = 300.0
#: Keys a ``[defaults]`` or ``[cases."PATTERN"]`` table may hold.
CASE_KEYS = {"rtol": (int, float), "atol": (int, float), "equal_nan": (bool,), "timeout": (int, float),
             "device": (str,), "expect": (str,), "skip": (str,), "reason": (str,)}


class WrpSchedulerError(WrpError):
    """The Dask scheduler or Ray cluster named cannot be reached (a usage error: check the address)."""

    exit_code = EXIT_USAGE


# ---------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------


@dataclass
class CaseSettings:
    """What a case is checked with (suite defaults, then the caller's options, then the case's own entry)."""

    rtol: float = 1e-5
    atol: float = 1e-6
    equal_nan: bool = False
    timeout: Optional[float] = DEFAULT_TIMEOUT
    device: Optional[str] = None  # None: the capture's own device family (cpu, or cuda:0)
    expect: Optional[str] = None  # "fail": known not to pass
    skip: Optional[str] = None  # a reason: never run
    reason: Optional[str] = None  # why it is expected to fail


@dataclass
class Case:
    """One capture of a suite and the files beside it.

    Attributes:
        name: Its path below the suite, without the extension (``sub/step``).
        capture: The ``.wrp`` or ``.wrpk``.
        modules_dir: ``NAME_modules/`` of a ``.wrp`` (None for a bundle).
        inputs: ``NAME_inputs.npz``, or None when there is none.
        golden: ``NAME_expected.npz`` (it may not exist yet).
        settings: The :class:`CaseSettings` it runs with.
    """

    name: str
    capture: Path
    modules_dir: Optional[Path]
    inputs: Optional[Path]
    golden: Path
    settings: CaseSettings = field(default_factory=CaseSettings)


def _toml_line(text: str, key: str) -> Optional[int]:
    """The line (1-based) where ``key`` is first written in a TOML text, for an error message."""
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith(key) or s.startswith(f'"{key}"') or f'"{key}"' in s or f"[{key}" in s:
            return i
    return None


def _config_error(path: Path, text: str, message: str, key: str) -> WrpError:
    line = _toml_line(text, key)
    where = f"{path}, line {line}" if line else str(path)
    return WrpError(f"{where}: {message}", hint=f"See docs/regress.md for the keys {SUITE_FILE} takes.")


def _check_table(path: Path, text: str, table: dict, where: str) -> dict:
    out = {}
    for key, value in table.items():
        if key not in CASE_KEYS:
            raise _usage(_config_error(path, text, f"unknown key {key!r} in {where} (known: "
                                       f"{', '.join(sorted(CASE_KEYS))})", key))
        types = CASE_KEYS[key]
        if not isinstance(value, types) or (bool in types) != isinstance(value, bool):
            want = "true or false" if bool in types else "a number" if int in types else "a string"
            raise _usage(_config_error(path, text, f"{key} in {where} must be {want}, not {value!r}", key))
        if key in ("rtol", "atol") and not (math.isfinite(value) and value >= 0):
            raise _usage(_config_error(path, text, f"{key} in {where} must be a finite number >= 0", key))
        if key == "timeout" and not (math.isfinite(value) and value > 0):
            raise _usage(_config_error(path, text, f"timeout in {where} must be a number of seconds above 0", key))
        if key == "expect" and value != "fail":
            raise _usage(_config_error(path, text, f'expect in {where} must be "fail", not {value!r}', key))
        if key == "device":
            from ..environment import parse_device  # noqa: PLC0415

            try:
                parse_device(value)
            except WrpError as e:
                raise _usage(_config_error(path, text, f"device in {where}: {e.message}", key)) from None
        out[key] = float(value) if key in ("rtol", "atol", "timeout") else value
    return out


def _usage(e: WrpError) -> WrpError:
    e.exit_code = EXIT_USAGE
    return e


def read_suite_config(path) -> tuple:
    """Read a ``wrp-suite.toml``: ``(defaults, [(pattern, settings)])``.

    The file has an optional ``[defaults]`` table and ``[cases."PATTERN"]``
    tables, PATTERN a case name or a glob (``"cloth/*"``); every table whose
    pattern matches a case applies to it, in the file's order.  Keys:
    ``rtol``, ``atol``, ``equal_nan``, ``timeout`` (seconds), ``device``,
    ``expect = "fail"`` with an optional ``reason``, and ``skip = "reason"``.

    Raises:
        WrpError: (exit 2) The file is not valid TOML (the message names the
            line), has an unknown table or key, or a value of the wrong type;
            or this Python has no ``tomllib`` (3.10).
    """
    path = Path(path)
    try:
        import tomllib  # noqa: PLC0415
    except ImportError:  # Python 3.10
        raise WrpError(f"cannot read {path}: reading {SUITE_FILE} needs Python 3.11 or newer (the standard "
                       f"library's tomllib); this is Python {sys.version.split()[0]}",
                       hint=f"Run wrp regress with Python 3.11+, or remove {SUITE_FILE} to use the defaults.") \
            from None
    from ..fileio import read_file  # noqa: PLC0415

    raw = bytes(read_file(path, "suite file"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _usage(WrpError(f"{path}: not UTF-8 text (byte {e.start})")) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _usage(WrpError(f"{path}: not valid TOML: {e}",
                              hint="Fix the line named; see docs/regress.md for an example.")) from None
    defaults, patterns = {}, []
    for key, value in data.items():
        if key == "defaults" and isinstance(value, dict):
            defaults = _check_table(path, text, value, "[defaults]")
        elif key == "cases" and isinstance(value, dict):
            for pattern, table in value.items():
                if not isinstance(table, dict):
                    raise _usage(_config_error(path, text, f"cases.{pattern} must be a table "
                                               f'([cases."{pattern}"])', pattern))
                patterns.append((pattern, _check_table(path, text, table, f'[cases."{pattern}"]')))
        else:
            raise _usage(_config_error(path, text, f"unknown table or key {key!r} (known: [defaults], "
                                       '[cases."PATTERN"])', key))
    return defaults, patterns


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def discover(suite, *, keyword: Optional[str] = None, overrides: Optional[dict] = None) -> list:
    """Every case of a suite folder, in path order.

    Args:
        suite: The suite folder.
        keyword: Keep only cases whose name contains it, or matches it as a
            glob when it holds ``*``, ``?`` or ``[``.
        overrides: Settings given by the caller (``device``, ``timeout``,
            ``rtol``, ...): above the suite's ``[defaults]``, below a case's
            own entry.

    Returns:
        A list of :class:`Case`.

    Raises:
        WrpNotFoundError: The suite folder does not exist (exit 2).
        WrpError: (exit 2) It is not a folder, holds no capture (or none
            matches ``keyword``), names one case twice (``x.wrp`` and
            ``x.wrpk``), or its ``wrp-suite.toml`` is bad.
    """
    root = Path(suite)
    if not root.exists():
        raise WrpNotFoundError(f"suite {root} does not exist",
                               hint="Pass a folder of captures (NAME.wrp or NAME.wrpk, with NAME_expected.npz).")
    if not root.is_dir():
        raise _usage(WrpError(f"suite {root} is not a folder",
                              hint="Pass the folder that holds the captures; `wrp replay FILE --check` checks one."))
    defaults, patterns = ({}, [])
    if (root / SUITE_FILE).exists():
        defaults, patterns = read_suite_config(root / SUITE_FILE)
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.endswith("_modules") and not d.startswith("."))
        here = Path(dirpath)
        for fn in sorted(filenames):
            if not fn.endswith((".wrp", ".wrpk")):
                continue
            p = here / fn
            stem = fn[: -len(p.suffix)]
            name = (here.relative_to(root) / stem).as_posix()
            if name in found:
                raise _usage(WrpError(f"case {name!r} is given twice: {found[name].capture.name} and {fn}",
                                      hint="Keep one of them (a .wrp and its bundle are the same capture)."))
            inputs = here / f"{stem}_inputs.npz"
            found[name] = Case(name, p, here / f"{stem}_modules" if p.suffix == ".wrp" else None,
                               inputs if inputs.exists() else None, here / f"{stem}_expected.npz")
    if not found:
        raise _usage(WrpError(f"suite {root} holds no captures (NAME.wrp or NAME.wrpk, in it or below it)",
                              hint="Write captures with wp.capture_save or wrpkit.save; the samples write "
                                   "NAME.wrp, NAME_inputs.npz and NAME_expected.npz."))
    cases = sorted(found.values(), key=lambda c: c.name)
    for c in cases:
        merged = dict(defaults)
        merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
        for pattern, table in patterns:
            if _matches(c.name, pattern):
                merged.update(table)
        c.settings = CaseSettings(**{**CaseSettings().__dict__, **merged})
    if keyword:
        globbed = any(ch in keyword for ch in "*?[")
        cases = [c for c in cases if (fnmatch.fnmatchcase(c.name, keyword) if globbed else keyword in c.name)]
        if not cases:
            raise _usage(WrpError(f"no case of {root} matches -k {keyword!r}",
                                  hint="Case names are paths below the suite without the extension "
                                       "(`wrp regress SUITE --json` lists them)."))
    return cases


# ---------------------------------------------------------------------------
# A case's result
# ---------------------------------------------------------------------------


@dataclass
class CaseResult:
    """The verdict of one case.

    Attributes:
        name: The case's name.
        verdict: One of :data:`VERDICTS`.
        message: Why it did not pass ("" when it did).
        hint: What to do about an error, or None.
        error_class: The wrpkit error behind an error or skip (``WrpCrashError``, ...), or None.
        exit_code: The exit code ``wrp replay`` would give this case alone.
        device: The device it ran (or would have run) on.
        engine: ``python`` or ``native``.
        seconds: Wall time of the case in its worker (read, validate, replay, compare), not
            counting ``worker_start_s``.
        worker_start_s: Time this case waited for its worker's replay child to start and
            import Warp (0 when the worker was warm).
        replay_ms: Host wall time of the replay itself (load excluded), or None.
        bindings: ``{binding: comparison}`` (:meth:`wrpkit.checks.compare.Comparison.to_json`).
        not_compared: Bindings the golden does not hold that are not outputs (inputs left out).
        worker: ``host:pid/thread`` that ran it (each thread drives its own replay child).
        updated: What ``update=True`` did to the golden ("wrote ...", "unchanged"), or None.
        expected: ``"fail"`` when the suite expects it not to pass.
    """

    name: str
    verdict: str
    message: str = ""
    hint: Optional[str] = None
    error_class: Optional[str] = None
    exit_code: int = 0
    device: Optional[str] = None
    engine: str = "python"
    seconds: float = 0.0
    worker_start_s: float = 0.0
    replay_ms: Optional[float] = None
    bindings: dict = field(default_factory=dict)
    not_compared: list = field(default_factory=list)
    worker: Optional[str] = None
    updated: Optional[str] = None
    expected: Optional[str] = None
    file: Optional[str] = None
    #: The replayed bindings (only with update=True; never in JSON).
    replayed: Optional[dict] = field(default=None, repr=False)

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "replayed"}
        return json_safe(d)


# ---------------------------------------------------------------------------
# Running one case (in a worker)
# ---------------------------------------------------------------------------


def _worker_name() -> str:
    """``host:pid/thread`` of the process and thread that ran a case (its replay child is that thread's)."""
    return f"{socket.gethostname()}:{os.getpid()}/{threading.current_thread().name}"


def _read_payload(job: dict) -> dict:
    """The case's files as bytes: from the job (a remote worker) or read here (a local one)."""
    if job.get("payload") is not None:
        return job["payload"]
    return read_case_files(job)


def read_case_files(job: dict) -> dict:
    """``{"capture", "modules", "inputs", "golden"}`` bytes of a case's files (None where absent).

    Raises:
        WrpError: A file that exists cannot be read.
    """
    from ..fileio import read_file  # noqa: PLC0415

    out = {"capture": bytes(read_file(job["capture"], "capture", follow_symlinks=True)), "modules": None,
           "inputs": None, "golden": None}
    mdir = job.get("modules_dir")
    if mdir is not None and os.path.isdir(mdir):
        out["modules"] = {}
        for entry in sorted(os.scandir(mdir), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False):
                out["modules"][entry.name] = bytes(read_file(entry.path, "module file"))
    for key in ("inputs", "golden"):
        p = job.get(key)
        if p is not None and os.path.isfile(p):
            out[key] = bytes(read_file(p, f"{key} file", follow_symlinks=True))
    return out


def _npz(data: bytes, what: str) -> dict:
    from ..fileio import npz_arrays  # noqa: PLC0415

    try:
        return npz_arrays(data)
    except ValueError as e:
        raise WrpError(f"{what} is not a valid .npz ({e})",
                       hint="Write it with numpy.savez(path, name=array, ...), or rewrite it with --update.") \
            from None


_cuda_count = None


def cuda_device_count() -> int:
    """CUDA devices this machine has, asked of the driver (``libcuda``) without importing Warp; 0 without one."""
    global _cuda_count
    if _cuda_count is None:
        import ctypes  # noqa: PLC0415

        n = 0
        try:
            lib = ctypes.CDLL("libcuda.so.1" if sys.platform != "win32" else "nvcuda.dll")
            count = ctypes.c_int(0)
            if lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0:
                n = int(count.value)
        except (OSError, AttributeError):
            n = 0
        _cuda_count = n
    return _cuda_count


class _Replayers(threading.local):
    """One warm replay child per thread (``-j`` threads, Dask worker threads)."""

    worker = None


_replayers = _Replayers()
_started_lock = threading.Lock()
_started: list = []  # every ReplayWorker made in this process, for close_replay_workers()


class WrpWorkerDied(WrpError):
    """The process replaying a case was killed from outside (not a crash of the capture's code)."""

    exit_code = EXIT_FAILED


def close_replay_workers() -> None:
    """End the warm replay children this process started (each thread's), after a run."""
    with _started_lock:
        workers, _started[:] = list(_started), []
    for w in workers:
        w.close()


def _replay_python(prep, device: str, state: dict, timeout: Optional[float]) -> tuple:
    """Replay once, contained in this thread's warm child: ``({binding: uint8 bytes}, host_ms, start s)``.

    A child killed by a signal that is not a crash (SIGKILL from the OOM
    killer or a person) fails the case as :class:`WrpWorkerDied`, without a
    search for the op.
    """
    import signal as sig  # noqa: PLC0415

    from .crash import located_crash  # noqa: PLC0415
    from ..errors import CRASH_SIGNAL_NUMBERS  # noqa: PLC0415
    from .worker import ChildCrashed, ReplayWorker  # noqa: PLC0415

    w = _replayers.worker
    if w is None or w.closed:  # none yet in this thread, or closed after a run
        w = _replayers.worker = ReplayWorker(prep, device)
        w.die_with_parent = True
        with _started_lock:
            _started.append(w)
    else:
        w.retarget(prep, device)
    t0 = time.perf_counter()
    cold = not (w.alive and w._warm)
    w.warm()
    started = time.perf_counter() - t0 if cold else 0.0
    t1 = time.monotonic()
    try:
        run = w.run(state, 1, 0, timeout)
    except ChildCrashed as crash:
        if crash.signum not in CRASH_SIGNAL_NUMBERS:
            name = sig.Signals(crash.signum).name if crash.signum in sig.Signals._value2member_map_ else \
                f"signal {crash.signum}"
            raise WrpWorkerDied(f"the worker process replaying it was killed ({name}, signal {crash.signum}) "
                                f"while {crash.stage}; the run went on",
                                hint="Something outside the replay ended it (the OOM killer, a person); rerun "
                                     "the case alone with `wrp replay`.") from None
        raise located_crash(w.prep, crash, w.device, state, 1, timeout, t1, True, True, w.source) from None
    return run.results, (run.host_ms[0] if run.host_ms else None), started


def _replay_native(prep, device: str, given: dict, timeout: Optional[float]) -> tuple:
    """Replay once with ``wrp-replay`` (:class:`~wrpkit.run.engines.NativeEngine`: its own crash
    containment and ``--timeout``; the capture, inputs and results pass through memory files):
    ``({binding: uint8 bytes}, host_ms)``."""
    from .engines import NativeEngine, ReplayRequest  # noqa: PLC0415

    request = ReplayRequest(device=device, inputs=given, timeout=timeout, read_back=list(prep.sizes), raw=True,
                            identify=False)
    run = NativeEngine().replay(prep, request)
    # Copies: the results are mappings of memory files, and a remote worker pickles them.
    results = {n: np.ascontiguousarray(a).reshape(-1).view(np.uint8).copy() for n, a in run.results.items()}
    return results, (run.host_ms[0] if run.host_ms else None)


def _typed(raw: np.ndarray, sig, hint) -> np.ndarray:
    """A binding's replayed bytes typed by its signature, else like the golden array for it."""
    from ..formats import annotations as ann  # noqa: PLC0415

    raw = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    if sig is not None:
        return np.array(ann.view_region(raw, sig), copy=True)
    if hint is not None:
        hint = np.asarray(hint)
        if not hint.dtype.hasobject and hint.nbytes == raw.nbytes:
            try:
                return raw.view(hint.dtype).reshape(hint.shape).copy()
            except (ValueError, TypeError):
                pass
    return raw.copy()


def _outputs(prep) -> list:
    """The bindings a golden must hold: the signature's outputs, and every binding a stock file does not type."""
    return [n for n in prep.sizes if prep.signature.get(n) is None or prep.signature[n].is_output]


def run_case(job: dict) -> CaseResult:
    """Validate, replay (contained) and compare one case; never raises.

    Args:
        job: A case as :func:`case_job` makes it (paths, settings, and for a
            remote worker the files' bytes in ``payload``).

    Returns:
        A :class:`CaseResult` (with ``replayed`` set when ``job["update"]``).
    """
    t0 = time.perf_counter()
    s = job["settings"]
    res = CaseResult(job["name"], "error", engine=job["engine"], worker=_worker_name(), expected=s.get("expect"),
                     file=job["capture"])
    try:
        _run_case(job, s, res)
    except WrpError as e:
        res.verdict, res.message, res.hint = "error", e.message, e.hint
        res.error_class, res.exit_code = type(e).__name__, e.exit_code
        if isinstance(e, WrpDeviceError):
            res.verdict = "skip"
    except Exception as e:  # noqa: BLE001  (a bug must fail its case, not the run)
        res.verdict, res.message = "error", f"internal error: {type(e).__name__}: {e}"
        res.error_class, res.exit_code = type(e).__name__, 70
        res.hint = "Rerun the case alone with `wrp replay` and WRP_DEBUG=1 for a traceback, and report it."
    res.seconds = time.perf_counter() - t0 - res.worker_start_s
    return res


def _run_case(job: dict, s: dict, res: CaseResult) -> None:
    from ..formats.container import open_capture  # noqa: F401,PLC0415  (warm the import before timing)
    from . import prepare as preparation  # noqa: PLC0415
    from ..model import DeviceType  # noqa: PLC0415

    payload = _read_payload(job)
    modules = payload["modules"]
    if job["modules_dir"] is not None and modules is None:
        from ..errors import WrpModuleError  # noqa: PLC0415

        raise WrpModuleError(f"the module folder {Path(job['modules_dir']).name}/ beside "
                             f"{Path(job['capture']).name} is missing",
                             hint="Copy the capture's <stem>_modules/ folder into the suite beside it, or bundle "
                                  "it into one file (wrp convert NAME.wrp NAME.wrpk).")
    prep = preparation.prepare(payload["capture"], modules if job["modules_dir"] is not None else None)
    try:
        family = "cpu" if prep.model.device_type == DeviceType.CPU else "cuda"
        device = s.get("device") or ("cpu" if family == "cpu" else "cuda:0")
        res.device = device
        asked = preparation.device_family(device)
        if asked != family:
            raise WrpDeviceError(f"captured for {family.upper()}, the case runs on {device}",
                                 hint=f"Set device for it in {SUITE_FILE}, or run the suite with --device.")
        if asked == "cuda":
            from ..environment import parse_device  # noqa: PLC0415

            index = parse_device(device)[1] or 0
            n = cuda_device_count()
            if index >= n:
                raise WrpDeviceError(f"needs {device}, and this machine has "
                                     f"{'no CUDA device' if n == 0 else f'{n} CUDA device(s)'}")
        preparation.check_runnable(prep.model, device, what=res.name)

        inputs = _npz(payload["inputs"], f"{Path(job['inputs']).name}") if payload["inputs"] is not None else {}
        state, given = {}, {}  # whole bindings as bytes (the python engine's child); as given (wrp-replay)
        for name, value in inputs.items():
            if name not in prep.sizes:
                raise preparation.unknown_binding(name, prep.sizes)
            arr = preparation.coerce_input(name, value, prep.sizes[name], prep.signature.get(name))
            given[name] = arr
            if arr.nbytes == prep.sizes[name]:
                state[name] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            else:  # a view binding: write through the signature, over the captured bytes
                from ..formats import annotations as ann  # noqa: PLC0415

                rid = next(b.region_id for b in prep.model.bindings if b.name == name)
                region = prep.model.region_map()[rid]
                data = getattr(region, "data", None)
                base = (np.frombuffer(bytes(memoryview(data)), np.uint8).copy()
                        if data is not None and len(memoryview(data)) == region.size
                        else np.zeros(region.size, np.uint8))
                ann.view_region(base, prep.signature[name])[...] = arr
                state[name] = base

        golden_name = Path(job["golden"]).name
        golden = _npz(payload["golden"], golden_name) if payload["golden"] is not None else None
        outputs = _outputs(prep)
        if golden is None and not job["update"]:
            raise WrpError(f"no golden {golden_name} beside the capture",
                           hint="Write it with `wrp regress SUITE --update` (or numpy.savez), after checking "
                                "the replay is right.")
        if golden is not None:
            unknown = [n for n in golden if n not in prep.sizes]
            if unknown:
                raise WrpError(f"golden {golden_name} holds {', '.join(repr(n) for n in unknown)}, which the "
                               f"capture has no binding of (bindings: {', '.join(prep.sizes)})",
                               hint="Rewrite the golden with --update, or rename its arrays.")
            missing = [n for n in outputs if n not in golden]
            if missing and not job["update"]:
                raise WrpError(f"golden {golden_name} lacks binding{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(repr(n) for n in missing)} (an output of the capture)",
                               hint="Add it, or rewrite the golden with `wrp regress SUITE --update`.")

        if job["engine"] == "native":
            raw, res.replay_ms = _replay_native(prep, device, given, s.get("timeout"))
        else:
            raw, res.replay_ms, res.worker_start_s = _replay_python(prep, device, state, s.get("timeout"))
    finally:
        preparation.release(prep)

    results = {n: _typed(raw[n], prep.signature.get(n), (golden or {}).get(n)) for n in raw}
    if job["update"]:
        res.replayed = {n: results[n] for n in dict.fromkeys([*(golden or {}), *outputs]) if n in results}
    if golden is None:
        res.verdict = "pass"
        return
    from ..checks.compare import compare_arrays, describe  # noqa: PLC0415

    bad = []
    for name, want in golden.items():
        c = compare_arrays(results[name], want, s["rtol"], s["atol"], equal_nan=s["equal_nan"], strict_dtype=True)
        res.bindings[name] = c.to_json()
        if not c.ok:
            bad.append(f"{name}: {describe(c)}")
    res.not_compared = [n for n in prep.sizes if n not in golden]
    if bad:
        res.verdict, res.exit_code = "fail", EXIT_FAILED
        noun = "binding differs" if len(bad) == 1 else "bindings differ"
        res.message = f"{len(bad)} {noun} (of {len(golden)} compared): " + "; ".join(bad)
    else:
        res.verdict = "pass"


def case_job(case: Case, engine: str, update: bool) -> dict:
    """A case as a plain, picklable job for a worker (files by path; :func:`with_payload` adds their bytes)."""
    return {"name": case.name, "capture": os.fspath(case.capture),
            "modules_dir": None if case.modules_dir is None else os.fspath(case.modules_dir),
            "inputs": None if case.inputs is None else os.fspath(case.inputs), "golden": os.fspath(case.golden),
            "settings": dict(case.settings.__dict__), "engine": engine, "update": update, "payload": None}


def with_payload(job: dict) -> dict:
    """The job with its files' bytes, for a worker that may not share this machine's files.

    Raises:
        WrpError: A file cannot be read here.
    """
    return dict(job, payload=read_case_files(job))


def _unreadable(job: dict, e: WrpError) -> CaseResult:
    return CaseResult(job["name"], "error", message=e.message, hint=e.hint, error_class=type(e).__name__,
                      exit_code=e.exit_code, engine=job["engine"], device=job["settings"].get("device"),
                      file=job["capture"])


# ---------------------------------------------------------------------------
# Fan-out
# ---------------------------------------------------------------------------


def _finish(job: dict, res: CaseResult) -> CaseResult:
    """Verdicts the suite decides: expected failures."""
    s = job["settings"]
    if s.get("expect") == "fail":
        if res.verdict in ("fail", "error"):
            res.message = f"expected to fail{': ' + s['reason'] if s.get('reason') else ''} ({res.verdict}: " \
                          f"{res.message})"
            res.verdict = "xfail"
        elif res.verdict == "pass":
            res.verdict, res.exit_code = "xpass", EXIT_FAILED
            res.message = "expected to fail" + (f" ({s['reason']})" if s.get("reason") else "") + \
                ", but passed: remove expect from its entry in " + SUITE_FILE
    return res


def _skipped(job: dict) -> CaseResult:
    return CaseResult(job["name"], "skip", message=f"skipped by {SUITE_FILE}: {job['settings']['skip']}",
                      engine=job["engine"], device=job["settings"].get("device"), file=job["capture"])


def _died(job: dict, why: str) -> CaseResult:
    return CaseResult(job["name"], "error", message=f"the worker running it died ({why}); the run went on",
                      hint="Rerun the case alone with `wrp replay` to see why.", error_class="WrpWorkerDied",
                      exit_code=EXIT_FAILED, engine=job["engine"], device=job["settings"].get("device"),
                      file=job["capture"])


def _run_local(jobs: list, n_workers: int, done: Callable) -> None:
    """Run ``jobs`` on ``n_workers`` threads, each driving its own warm replay child process.

    The replays (loading and running the capture) happen in the children, in
    parallel; a thread only validates, sends the bindings and compares.  A
    child that dies fails only its case; the thread starts a new one for the next.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed  # noqa: PLC0415

    pool = ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="wrp-regress")
    try:
        futures = {pool.submit(run_case, job): i for i, job in enumerate(jobs)}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())  # here, in this thread: one at a time
    finally:
        # On Ctrl-C, end the replay children first, so that no thread waits for a case to finish.
        pool.shutdown(wait=False, cancel_futures=True)
        close_replay_workers()
        pool.shutdown(wait=True)
        close_replay_workers()  # any a thread started while the first round closed


def _run_serial(jobs: list, done: Callable) -> None:
    try:
        for i, job in enumerate(jobs):
            done(i, run_case(job))
    finally:
        close_replay_workers()
        _replayers.worker = None


def _run_dask(jobs: list, address: str, done: Callable, connect_timeout: float) -> str:
    try:
        from distributed import Client, as_completed  # noqa: PLC0415
    except ImportError:
        raise _usage(WrpError("--dask needs the distributed package, which is not installed",
                              hint="pip install 'wrpkit[dask]'")) from None
    try:
        client = Client(address, timeout=f"{connect_timeout}s", set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise WrpSchedulerError(f"cannot reach the Dask scheduler at {address}: {e}",
                                hint="Start one (`dask scheduler` and `dask worker ADDRESS`) or check the "
                                     "address (tcp://HOST:PORT).") from None
    except ValueError as e:
        raise WrpSchedulerError(f"not a Dask scheduler address: {address!r} ({e})",
                                hint="Give it as tcp://HOST:PORT.") from None
    try:
        n = len(client.scheduler_info().get("workers", {}))
        futures = {}
        window = max(2, 2 * max(1, n))
        it = iter(range(len(jobs)))
        ac = as_completed(loop=client.loop)

        def submit_next():
            while True:
                i = next(it, None)
                if i is None:
                    return
                try:
                    job = with_payload(jobs[i])
                except WrpError as e:  # a file that cannot be read here: that case only
                    done(i, _unreadable(jobs[i], e))
                    continue
                fut = client.submit(run_case, job, pure=False, key=f"wrp-regress-{os.getpid()}-{time.time_ns()}-{i}")
                futures[fut] = i
                ac.add(fut)
                return

        for _ in range(window):
            submit_next()
        for fut in ac:
            i = futures.pop(fut)
            try:
                res = fut.result()
            except Exception as e:  # noqa: BLE001  (KilledWorker, a lost connection: this case only)
                res = _died(jobs[i], f"{type(e).__name__}: {e}")
            done(i, res)
            submit_next()
        return f"dask {address} ({n} worker{'s' if n != 1 else ''})"
    finally:
        client.close()


def _run_ray(jobs: list, address: str, done: Callable) -> str:
    try:
        import ray  # noqa: PLC0415
    except ImportError:
        raise _usage(WrpError("--ray needs the ray package, which is not installed",
                              hint="pip install 'wrpkit[ray]'")) from None
    started_here = not ray.is_initialized()
    try:
        if started_here:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except Exception as e:  # noqa: BLE001  (ConnectionError, RuntimeError: Ray raises several)
        raise WrpSchedulerError(f"cannot reach the Ray cluster at {address}: {type(e).__name__}: {e}",
                                hint="Start one (`ray start --head`) or check the address (auto, HOST:PORT, "
                                     "ray://HOST:PORT).") from None
    try:
        remote = ray.remote(max_retries=0)(run_case)
        refs = {}
        for i, job in enumerate(jobs):
            try:
                refs[remote.remote(with_payload(job))] = i
            except WrpError as e:  # a file that cannot be read here: that case only
                done(i, _unreadable(job, e))
        left = list(refs)
        while left:
            ready, left = ray.wait(left, num_returns=1)
            for ref in ready:
                i = refs[ref]
                try:
                    res = ray.get(ref)
                except Exception as e:  # noqa: BLE001  (a worker that died)
                    res = _died(jobs[i], f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                done(i, res)
        return f"ray {address}"
    finally:
        if started_here:
            ray.shutdown()


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------


def _write_golden(case_res: CaseResult, golden: Path, settings: dict) -> str:
    """Write a case's replayed bindings as its golden if they differ from it; say what changed."""
    from ..checks.compare import compare_arrays  # noqa: PLC0415
    from ..fileio import atomic_write  # noqa: PLC0415

    new = case_res.replayed or {}
    old = {}
    if golden.is_file():
        try:
            old = _npz(golden.read_bytes(), golden.name)
        except WrpError:
            old = {}
    changes = []
    for name, arr in new.items():
        if name not in old:
            changes.append(f"{name} added")
            continue
        c = compare_arrays(arr, old[name], settings["rtol"], settings["atol"], equal_nan=settings["equal_nan"],
                           strict_dtype=True)
        if not c.ok:
            what = f"max abs {c.max_abs:.3g}" if c.max_abs else c.reason or "changed"
            changes.append(f"{name} changed ({c.mismatches} element{'s' if c.mismatches != 1 else ''}, {what})"
                           if c.mismatches else f"{name} changed ({c.reason})")
    for name in old:
        if name not in new:
            changes.append(f"{name} removed")
    if not changes and golden.is_file():
        return "unchanged"
    buf = io.BytesIO()
    np.savez(buf, **new)
    atomic_write(golden, [buf.getvalue()])
    return f"wrote {golden.name}: " + (", ".join(changes) if old else "new golden")


@dataclass
class RegressReport:
    """The verdicts of a suite, in case order.

    Attributes:
        suite: The suite folder.
        cases: One :class:`CaseResult` per case, in case order.
        engine, device: The options the run was given (device None: each case's own).
        warp_version: The Warp that replayed (the installed one).
        ran_on: ``serial``, ``2 local workers``, ``dask tcp://... (2 workers)``, ``ray ...``.
        seconds: Wall time of the whole run.
        started: When it started (ISO 8601, UTC).
    """

    suite: str
    cases: list
    engine: str = "python"
    device: Optional[str] = None
    warp_version: Optional[str] = None
    ran_on: str = "serial"
    seconds: float = 0.0
    started: str = ""
    update: bool = False

    def _with(self, *verdicts) -> list:
        return [c for c in self.cases if c.verdict in verdicts]

    @property
    def passed(self) -> list:
        """Cases that passed (expected failures that failed included)."""
        return self._with("pass", "xfail")

    @property
    def failed(self) -> list:
        """Cases that replayed and differ (and expected failures that passed)."""
        return self._with("fail", "xpass")

    @property
    def errors(self) -> list:
        """Cases that could not be used."""
        return self._with("error")

    @property
    def skipped(self) -> list:
        return self._with("skip")

    @property
    def ok(self) -> bool:
        """No case failed or errored."""
        return not self.failed and not self.errors

    @property
    def exit_code(self) -> int:
        """0 when every case passed (or was skipped), 1 when any failed or errored."""
        return EXIT_OK if self.ok else EXIT_FAILED

    def counts(self) -> dict:
        return {v: sum(1 for c in self.cases if c.verdict == v) for v in VERDICTS}

    def to_json(self) -> dict:
        """The report as JSON-able data: run fields, counts, and one record per case."""
        return json_safe({"suite": self.suite, "engine": self.engine, "device": self.device,
                           "warp_version": self.warp_version, "ran_on": self.ran_on, "started": self.started,
                           "seconds": self.seconds, "update": self.update, "ok": self.ok,
                           "exit_code": self.exit_code, "counts": self.counts(),
                           "cases": [c.to_json() for c in self.cases]})

    def to_junit(self) -> str:
        """JUnit XML as CI systems read it (one ``testcase`` per case)."""
        from .regress_report import junit_xml  # noqa: PLC0415

        return junit_xml(self)

    def to_html(self) -> str:
        """A self-contained page (no script, no fetch: a Content-Security-Policy forbids both)."""
        from .regress_report import html_page  # noqa: PLC0415

        return html_page(self)


def regress(suite, *, jobs: int = 1, device: Optional[str] = None, engine: str = "python",
            timeout: Optional[float] = None, update: bool = False, keyword: Optional[str] = None,
            dask: Optional[str] = None, ray: Optional[str] = None, rtol: Optional[float] = None,
            atol: Optional[float] = None, equal_nan: Optional[bool] = None,
            progress: Optional[Callable] = None, connect_timeout: float = 10.0) -> RegressReport:
    """Replay every case of a suite against its golden and return the verdicts.

    Args:
        suite: The suite folder (see the module's documentation).
        jobs: Local worker processes (1: serially, in this process and one replay child).
        device: The device for cases that name none (default: the capture's
            own family, ``cpu`` or ``cuda:0``).
        engine: ``"python"`` (Warp's Python API in a contained child) or
            ``"native"`` (``wrp-replay``).
        timeout: Seconds per case for loading and replaying, where the suite
            sets none (default :data:`DEFAULT_TIMEOUT`).
        update: Write missing or changed goldens (atomically) from the
            replays; each case's ``updated`` says what changed.
        keyword: Run only the cases whose name contains it (or matches it as a glob).
        dask: A Dask scheduler address (``tcp://HOST:PORT``) to run the cases on.
        ray: A Ray cluster address (``auto``, ``HOST:PORT``) to run the cases on.
        rtol, atol, equal_nan: Tolerances where the suite sets none.
        progress: Called as ``progress(done, total, result)`` after each case (in completion order).
        connect_timeout: Seconds to wait for the Dask scheduler.

    Returns:
        A :class:`RegressReport`.

    Raises:
        WrpNotFoundError: The suite does not exist (exit 2).
        WrpSchedulerError: The scheduler or cluster cannot be reached (exit 2).
        WrpError: (exit 2) Bad options, an empty suite, a bad ``wrp-suite.toml``.
    """
    import datetime  # noqa: PLC0415

    if dask and ray:
        raise _usage(WrpError("give --dask or --ray, not both"))
    if engine not in ("python", "native"):
        raise _usage(WrpError(f"engine must be python or native, not {engine!r}"))
    if int(jobs) < 1:
        raise _usage(WrpError(f"-j must be at least 1, not {jobs}"))
    if device is not None:
        from ..environment import parse_device  # noqa: PLC0415

        try:
            parse_device(device)
        except WrpError as e:
            raise _usage(e) from None
    if engine == "native":
        from .engines import native_paths  # noqa: PLC0415

        native_paths().require_replayer()  # refuse now, not once per case
    overrides = {"device": device, "timeout": timeout, "rtol": rtol, "atol": atol, "equal_nan": equal_nan}
    cases = discover(suite, keyword=keyword, overrides=overrides)
    if update:
        for c in cases:  # the goldens' folders must be writable before any long work
            if not os.access(c.golden.parent, os.W_OK):
                from ..errors import WrpIOError  # noqa: PLC0415

                raise WrpIOError(f"cannot write {c.golden}: its folder is not writable",
                                 hint="Run --update where you may write the suite's files.")
    all_jobs = [case_job(c, engine, update) for c in cases]
    results: list = [None] * len(all_jobs)
    run_jobs, index = [], []
    for i, job in enumerate(all_jobs):
        if job["settings"].get("skip"):
            results[i] = _skipped(job)
        else:
            run_jobs.append(job)
            index.append(i)
    count = [sum(r is not None for r in results)]

    def done(k, res):
        i = index[k]
        results[i] = _finish(all_jobs[i], res)
        count[0] += 1
        if progress is not None:
            progress(count[0], len(all_jobs), results[i])

    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    if dask:
        ran_on = _run_dask(run_jobs, dask, done, connect_timeout)
    elif ray:
        ran_on = _run_ray(run_jobs, ray, done)
    elif int(jobs) > 1 and len(run_jobs) > 1:
        _run_local(run_jobs, int(jobs), done)
        ran_on = f"{int(jobs)} local workers"  # threads, each with its own replay process
    else:
        _run_serial(run_jobs, done)
        ran_on = "serial"
    if update:
        for case, res in zip(cases, results):
            if res.replayed is None or res.expected == "fail":
                if res.expected == "fail" and res.replayed is not None:
                    res.updated = "not written: the case is expected to fail"
                continue
            res.updated = _write_golden(res, case.golden, case.settings.__dict__)
            if res.verdict == "fail":  # the golden now holds what the replay gave
                res.verdict, res.exit_code, res.message = "pass", EXIT_OK, ""
            res.replayed = None
    from ..environment import installed_warp_version  # noqa: PLC0415

    return RegressReport(os.fspath(suite), results, engine, device, installed_warp_version(), ran_on,
                         time.perf_counter() - t0, started, update)


__all__ = ["regress", "discover", "read_suite_config", "run_case", "RegressReport", "CaseResult", "Case",
           "CaseSettings", "VERDICTS", "SUITE_FILE", "WrpSchedulerError", "cuda_device_count"]
