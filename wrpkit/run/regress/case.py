"""One ``wrp regress`` case in a worker: read its files, validate, replay contained, compare with its golden.

:func:`run_case` takes a plain, picklable job (:func:`case_job`; with its
files' bytes from :func:`with_payload` for a remote worker) and never
raises: every problem becomes the :class:`CaseResult`'s verdict.  The
python engine replays in a warm ``ReplayWorker`` child, one per thread
(:func:`close_replay_workers` ends them); the native engine in ``wrp-replay``.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ...deadline import Deadline
from ...records import field, fields, record
from ...checks.json_values import json_safe
from ...errors import EXIT_FAILED, WrpDeviceError, WrpError
from ...atomic_writes import pwrite_all
from ...limits import is_resource_error, resource_error
from .suite import SUITE_FILE, Case

#: Every verdict, in the order summaries list them.
VERDICTS = ("pass", "fail", "error", "skip", "xfail", "xpass")


@record
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
        started: When its worker began it (Unix time, seconds; the worker's clock): it
            waited ``worker_start_s`` for a cold replay child, then took ``seconds``, so
            it ended at ``started + worker_start_s + seconds``.  A timeline of a run.
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
        raw_bytes: Bindings compared (or written as a golden) as raw bytes, because
            neither the capture nor the golden gives them a dtype: tolerances do
            not apply to them, any changed byte fails.
    """

    name: str
    verdict: str
    message: str = ""
    hint: Optional[str] = None
    error_class: Optional[str] = None
    exit_code: int = 0
    device: Optional[str] = None
    engine: str = "python"
    started: Optional[float] = None
    seconds: float = 0.0
    worker_start_s: float = 0.0
    replay_ms: Optional[float] = None
    bindings: dict = field(default_factory=dict)
    not_compared: list = field(default_factory=list)
    worker: Optional[str] = None
    updated: Optional[str] = None
    expected: Optional[str] = None
    file: Optional[str] = None
    raw_bytes: list = field(default_factory=list)
    #: The replayed bindings (only with update=True; never in JSON).
    replayed: Optional[dict] = field(default=None, repr=False)

    @property
    def compared_nothing(self) -> bool:
        """It passed with no binding compared (an empty golden: see :func:`nothing_compared`)."""
        return self.verdict == "pass" and not self.bindings and not self.updated

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
    from ...file_reads import read_file  # noqa: PLC0415

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


def read_npz(data: bytes, what: str) -> dict:
    """The arrays of an ``.npz`` file's bytes (``what`` names it in the error).

    Raises:
        WrpError: It is not a valid ``.npz``.
    """
    from ...numpy_files import npz_arrays  # noqa: PLC0415

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
    """End the warm replay children this process started (each thread's), after a run, and drop this thread's."""
    with _started_lock:
        workers, _started[:] = list(_started), []
    for w in workers:
        w.close()
    _replayers.worker = None


def _warm_worker(prep, device: str, zygote) -> tuple:
    """``(this thread's ReplayWorker, seconds it took to start)``: warm, retargeted to ``prep`` (None: a case
    the child reads itself), its child forked from ``zygote`` when one is given."""
    from ..contain.worker import ReplayWorker  # noqa: PLC0415

    w = _replayers.worker
    if w is None or w.closed:  # none yet in this thread, or closed after a run
        w = _replayers.worker = ReplayWorker(prep, device)
        w.die_with_parent = True
        w.zygote = zygote
        with _started_lock:
            _started.append(w)
    elif prep is not None:
        w.retarget(prep, device)
    if zygote is not None and not zygote.dead:
        w.zygote = zygote  # a remote worker's zygote, replaced after it died (regress_fanout.remote_zygote)
    t0 = time.perf_counter()
    cold = not (w.alive and w._warm)
    w.warm()
    return w, (time.perf_counter() - t0 if cold else 0.0)


