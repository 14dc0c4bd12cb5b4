"""``wrp replay``: replay a captured graph, time it, summarize and check its outputs.

Everything that can be checked is checked before anything runs or is
written: the file decodes and validates, its module files are present,
non-empty and unaltered, the device family and the Warp version match, every
input names a binding and fits it (size, and dtype when the file carries a
signature), and the golden file and output path are usable.  On any of these
errors the command prints ``error:``/``hint:`` lines on stderr, writes
nothing, and exits with the error's code.

Engines: ``python`` (default) loads the graph in-process through Warp;
``native`` runs the C++ ``wrp-replay`` executable.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np

from ..checks.binding_stats import _num, _slices, raw_stats, stats  # noqa: F401  (stats, raw_stats: re-exported)
from ..errors import (EXIT_CRASH, EXIT_TIMEOUT, TIMEOUT_HINT, WrpBindingError, WrpError, WrpRuntimeError,
                      WrpTimeoutError, timeout_message)

NATIVE_EXE = "wrp-replay"
#: Signal numbers of a crash (a wrp-replay killed before its handler could report).
CRASH_SIGNALS = {11, 7, 4, 8, 6}


# ---------------------------------------------------------------------------
# --timeout
# ---------------------------------------------------------------------------


class _Watchdog:
    """Ends the process with :data:`~wrpkit.errors.EXIT_TIMEOUT` when a replay runs past its deadline.

    Warp replays through ctypes calls, which release the GIL, so a timer
    thread runs while Warp's native code loops (a WHILE that does not end)
    and can only stop it with ``os._exit``.  The watchdog covers preparing,
    loading and replaying; it is disarmed before any output is written, and
    nothing before that point writes a file (outputs are written atomically
    after the last replay; the native engine's temporary directory is made
    after the watchdog is disarmed), so no output or temporary file is left.
    A lock makes :meth:`disarm` final: once it returns, the process is never
    ended by the watchdog.
    """

    def __init__(self, seconds):
        import threading  # noqa: PLC0415

        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self._lock = threading.Lock()
        self._armed = seconds is not None
        self._timer = None
        if self._armed:
            self._timer = threading.Timer(seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self):
        with self._lock:
            if not self._armed:
                return
            text = f"error: {timeout_message(self.seconds)}\nhint: {TIMEOUT_HINT}\n".encode()
            with contextlib.suppress(OSError):
                os.write(2, text)
            os._exit(EXIT_TIMEOUT)

    def remaining(self):
        """Seconds left (at least 1 ms), or None without a timeout."""
        return None if self.deadline is None else max(1e-3, self.deadline - time.monotonic())

    def disarm(self):
        with self._lock:
            self._armed = False
        if self._timer is not None:
            self._timer.cancel()


class _Seconds(click.ParamType):
    """A finite number of seconds above 0 (fractional allowed)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            v = float(value)
        else:
            try:
                v = float(str(value).strip())
            except ValueError:
                v = math.nan
        if not math.isfinite(v) or v <= 0 or v > 1e9:
            self.fail(f"{value!r} is not a number of seconds above 0 (at most 1e9)", param, ctx)
        return v


# ---------------------------------------------------------------------------
# Reading inputs
# ---------------------------------------------------------------------------


def _read_npy_bytes(path: Path, what: str) -> bytes:
    from ..fileio import read_file  # noqa: PLC0415

    return read_file(path, what, follow_symlinks=True)  # the user's path