def _worker_died(crash) -> WrpError:
    """The error of a case whose child a signal that is no crash ended (SIGKILL: the OOM killer, a person)."""
    import signal as sig  # noqa: PLC0415

    name = sig.Signals(crash.signum).name if crash.signum in sig.Signals._value2member_map_ else \
        f"signal {crash.signum}"
    return WrpWorkerDied(f"the worker process replaying it was killed ({name}, signal {crash.signum}) "
                         f"while {crash.stage}; the run went on",
                         hint="Something outside the replay ended it (the OOM killer, a person); rerun "
                              "the case alone with `wrp replay`.")


def _replay_native(prep, device: str, given: dict, timeout: Optional[float]) -> tuple:
    """Replay once with ``wrp-replay`` (:class:`~wrpkit.run.replay.engines.NativeEngine`: its own crash
    containment and ``--timeout``; the capture, inputs and results pass through memory files):
    ``({binding: uint8 bytes}, host_ms)``."""
    from ..replay.engines import NativeEngine, ReplayRequest  # noqa: PLC0415

    request = ReplayRequest(device=device, inputs=given, deadline=Deadline.after(timeout), read_back=list(prep.sizes), raw=True,
                            identify=False)
    run = NativeEngine().replay(prep, request)
    # Copies: the results are mappings of memory files, and a remote worker pickles them.
    results = {n: np.ascontiguousarray(a).reshape(-1).view(np.uint8).copy() for n, a in run.results.items()}
    return results, (run.host_ms[0] if run.host_ms else None)


def _typed(raw: np.ndarray, sig, hint) -> np.ndarray:
    """A binding's replayed bytes typed by its signature, else like the golden array for it."""
    from ...formats import annotations as ann  # noqa: PLC0415

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


def run_case(job: dict, zygote=None) -> CaseResult:
    """Validate, replay (contained) and compare one case; never raises.

    A python-engine case is read, validated, replayed and compared in this
    thread's warm replay child (:meth:`~wrpkit.run.contain.worker.ReplayWorker.run_case`),
    so that ``-j N`` threads, and a Dask or Ray worker's threads beside its
    own event loop, do next to nothing under this process's one interpreter
    lock.  A remote worker's case brings its files' bytes (``payload``):
    they go to the child in one memory file (:func:`payload_to_file`).  The
    native engine's case is validated and compared here.  Either way the
    verdict is the same code's (:func:`_run_case`).

    Args:
        job: A case as :func:`case_job` makes it (paths, settings, and for a
            remote worker the files' bytes in ``payload``).
        zygote: The :class:`~wrpkit.run.contain.zygote.Zygote` to fork this thread's
            replay child from: the run's, or a remote worker process's own
            (:func:`wrpkit.run.regress.fanout.remote_zygote`); None: start it
            as ``wrp replay`` does.

    Returns:
        A :class:`CaseResult` (with ``replayed`` set when ``job["update"]``).
    """
    t0 = time.perf_counter()
    s = job["settings"]
    res = CaseResult(job["name"], "error", engine=job["engine"], worker=_worker_name(), expected=s.get("expect"),
                     file=job["capture"], started=time.time())
    if job["engine"] == "native":
        _verdict(res, lambda: _run_case(job, s, res, lambda prep, device, state, given, timeout:
                                        (*_replay_native(prep, device, given, timeout), 0.0)))
    else:
        _verdict(res, lambda: _case_in_child(job, s, res, zygote))
    res.seconds = time.perf_counter() - t0 - res.worker_start_s
    return res


def run_cases(jobs: list, zygote=None, seconds: Optional[float] = None) -> list:
    """:func:`run_case` for each of ``jobs`` in turn, in this thread's warm child: one Dask task, several cases.

    Args:
        jobs: The cases.
        zygote: As for :func:`run_case`.
        seconds: Start no case once the cases run took this long between
            them (their ``seconds``; the first always runs); None: run them all.

    Returns:
        One :class:`CaseResult` per job run, in order: all of them, or the
        first few when ``seconds`` ran out.
    """
    results, spent = [], 0.0
    for job in jobs:
        if results and seconds is not None and spent >= seconds:
            break
        results.append(run_case(job, zygote))
        spent += results[-1].seconds  # a cold child's start not counted: it is paid once, not per case
    return results