def load_npz(path: Path, what: str = "inputs file") -> dict:
    """``{key: array}`` of an ``.npz`` (no pickles).

    Raises:
        WrpBindingError: The file is missing or not a readable ``.npz``.
    """
    try:
        data = _read_npy_bytes(path, what)
    except WrpError as e:
        raise WrpBindingError(e.message, hint=e.hint) from None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise ValueError("it holds a single array (.npy), not an archive")
            return {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001  (any failure: a bad npz)
        raise WrpBindingError(f"cannot read {what} {path}: not a valid .npz ({type(e).__name__}: {e})",
                              hint="Write it with numpy.savez(path, name=array, ...).") from None


def load_npy(path: Path, what: str = "input file") -> np.ndarray:
    """The array of an ``.npy`` (no pickles).

    Raises:
        WrpBindingError: The file is missing or not a readable ``.npy``.
    """
    try:
        data = _read_npy_bytes(path, what)
    except WrpError as e:
        raise WrpBindingError(e.message, hint=e.hint) from None
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
        if not isinstance(arr, np.ndarray):
            arr.close()
            raise ValueError("it is an .npz archive, not a single array")
        return arr
    except Exception as e:  # noqa: BLE001
        raise WrpBindingError(f"cannot read {what} {path}: not a valid .npy ({type(e).__name__}: {e})",
                              hint="Write it with numpy.save(path, array).") from None


def _parse_dtypes(items) -> list:
    out = []
    for it in items:
        name, sep, type_name = it.partition("=")
        if not sep or not name or not type_name:
            raise WrpBindingError(f"--dtype {it!r} is not NAME=TYPE", hint="For example --dtype x=vec3f.")
        out.append((name, type_name.strip()))
    return out


def unset_inputs(prep, inputs) -> dict:
    """``{binding name: what it holds}`` for each input binding no input was given for.

    A binding left unset keeps the value captured with the graph (the
    region's initial bytes recorded in the file, or zeros when none were).
    """
    regions = prep.model.region_map()
    region_of = {b.name: b.region_id for b in prep.model.bindings}
    out = {}
    for name, size in prep.sizes.items():
        sig = prep.signature.get(name)
        if name in inputs or (sig is not None and not sig.is_input):
            continue
        region = regions.get(region_of.get(name))
        recorded = region is not None and region.has_initial_data
        out[name] = (f"the captured value ({size} bytes recorded in the file)" if recorded else
                     f"zeros ({size} bytes; the file records no initial value)")
    return out


def _parse_items(items) -> list:
    out = []
    for it in items:
        name, sep, path = it.partition("=")
        if not sep or not name or not path:
            raise WrpBindingError(f"--input {it!r} is not NAME=FILE.npy")
        out.append((name, Path(path)))
    return out


# ---------------------------------------------------------------------------
# Statistics and comparison
# ---------------------------------------------------------------------------


def _is_typed(arr: np.ndarray, sig) -> bool:
    """Whether a result has a meaningful type: a signature, or a dtype taken from an input or golden array."""
    return sig is not None or arr.dtype != np.uint8


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> dict:
    """Compare one binding with its golden value.

    Returns:
        ``{"ok", "max_abs", "max_rel", "reason"}``; integer and struct
        data compare exactly, floats with ``|got - want| <= atol + rtol*|want|``
        (NaNs equal NaNs).  Numbers are compared in slices, so the float64
        temporaries stay small however large the binding is.
    """
    want = np.asarray(want)
    res = {"ok": True, "max_abs": 0.0, "max_rel": 0.0, "reason": None}
    if got.dtype == np.uint8 and want.dtype != np.uint8:
        got = _typed_as(got, want)  # untyped binding: compare as the golden's type
    if want.dtype != got.dtype:
        if want.nbytes == got.nbytes and (got.dtype == np.uint8 or got.dtype.names is not None
                                          or want.dtype.names is not None):
            want = np.frombuffer(np.ascontiguousarray(want).tobytes(), dtype=got.dtype)
        elif want.dtype.kind in "biuf" and got.dtype.kind in "biuf":
            pass  # compare values numerically
        else:
            return {"ok": False, "max_abs": None, "max_rel": None,
                    "reason": f"dtype {want.dtype} vs {got.dtype}"}
    if want.shape != got.shape:
        return {"ok": False, "max_abs": None, "max_rel": None,
                "reason": f"shape differs: golden {tuple(want.shape)}, output {tuple(got.shape)}"}
    if got.dtype.names is not None or got.dtype.kind == "V":
        same = np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
        res["ok"] = same
        res["max_abs"] = res["max_rel"] = None
        if not same:
            res["reason"] = "struct bytes differ"
        return res
    if got.size == 0:
        return res
    g_all, w_all = got.reshape(-1), want.reshape(-1)
    exact = got.dtype.kind in "biu" and want.dtype.kind in "biu"
    ok, max_abs, max_rel = True, 0.0, 0.0
    for sl in _slices(g_all.size):
        if exact:
            c_ok, c_abs, c_rel = _compare_exact(g_all[sl], w_all[sl])
        else:
            c_ok, c_abs, c_rel = _compare_close(g_all[sl], w_all[sl], rtol, atol)
        ok, max_abs, max_rel = ok and c_ok, max(max_abs, c_abs), max(max_rel, c_rel)
    res["ok"], res["max_abs"], res["max_rel"] = ok, max_abs, max_rel
    return res


def _compare_exact(got, want):
    """Integers: equal or not; the differences are reported as floats."""
    g = got.astype(np.int64) if got.dtype != np.uint64 else got
    w = want.astype(np.int64) if want.dtype != np.uint64 else want
    diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
    denom = np.abs(w.astype(np.float64))
    rel = np.divide(diff, denom, out=np.zeros_like(diff), where=denom > 0)
    rel[(denom == 0) & (diff > 0)] = np.inf
    return bool(np.array_equal(got, want)), float(diff.max()), float(rel.max())


def _compare_close(got, want, rtol, atol):
    with np.errstate(invalid="ignore", over="ignore"):
        g = got.astype(np.float64)
        w = want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    same_inf = np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g - w)
    diff[both_nan | same_inf] = 0.0
    diff[np.isnan(diff)] = np.inf
    denom = np.abs(w)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(denom > 0, diff / np.where(denom > 0, denom, 1.0), np.where(diff > 0, np.inf, 0.0))
    ok = diff <= atol + rtol * np.where(np.isfinite(denom), denom, 0.0)
    return bool(ok.all()), float(diff.max()), float(rel.max())


def _percentile(v: list, q: float) -> float:
    """The q-quantile of sorted ``v``, interpolated between ranks (numpy's default; wrp-replay's too)."""
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _timing_summary(values) -> dict | None:
    if not values:
        return None
    v = sorted(values)
    n = len(v)
    return {"min": v[0], "p5": _percentile(v, 0.05), "median": _percentile(v, 0.5), "p95": _percentile(v, 0.95),
            "max": v[-1], "mean": sum(v) / n, "count": n}


# ---------------------------------------------------------------------------
# Engines
# ---------------------------------------------------------------------------


def _run_python(prep, device, inputs: dict, repeat: int, warmup: int, progress: bool,
                verify_checksums: bool = True, watchdog: "_Watchdog | None" = None, read_back=(),
                stats_specs=None, max_memory=None) -> tuple:
    """Replay in a child process (a crash there is contained: WrpCrashError, exit 4).

    The child maps the file itself; inputs and the ``read_back`` bindings pass
    through shared memory, and the outputs' statistics are computed in the
    child (``stats_specs``: ``{binding: spec}``).

    Returns ``(results, stats, host_ms, device_ms or None)``.
    """
    from ..run.isolate import replay_in_child  # noqa: PLC0415

    remaining = None
    if watchdog is not None:
        # From here on the child's timeout keeps the time: it is killed, and nothing is left behind.
        watchdog.disarm()
        remaining = watchdog.remaining()
    run = replay_in_child(prep, device, inputs, repeat, warmup, verify_checksums=verify_checksums,
                          timeout=remaining, timeout_total=None if watchdog is None else watchdog.seconds,
                          read_back=list(read_back), stats=stats_specs, max_memory=max_memory)
    return run.results, run.stats, run.host_ms, run.device_ms


def _check_memory(prep, device: str, max_memory, allow_unreached: bool) -> list:
    """Refuse, before anything is allocated, what cannot fit; return the warnings (unreached regions).

    The host's free memory is checked here (a CUDA device's by the replay's process, which asks Warp).

    Raises:
        WrpOutOfMemoryError: The declared memory exceeds the host's available memory or ``max_memory``.
        WrpValidationError: Regions nothing reaches hold more than the refusal threshold.
    """
    from ..checks.memory import (UNREACHED_REFUSE_BYTES, check_budget, format_size, host_available,  # noqa: PLC0415
                                 unreached_regions)
    from ..errors import WrpValidationError  # noqa: PLC0415

    unreached = unreached_regions(prep.model)
    wasted = sum(u.unreached for u in unreached)
    if unreached and wasted > UNREACHED_REFUSE_BYTES and not allow_unreached:
        raise WrpValidationError(
            [u.message() for u in unreached],
            hint=f"Together {format_size(wasted)} that no op reaches (over the {format_size(UNREACHED_REFUSE_BYTES)} "
                 "a replay allocates without asking). Recapture the file, or pass --allow-unreached to replay "
                 "it anyway.")
    if device.strip().lower() == "cpu" or device.strip().lower().startswith("cpu"):
        check_budget(prep.model, "cpu", host_available() if max_memory is None else None, max_memory)
    return [u.message() for u in unreached]


def _stats_spec(prep, name: str, raw_inputs: dict, golden_arrays) -> dict | None:
    """How the replay's process types binding ``name`` for the outputs table: per its signature (or
    --dtype), else like the input or golden array given for it when the sizes agree, else raw bytes."""
    from ..checks.binding_stats import like_spec, view_spec  # noqa: PLC0415

    sig = prep.signature.get(name)
    if sig is not None:
        return view_spec(sig)
    hint = raw_inputs.get(name)
    if hint is None and golden_arrays is not None:
        hint = golden_arrays.get(name)
    if hint is not None:
        hint = np.asarray(hint)
        if not hint.dtype.hasobject and hint.nbytes == prep.sizes[name]:
            return like_spec(hint)
    return None


def find_native() -> Path:
    """Path of the ``wrp-replay`` executable.

    Looked for, in order: ``$WRP_REPLAY``, next to the Python executable,
    on ``PATH``, in ``wrpkit/_native/bin/``.

    Raises:
        WrpError: It is not built or installed.
    """
    exe = NATIVE_EXE + (".exe" if os.name == "nt" else "")
    candidates = []
    env = os.environ.get("WRP_REPLAY")
    if env:
        candidates.append(Path(env))
    candidates.append(Path(sys.executable).parent / exe)
    which = shutil.which(exe)
    if which:
        candidates.append(Path(which))
    candidates.append(Path(__file__).resolve().parent / "_native" / "bin" / exe)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise WrpError(
        f"the native replayer `{NATIVE_EXE}` is not built or installed (looked next to {sys.executable}, on PATH "
        f"and in wrpkit/_native/bin/)",
        hint="Install wrpkit with `pip install .` from the source tree, which builds it with CMake, "
             "or use --engine python.")