def _verdict(res: CaseResult, work) -> None:
    """Run ``work()``; an error it raises becomes ``res``'s verdict (a device this machine lacks: a skip)."""
    try:
        work()
    except WrpError as e:
        res.verdict, res.message, res.hint = "error", e.message, e.hint
        res.error_class, res.exit_code = type(e).__name__, e.exit_code
        if isinstance(e, WrpDeviceError):
            res.verdict = "skip"
    except Exception as e:  # noqa: BLE001  (a bug must fail its case, not the run)
        if is_resource_error(e):  # open files, processes, threads, memory: worded, with its exit code
            err = resource_error(e)
            res.verdict, res.message, res.hint = "error", err.message, err.hint
            res.error_class, res.exit_code = type(err).__name__, err.exit_code
            return
        res.verdict, res.message = "error", f"internal error: {type(e).__name__}: {e}"
        res.error_class, res.exit_code = type(e).__name__, 70
        res.hint = "Rerun the case alone with `wrp replay` and WRP_DEBUG=1 for a traceback, and report it."


#: CaseResult fields the replay child fills in (the rest are this process's: name, worker, times).
_CHILD_FIELDS = ("verdict", "message", "hint", "error_class", "exit_code", "device", "replay_ms", "bindings",
                 "not_compared", "raw_bytes")


def _case_in_child(job: dict, s: dict, res: CaseResult, zygote) -> None:
    """The case read, validated, replayed and compared in this thread's warm child; its fields into ``res``.

    A child killed by a signal that is not a crash (SIGKILL from the OOM
    killer or a person) fails the case as :class:`WrpWorkerDied`; one killed
    by a crash signal is validated here, and the op is found by replaying prefixes.
    """
    from ...errors import CRASH_SIGNAL_NUMBERS  # noqa: PLC0415
    from ..contain.served import ChildCrashed  # noqa: PLC0415

    w, started = _warm_worker(None, s.get("device") or "cpu", zygote)
    res.worker_start_s = started
    clock = Deadline.after(s.get("timeout"))  # what a search for a crashing op has left
    sent, files = (job, -1) if job.get("payload") is None else payload_to_file(job)
    try:
        answer, fds = w.run_case(sent, s.get("timeout"), files)
    except ChildCrashed as crash:
        if crash.signum not in CRASH_SIGNAL_NUMBERS:
            raise _worker_died(crash) from None
        from ..load import prepare as preparation  # noqa: PLC0415
        from ..contain.crash import located_crash  # noqa: PLC0415

        prep, device, state, _given, _golden, _outputs = _prepared_case(job, s, res)
        try:
            raise located_crash(prep, crash, device, state, 1, clock, True, True) from None
        finally:
            preparation.release(prep)
    finally:
        if files >= 0:
            os.close(files)
    for name in _CHILD_FIELDS:
        setattr(res, name, answer["result"][name])
    if fds:
        try:
            size = os.fstat(fds[0]).st_size
            res.replayed = read_npz(os.pread(fds[0], size, 0), "the replayed bindings") if size else {}
        finally:
            for f in fds:
                os.close(f)


def serve_case(job: dict, replay, validated) -> tuple:
    """The replay child's side of :meth:`~wrpkit.run.contain.worker.ReplayWorker.run_case`: one case, here.

    Args:
        job: The case (:func:`case_job`; its files are read here).
        replay: ``replay(prep, device, state)``: load and replay once in this process,
            ``({binding: uint8 bytes}, host ms)`` (:func:`wrpkit.run.contain.child.replay_here`).
        validated: Called once the case is validated, before it loads (the parent's timeout starts).

    Returns:
        ``({"result": {field: value}}, fds)``: the fields of :data:`_CHILD_FIELDS`,
        and with ``job["update"]`` a memory file holding the replayed bindings as ``.npz``.
    """
    s = job["settings"]
    res = CaseResult(job["name"], "error", engine=job["engine"], expected=s.get("expect"), file=job["capture"])

    def replay_here(prep, device, state, given, timeout):
        validated()
        return (*replay(prep, device, state), 0.0)

    _verdict(res, lambda: _run_case(job, s, res, replay_here))
    fds = []
    if res.replayed is not None:
        import io  # noqa: PLC0415

        from ..contain.shared import memory_file  # noqa: PLC0415

        buf = io.BytesIO()
        np.savez(buf, **res.replayed)
        fd = memory_file("wrpkit-replayed")
        pwrite_all(fd, buf.getbuffer(), 0)
        fds.append(fd)
    return {"result": {name: getattr(res, name) for name in _CHILD_FIELDS}}, fds