def _typed_like(arr: np.ndarray, size: int, sig) -> np.ndarray:
    """Reinterpret a native engine output per the binding's signature."""
    from ..formats import annotations as ann  # noqa: PLC0415

    raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    if raw.nbytes == size:  # views, no copies: the data stays where wrp-replay wrote it
        if sig is None:
            return raw
        return ann.view_region(raw, sig)
    if sig is not None and arr.shape == sig.numpy_shape():
        return np.asarray(arr)
    return np.asarray(arr)


def _typed_as(raw: np.ndarray, hint) -> np.ndarray:
    """``raw`` bytes viewed with the dtype and shape of ``hint`` when the byte sizes agree."""
    if hint is None:
        return raw
    hint = np.asarray(hint)
    if hint.dtype.hasobject or hint.nbytes != raw.nbytes or raw.dtype != np.uint8:
        return raw
    try:
        return np.ascontiguousarray(raw).view(hint.dtype).reshape(hint.shape)
    except (ValueError, TypeError):
        return raw


def _native_timings(report: dict) -> list | None:
    """Per-replay host times in ms from ``wrp-replay --json`` (``timings.replays_ms``)."""
    t = report.get("timings") if isinstance(report, dict) else None
    if not isinstance(t, dict):
        return None
    v = t.get("replays_ms")
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
        return [float(x) for x in v]
    if isinstance(t.get("median_ms"), (int, float)):
        return [float(t.get("min_ms", t["median_ms"])), float(t["median_ms"]), float(t.get("max_ms", t["median_ms"]))]
    return None


def _native_crash(prep, returncode: int, said: str, device: str, inputs: dict, replays: int,
                  verify_checksums: bool, crash: dict | None = None):
    """The WrpCrashError for a ``wrp-replay`` that crashed.

    wrp-replay finds the op itself (its ``--json`` error carries ``crash.op_index``);
    only when it could not (killed before it reported) is the op searched for
    here, by replaying prefixes in children.
    """
    import re  # noqa: PLC0415
    import signal as sig  # noqa: PLC0415

    from ..run.isolate import crash_error, identify_crash  # noqa: PLC0415

    signum = -returncode if returncode < 0 else 0
    named = re.search(r"crashed with (SIG[A-Z]+)", said or "")
    if not signum and named and hasattr(sig, named.group(1)):
        signum = int(getattr(sig, named.group(1)))
    loading = "while Warp loaded" in (said or "")
    found = crash.get("op_index") if isinstance(crash, dict) else None
    if loading:
        op_index, searched = None, False
    elif isinstance(found, int) and 0 <= found < len(prep.model.ops):
        op_index, searched = found, True
    else:
        op_index, searched = identify_crash(prep, device, inputs, replays, verify_checksums=verify_checksums)
    return crash_error(prep, signum or int(sig.SIGSEGV), "loading" if loading else "replaying", op_index, searched,
                       verify_checksums=verify_checksums)


def _npy_memory_file(arr: np.ndarray, name: str) -> int:
    """A memory file (no name on disk) holding ``arr`` as ``.npy``; its fd, at offset 0."""
    from ..run.shared import memory_file  # noqa: PLC0415

    fd = memory_file(name)
    with os.fdopen(os.dup(fd), "wb") as f:
        np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_npy_fd(fd: int, what: str) -> np.ndarray:
    """The array a ``.npy`` memory file holds, mapped (no copy)."""
    try:
        return np.load(f"/proc/self/fd/{fd}", mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise WrpRuntimeError(f"cannot read {what}: {e}") from None


def _run_native(prep, file: Path, device: str, inputs: dict, repeat: int, warmup: int,
                verify_checksums: bool = True, watchdog: "_Watchdog | None" = None,
                allow_raw_pointers: bool = False, read_back=(), stats_specs=None, max_memory=None) -> tuple:
    """Replay with ``wrp-replay`` in a child process.

    wrp-replay maps the file itself; inputs and the ``read_back`` bindings pass
    through memory files (``/dev/fd/N``), and the outputs' statistics come
    from its ``--stats`` (computed over its memory in place), except for
    bindings this process types itself (``--dtype``, or like an input or
    golden array), which are read back and summarised here.

    Returns ``(results, stats, host_ms, device_ms or None)``.
    """
    from ..checks.binding_stats import region_stats  # noqa: PLC0415
    from ..errors import WrpFormatError  # noqa: PLC0415

    exe = find_native()
    remaining = None
    if watchdog is not None:
        # From here on wrp-replay keeps the time (its own --timeout): this process must not be ended
        # while its child runs.
        watchdog.disarm()
        remaining = watchdog.remaining()
    stats_specs = dict(stats_specs or {})
    recorded = prep.annotations.signature_map() if prep.annotations is not None else {}
    # wrp-replay types a binding by the file's own signature; the others are summarised here.
    here = [n for n, spec in stats_specs.items() if spec is not None and n not in recorded]
    wanted = list(dict.fromkeys(list(read_back) + here))
    fds = []
    try:
        args = [os.fspath(exe), os.fspath(file), "--device", device, "--repeat", str(repeat),
                "--warmup", str(warmup), "--json", "--raw-times", "--stats"]
        if prep.modules_dir is not None:
            args += ["--modules-dir", os.fspath(prep.modules_dir)]  # the folder the checks ran on
        if not verify_checksums:
            args.append("--no-verify")  # wrp-replay reads .wrpk bundles itself, blobs straight from the mmap
        if allow_raw_pointers:
            args.append("--allow-raw-pointers")
        if max_memory is not None:
            args += ["--max-memory", str(max_memory)]
        if remaining is not None:
            args += ["--timeout", repr(remaining)]
        for name, arr in inputs.items():
            fd = _npy_memory_file(arr, "wrpkit-input")
            fds.append(fd)
            args += ["--input", f"{name}=/dev/fd/{fd}"]
        outs = {}
        from ..run.shared import memory_file  # noqa: PLC0415

        for name in wanted:
            fd = memory_file("wrpkit-result")
            fds.append(fd)
            outs[name] = fd
            args += ["--output", f"{name}=/dev/fd/{fd}"]
        env = dict(os.environ)
        if not env.get("WRP_WARP_LIB_DIR"):
            # the warp-lang this Python uses (warp.so, warp-clang.so), found without importing it
            import importlib.util  # noqa: PLC0415

            spec = importlib.util.find_spec("warp")
            if spec is not None and spec.origin:
                env["WRP_WARP_LIB_DIR"] = os.path.join(os.path.dirname(spec.origin), "bin")
        t0 = time.perf_counter()
        try:
            # wrp-replay stops itself; the subprocess timeout is only a backstop (it kills the child)
            proc = subprocess.run(args, capture_output=True, text=True, check=False, env=env, pass_fds=tuple(fds),
                                  timeout=None if remaining is None else remaining + 30)
        except subprocess.TimeoutExpired:
            proc = subprocess.CompletedProcess(args, EXIT_TIMEOUT, "", "")
        except OSError as e:
            raise WrpRuntimeError(f"cannot run {exe}: {e}") from None
        wall_ms = (time.perf_counter() - t0) * 1e3
        report = {}
        try:
            report = json.loads(proc.stdout) if proc.stdout.strip() else {}
        except json.JSONDecodeError:
            report = {}
        if proc.returncode == EXIT_TIMEOUT and watchdog is not None:
            raise WrpTimeoutError(timeout_message(watchdog.seconds), hint=TIMEOUT_HINT)
        if proc.returncode != 0:
            msg = report.get("error") if isinstance(report, dict) else None
            if not msg:
                msg = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-10:])
            if proc.returncode == EXIT_CRASH or -proc.returncode in CRASH_SIGNALS:
                raise _native_crash(prep, proc.returncode, msg or proc.stderr, device, inputs, repeat + warmup,
                                    verify_checksums, report.get("crash") if isinstance(report, dict) else None)
            msg = f"{NATIVE_EXE} failed (exit code {proc.returncode}): {msg}"
            if proc.returncode == 3 and ("out of memory" in msg.lower() or " free; " in msg.lower()):
                from ..errors import WrpOutOfMemoryError  # noqa: PLC0415

                raise WrpOutOfMemoryError(msg, hint="Free memory or replay on a larger device; --max-memory SIZE "
                                                    "replays it anyway if you know it fits.", device=device)
            cls = {2: WrpBindingError, 3: WrpFormatError}.get(proc.returncode, WrpRuntimeError)
            raise cls(msg, hint="Rerun with --engine python to compare.")
        results = {}
        for name, fd in outs.items():
            if not os.fstat(fd).st_size:
                raise WrpRuntimeError(f"{NATIVE_EXE} did not write binding {name!r}")
            arr = _read_npy_fd(fd, "native engine output")
            results[name] = _typed_like(arr, prep.sizes[name], prep.signature.get(name))
    finally:
        for fd in fds:
            os.close(fd)  # the results' mappings stay until they go
    summary = dict(report.get("stats") or {}) if isinstance(report, dict) else {}
    for name in here:
        raw = np.ascontiguousarray(results[name]).reshape(-1).view(np.uint8)
        summary[name] = region_stats(raw, stats_specs[name])
    for name in stats_specs:
        if name not in summary:
            summary[name] = region_stats(np.zeros(0, np.uint8), None) | {"shape": [prep.sizes[name]]}
    results = {n: results[n] for n in read_back}
    host = _native_timings(report) or [wall_ms / max(1, repeat)]
    return results, summary, host, None


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    return f"{v:.6g}"