def payload_parts(payload: dict) -> dict:
    """A case's files' bytes (:func:`with_payload`'s ``payload``) by part: ``capture``, ``inputs``,
    ``golden`` where present, and ``modules/NAME`` for each module file."""
    parts = {k: payload[k] for k in ("capture", "inputs", "golden") if payload[k] is not None}
    parts.update({"modules/" + name: data for name, data in (payload["modules"] or {}).items()})
    return parts


def payload_to_file(job: dict) -> tuple:
    """A remote case for the replay child: ``(the job without its files' bytes, a memory file holding them)``.

    The bytes are laid out one after the other in one file (a case may have
    many module files); the job says where (``payload_at``).  The caller
    closes the file; :func:`payload_from_file` reads it back.
    """
    from ..contain.shared import layout, memory_file  # noqa: PLC0415

    payload = job["payload"]
    parts = payload_parts(payload)
    at, size = layout({k: len(v) for k, v in parts.items()})
    fd = memory_file("wrpkit-case-files")
    try:
        os.ftruncate(fd, size)
        for k, (offset, _n) in at.items():
            pwrite_all(fd, parts[k], offset)
    except BaseException:
        os.close(fd)
        raise
    return dict(job, payload=None, payload_at=at, payload_modules=payload["modules"] is not None), fd


def payload_from_file(job: dict, fd: int) -> dict:
    """The replay child's side of :func:`payload_to_file`: the job with its ``payload`` again (``fd`` stays open)."""
    modules = {} if job.get("payload_modules") else None
    payload = {"capture": None, "modules": modules, "inputs": None, "golden": None}
    for k, (offset, n) in job["payload_at"].items():
        data = bytearray()
        while len(data) < n:
            chunk = os.pread(fd, n - len(data), offset + len(data))
            if not chunk:
                break
            data += chunk
        if k.startswith("modules/"):
            modules[k[len("modules/"):]] = bytes(data)
        else:
            payload[k] = bytes(data)
    rest = {k: v for k, v in job.items() if k not in ("payload_at", "payload_modules")}
    return dict(rest, payload=payload)


def _prepared_case(job: dict, s: dict, res: CaseResult) -> tuple:
    """Read and validate a case and check it against its golden: ``(prep, device, state, given, golden, outputs)``.

    ``state`` holds the inputs as whole bindings' bytes (a replay child's
    form), ``given`` as given (``wrp-replay``'s).  The caller releases ``prep``.

    Raises:
        WrpError: The case cannot be used (its verdict).
    """
    from ...formats.container import open_capture  # noqa: F401,PLC0415  (warm the import before timing)
    from ..load import prepare as preparation  # noqa: PLC0415
    from ...apic_types import DeviceType  # noqa: PLC0415

    payload = _read_payload(job)
    modules = payload["modules"]
    if job["modules_dir"] is not None and modules is None:
        from ...errors import WrpModuleError  # noqa: PLC0415

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
            from ...environment import parse_device  # noqa: PLC0415

            index = parse_device(device)[1] or 0
            n = cuda_device_count()
            if index >= n:
                raise WrpDeviceError(f"needs {device}, and this machine has "
                                     f"{'no CUDA device' if n == 0 else f'{n} CUDA device(s)'}")
        preparation.check_runnable(prep.model, device, what=res.name)

        inputs = read_npz(payload["inputs"], f"{Path(job['inputs']).name}") if payload["inputs"] is not None else {}
        state, given = {}, {}  # whole bindings as bytes (the python engine's child); as given (wrp-replay)
        for name, value in inputs.items():
            if name not in prep.sizes:
                raise preparation.unknown_binding(name, prep.sizes)
            arr = preparation.coerce_input(name, value, prep.sizes[name], prep.signature.get(name))
            given[name] = arr
            if arr.nbytes == prep.sizes[name]:
                state[name] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            else:  # a view binding: write through the signature, over the captured bytes
                from ...formats import annotations as ann  # noqa: PLC0415

                rid = next(b.region_id for b in prep.model.bindings if b.name == name)
                region = prep.model.region_map()[rid]
                data = getattr(region, "data", None)
                base = (np.frombuffer(bytes(memoryview(data)), np.uint8).copy()
                        if data is not None and len(memoryview(data)) == region.size
                        else np.zeros(region.size, np.uint8))
                ann.view_region(base, prep.signature[name])[...] = arr
                state[name] = base

        golden_name = Path(job["golden"]).name
        golden = read_npz(payload["golden"], golden_name) if payload["golden"] is not None else None
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
    except BaseException:
        preparation.release(prep)
        raise
    return prep, device, state, given, golden, outputs