def _print_report(report: dict) -> None:
    from rich.console import Console  # noqa: PLC0415

    from ..checks.summary import shape_text  # noqa: PLC0415
    from .output import plural, table  # noqa: PLC0415

    con = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    for name, what in (report.get("unset_inputs") or {}).items():
        err.print(f"notice: binding {name!r} was not given as an input: it holds {what}")
    for text in report.get("warnings") or []:
        err.print(f"warning: {text}")
    t = report["timings"]
    tt = table(f"{report['file']} on {report['device']} ({report['engine']} engine, "
               f"{plural(report['repeat'], 'replay')}, {report['warmup']} warmup)",
               ["time per replay", "min", "median", "mean", "max"])
    for key, label in (("host_ms", "host wall (ms)"), ("device_ms", "device (ms)")):
        s = t.get(key)
        if s:
            tt.add_row(label, _fmt(s["min"]), _fmt(s["median"]), _fmt(s["mean"]), _fmt(s["max"]))
    con.print(tt)
    ot = table("outputs", ["binding", "shape", "dtype", "min", "max", "mean", "NaN", "Inf"])
    for name, s in report["outputs"].items():
        ot.add_row(name, shape_text(s["shape"]), s["dtype"], _fmt(s["min"]), _fmt(s["max"]), _fmt(s["mean"]),
                   _fmt(s["nan"]), _fmt(s["inf"]))
    con.print(ot)
    if any(s.get("raw") for s in report["outputs"].values()):
        con.print("[dim]raw bytes: the file records no dtype for these bindings (pass an input or --check "
                  "array to type them, or save with wrpkit to add a signature)[/]")
    chk = report.get("check")
    if chk:
        ct = table(f"check against {chk['golden']} (rtol={chk['rtol']:g}, atol={chk['atol']:g})",
                   ["binding", "result", "max abs err", "max rel err", "note"])
        for name, r in chk["bindings"].items():
            ct.add_row(name, "[green]ok[/]" if r["ok"] else "[bold red]MISMATCH[/]", _fmt(r["max_abs"]),
                       _fmt(r["max_rel"]), r.get("reason") or "")
        con.print(ct)
        con.print(f"compared: {chk['compared']}")
        if chk.get("not_compared"):
            con.print(f"not compared (absent from {chk['golden']}): {', '.join(chk['not_compared'])}")
        con.print("[green]check passed[/]" if chk["ok"] else "[bold red]check failed[/]")
    if report.get("output"):
        con.print(f"wrote {report['output']}")