def _run_case(job: dict, s: dict, res: CaseResult, replay) -> None:
    """Validate, replay with ``replay(prep, device, state, given, timeout)`` and compare one case into ``res``.

    ``replay`` returns ``({binding: uint8 bytes}, host ms, seconds its worker took to start)``.
    """
    from ..load import prepare as preparation  # noqa: PLC0415

    prep, device, state, given, golden, outputs = _prepared_case(job, s, res)
    try:
        raw, res.replay_ms, res.worker_start_s = replay(prep, device, state, given, s.get("timeout"))
    finally:
        preparation.release(prep)

    results = {n: _typed(raw[n], prep.signature.get(n), (golden or {}).get(n)) for n in raw}
    res.raw_bytes = [n for n in raw if prep.signature.get(n) is None and results[n].dtype == np.uint8
                     and (golden is None or n not in golden or np.asarray(golden[n]).dtype == np.uint8)]
    if job["update"]:
        res.replayed = {n: results[n] for n in dict.fromkeys([*(golden or {}), *outputs]) if n in results}
    if golden is None:
        res.verdict = "pass"
        return
    from ...checks.compare import compare_arrays, describe  # noqa: PLC0415

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
        raw_bad = [n for n in res.raw_bytes if n in golden and not res.bindings[n].get("ok", True)]
        if raw_bad:
            res.hint = raw_bytes_hint(raw_bad)
    else:
        res.verdict = "pass"
        if not golden:  # a pass that checked nothing must not read like one that checked something
            res.message, res.hint = nothing_compared(golden_name=Path(job["golden"]).name, named=bool(prep.sizes))


def nothing_compared(golden_name: str, named: bool) -> tuple:
    """``(message, hint)`` of a case that replayed but had nothing to compare.

    Args:
        golden_name: The golden's file name.
        named: Whether the capture names any binding (a stock ``wp.capture_save``
            without ``inputs=``/``outputs=`` names none).
    """
    if not named:
        return ("replayed; nothing compared: the capture names no bindings",
                "Name the arrays to check when saving (wp.capture_save(graph, path, outputs={\"x\": x}) or "
                "wrpkit.capture), then write the golden with `wrp regress SUITE --update`.")
    return (f"replayed; nothing compared: {golden_name} holds no arrays",
            "Add the bindings to check to it, or rewrite it with `wrp regress SUITE --update`.")


def raw_bytes_hint(names: list) -> str:
    """What to do when bindings were compared byte by byte for want of a dtype."""
    return (f"{', '.join(names)} compared as raw bytes (the capture records no dtype for "
            f"{'it' if len(names) == 1 else 'them'}), so rtol/atol do not apply: type the capture with "
            "`wrp annotate FILE --kernels SRC.py -o FILE` (or save it with wrpkit.capture), or write the "
            "golden with its dtype, then `wrp regress --update`.")


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


__all__ = ["run_case", "run_cases", "case_job", "with_payload", "payload_parts", "payload_to_file", "payload_from_file", "read_case_files", "read_npz", "close_replay_workers",
           "cuda_device_count", "CaseResult", "VERDICTS", "WrpWorkerDied"]