def _json_safe(obj):
    """Non-finite floats (an infinite relative error) become null: the JSON stays standard."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _savez_bytes(results: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **results)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------


def replay_file(file: Path, device: str = "cpu", inputs_npz=None, input_items=(), output=None, repeat: int = 1,
                warmup: int = 0, golden=None, rtol: float = 1e-5, atol: float = 1e-6, engine: str = "python",
                as_json: bool = False, progress: bool = True, verify_checksums: bool = True,
                timeout: float | None = None, allow_raw_pointers: bool = False, modules_dir=None,
                dtype_items=(), max_memory=None, allow_unreached: bool = False) -> tuple:
    """Everything ``wrp replay`` does, minus printing.

    The replay runs in a child process (either engine): a fatal signal there
    raises :class:`~wrpkit.errors.WrpCrashError` (exit 4) naming the op that
    crashed, and nothing is written.  Files holding live process pointers
    are refused unless ``allow_raw_pointers``.

    ``modules_dir`` is the folder of a ``.wrp``'s module files (default
    ``<stem>_modules/`` beside it, or beside a symbolic link's target).
    ``dtype_items`` (``"NAME=TYPE"``) type bindings the file records no
    signature for (:func:`wrpkit.run.runtime.signature_for_type`).

    ``verify_checksums=False`` skips a ``.wrpk``'s blob checksums (trusted files only).

    Memory is checked before anything is allocated: the capture's declared
    memory against the device's free memory, or against ``max_memory``
    (bytes, or a size such as ``"64G"``): :class:`~wrpkit.errors.WrpOutOfMemoryError`
    (exit 3).  A file whose regions are far larger than any op reaches, by
    more than :data:`~wrpkit.checks.memory.UNREACHED_REFUSE_BYTES` in all, is
    refused (exit 3) unless ``allow_unreached``; below that it is a warning
    (``report["warnings"]``).

    ``timeout`` (seconds) bounds the wall time of preparing, loading and
    replaying: when it runs out, the process prints an ``error:`` line and
    ends at once with exit status 124 (``os._exit``: Warp's native code cannot
    be interrupted otherwise), before anything is written.  Meant for the
    command line; a library caller loses its process.

    Returns:
        ``(report, ok)``: the JSON-able report and whether the check passed.

    Raises:
        WrpError: Any problem found before or while replaying; nothing is
            written in that case.
    """
    from ..run import runtime  # noqa: PLC0415
    from ..fileio import atomic_write, check_output_path  # noqa: PLC0415

    file = Path(file)
    watchdog = _Watchdog(timeout) if timeout is not None else None
    try:
        file = runtime.resolve_capture_path(file)
        prep = runtime.prepare(file, verify_checksums=verify_checksums, allow_raw_pointers=allow_raw_pointers,
                               modules_dir=modules_dir)
    except BaseException:
        if watchdog is not None:
            watchdog.disarm()
        raise
    try:
        # Warp is imported only where the replay runs (the child; wrp-replay loads its own), which
        # checks the device too: this process starts fast and holds no Warp runtime.
        runtime.check_runnable(prep.model, device, what=str(file))
        warnings = _check_memory(prep, device, max_memory, allow_unreached)

        typed_here = set()  # bindings typed by --dtype: the replay (child, or wrp-replay) returns their bytes
        for name, type_name in _parse_dtypes(dtype_items):
            if name not in prep.sizes:
                raise runtime.unknown_binding(name, prep.sizes)
            if prep.signature.get(name) is not None:
                sig = prep.signature[name]
                raise WrpBindingError(f"--dtype {name}={type_name}: the file already records binding {name!r} as "
                                      f"{sig.dtype.name} of shape {sig.numpy_shape()}",
                                      hint="--dtype is for bindings without a recorded signature; leave it out.")
            prep.signature[name] = runtime.signature_for_type(name, type_name, prep.sizes[name])
            typed_here.add(name)

        # inputs
        raw_inputs = {}
        sources = [file]
        if inputs_npz is not None:
            sources.append(Path(inputs_npz))
            raw_inputs.update(load_npz(Path(inputs_npz)))
        for name, p in _parse_items(input_items):
            sources.append(p)
            raw_inputs[name] = load_npy(p)
        inputs = {}
        for name, value in raw_inputs.items():
            if name not in prep.sizes:
                raise runtime.unknown_binding(name, prep.sizes)
            inputs[name] = runtime.coerce_input(name, value, prep.sizes[name], prep.signature.get(name))

        golden_arrays = None
        if golden is not None:
            sources.append(Path(golden))
            golden_arrays = load_npz(Path(golden), "golden file")
            for name in golden_arrays:
                if name not in prep.sizes:
                    raise runtime.unknown_binding(name, prep.sizes)
        if output is not None:
            output = check_output_path(output, sources)
            if output.exists() and output.is_dir():
                raise WrpError(f"output {output} is a directory")

        outputs = [n for n in prep.sizes if prep.signature.get(n) is None or prep.signature[n].is_output]
        # Only what is asked for comes back: every binding for --output, the golden's for --check;
        # the outputs table is computed where the data is (the replay's process).
        read_back = list(prep.sizes) if output is not None else list(golden_arrays or ())
        specs = {n: _stats_spec(prep, n, raw_inputs, golden_arrays) for n in outputs}
        if engine == "native":
            results, summary, host_ms, device_ms = _run_native(prep, file, device, inputs, repeat, warmup,
                                                               verify_checksums, watchdog, allow_raw_pointers,
                                                               read_back, specs, max_memory)
        else:
            results, summary, host_ms, device_ms = _run_python(prep, device, inputs, repeat, warmup,
                                                               progress and not as_json, verify_checksums, watchdog,
                                                               read_back, specs, max_memory)
    finally:
        if watchdog is not None:
            watchdog.disarm()  # replayed (or failed) in time: what follows is never cut short
        for k in prep._keep:
            with contextlib.suppress(Exception):
                k.close()

    # Bindings without a signature come back as raw bytes; type them like the
    # input or golden array given for them when the sizes agree.
    for name, arr in list(results.items()):
        if prep.signature.get(name) is None:
            hint = raw_inputs.get(name)
            if hint is None and golden_arrays is not None:
                hint = golden_arrays.get(name)
            results[name] = _typed_as(arr, hint)
        elif name in typed_here and arr.dtype == np.uint8 and arr.nbytes == prep.sizes[name]:
            results[name] = _typed_like(arr, prep.sizes[name], prep.signature[name])  # typed by --dtype

    report = {
        "file": str(file),
        "device": device,
        "engine": engine,
        "warp_version": prep.model.warp_version,
        "repeat": repeat,
        "warmup": warmup,
        "timings": {"host_ms": _timing_summary(host_ms), "device_ms": _timing_summary(device_ms)},
        "outputs": {n: summary[n] for n in outputs},
        "unset_inputs": unset_inputs(prep, inputs),
        "warnings": warnings,
        "check": None,
        "output": None,
        "ok": True,
    }
    ok = True
    if golden_arrays is not None:
        per = {n: compare(results[n], w, rtol, atol) for n, w in golden_arrays.items()}
        ok = all(r["ok"] for r in per.values())
        total = warmup + repeat
        report["check"] = {"golden": str(golden), "rtol": rtol, "atol": atol, "ok": ok, "bindings": per,
                           "not_compared": [n for n in outputs if n not in golden_arrays],
                           "compared": f"values after the last of {total} replay{'s' if total != 1 else ''} "
                                       f"({warmup} warmup + {repeat} timed; inputs set once before the first, "
                                       "each replay starting from the state the previous one left)"}
        report["ok"] = ok
    if output is not None:
        atomic_write(output, [_savez_bytes(results)])
        report["output"] = str(output)
    return report, ok


@click.command("replay")
@click.argument("file", type=click.Path(exists=True, dir_okay=True, path_type=Path))
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N (the capture's device family).")
@click.option("--inputs", "inputs_npz", type=click.Path(path_type=Path), metavar="IN.npz",
              help="Inputs keyed by binding name.")
@click.option("--input", "input_items", multiple=True, metavar="NAME=X.npy", help="One input (repeatable).")
@click.option("--output", "output", type=click.Path(path_type=Path), metavar="OUT.npz",
              help="Write every binding after the last replay.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Timed replays.")
@click.option("--warmup", type=click.IntRange(min=0), default=0, show_default=True, help="Untimed replays first.")
@click.option("--check", "golden", type=click.Path(path_type=Path), metavar="GOLDEN.npz",
              help="Compare bindings with a golden .npz; exit 1 on mismatch.")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-5, show_default=True)
@click.option("--atol", type=click.FloatRange(min=0), default=1e-6, show_default=True)
@click.option("--engine", type=click.Choice(["python", "native"]), default="python", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--no-verify", is_flag=True, help="For a .wrpk: skip blob checksums (trusted files only).")
@click.option("--timeout", type=_Seconds(), default=None, metavar="SECONDS",
              help="Give up when loading and replaying take longer than SECONDS of wall time (fractional "
                   "allowed): exit 124, nothing written. Bounds WHILE loops that do not end.")
@click.option("--allow-raw-pointers", is_flag=True,
              help="Replay a file whose kernel arguments hold live process pointers (HashGrid, Bvh or Volume "
                   "ids), refused by default: they dangle in a new process.")
@click.option("--modules-dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Folder of the .wrp's module files (default: <stem>_modules/ beside it).")
@click.option("--max-memory", "max_memory", metavar="SIZE", default=None,
              help="Memory the replay may allocate (e.g. 64G), instead of the device's free memory, which the "
                   "capture's declared memory is checked against before anything is allocated (exit 3).")
@click.option("--allow-unreached", is_flag=True,
              help="Replay a file whose regions are far larger than any op reaches (refused above 1 GiB in all).")
@click.option("--dtype", "dtype_items", multiple=True, metavar="NAME=TYPE",
              help="Type a binding the file records no signature for, as a 1-D array of a Warp type "
                   "(float32, vec3f, mat33f, ...). Repeatable.")
@click.pass_context
def replay(ctx, file, device, inputs_npz, input_items, output, repeat, warmup, golden, rtol, atol, engine, as_json,
           no_verify, timeout, allow_raw_pointers, modules_dir, max_memory, allow_unreached, dtype_items):
    """Replay a captured graph FILE (.wrp or .wrpk) and report timings and outputs.

    \b
    Inputs are keyed by binding name.  Where the file records a binding's
    dtype and shape, an input must have exactly that dtype and shape (a view
    binding takes the view's shape); otherwise exactly the binding's bytes
    (--dtype NAME=TYPE types such a binding).  A binding left unset keeps its
    captured value, and a notice says so.
    Exit codes (wrp --help has the table): 0 ok; 1 check mismatch, replay
    failure or I/O error; 2 usage error, bad input, wrong device; 3 invalid,
    incomplete, incompatible or unsafe file (e.g. stale process pointers), or
    one needing more memory than the device has free (--max-memory);
    4 the replay crashed (a fatal signal in kernel code or Warp's runtime,
    contained in a child process: the message names the op); 124 --timeout
    ran out; 130 Ctrl-C.  Nothing is written on any error.

    \b
    Examples:
      wrp replay sim.wrp --inputs in.npz --output out.npz
      wrp replay sim.wrp --repeat 1000 --warmup 10 --json
      wrp replay sim.wrp --inputs in.npz --check expected.npz --rtol 1e-6
      wrp replay untrusted.wrp --timeout 10 --output out.npz
      wrp replay renamed.wrp --modules-dir old_name_modules
      wrp replay stock.wrp --dtype x=vec3f --input x=x.npy
      wrp replay h200.wrp --device cuda:0 --max-memory 120G
    """
    from .output import reported_errors  # noqa: PLC0415

    # The same error handling as the `wrp` group's, so that the command also reports cleanly on its own.
    with reported_errors(ctx, as_json):
        # With --json, stdout carries exactly one JSON object: anything printed
        # on the way (Warp's messages) goes to stderr.
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from ..checks.memory import parse_size  # noqa: PLC0415

            budget = parse_size(max_memory) if max_memory is not None else None
            report, ok = replay_file(file, device, inputs_npz, input_items, output, repeat, warmup, golden, rtol,
                                     atol, engine, as_json, verify_checksums=not no_verify, timeout=timeout,
                                     allow_raw_pointers=allow_raw_pointers, modules_dir=modules_dir,
                                     dtype_items=dtype_items, max_memory=budget, allow_unreached=allow_unreached)
    if as_json:
        click.echo(json.dumps(_json_safe(report), indent=2, allow_nan=False))
    else:
        _print_report(report)
    if not ok:
        if not as_json:
            bad = [n for n, r in report["check"]["bindings"].items() if not r["ok"]]
            noun = "binding differs" if len(bad) == 1 else "bindings differ"
            click.echo(f"error: {len(bad)} {noun} from {golden}: {', '.join(bad)}", err=True)
        ctx.exit(1)


__all__ = ["replay", "replay_file", "find_native", "compare", "stats", "load_npz", "load_npy"]
