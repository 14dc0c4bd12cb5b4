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
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np

from ..checks.binding_stats import raw_stats, stats, with_warp_shape  # noqa: F401  (stats, raw_stats: re-exported)
from ..errors import (CRASH_SIGNAL_NUMBERS, EXIT_CRASH, EXIT_TIMEOUT, TIMEOUT_HINT, WrpBindingError,  # noqa: F401
                      WrpError, WrpRuntimeError, WrpTimeoutError, timeout_hint, timeout_message)

NATIVE_EXE = "wrp-replay"


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

    def __init__(self, seconds, replays: int = 1):
        self.replays = replays
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
            text = (f"error: {timeout_message(self.seconds, self.replays)}\n"
                    f"hint: {timeout_hint(self.replays)}\n").encode()
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
    from ..model import binding_roles  # noqa: PLC0415

    regions = prep.model.region_map()
    region_of = prep.model.binding_map()
    # Roles as capture_save's inputs-then-outputs order tells them (a signature, where
    # present, says it outright): an output-only binding gets no input notice.
    roles = binding_roles([b.name for b in prep.model.bindings])
    out = {}
    for name, size in prep.sizes.items():
        sig = prep.signature.get(name)
        is_input = sig.is_input if sig is not None else roles.get(name, (None, None))[0]
        if name in inputs or is_input is False:
            continue
        region = regions.get(region_of.get(name))
        recorded = region is not None and region.has_initial_data
        out[name] = (f"the captured value ({size} bytes recorded in the file)" if recorded else
                     f"zeros ({size} bytes; the file records no initial value)")
        if is_input is None:
            out[name] += "; the file does not record whether it is an input"
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


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, equal_nan: bool = False) -> dict:
    """Compare one binding with its golden value (:func:`wrpkit.checks.compare.compare_arrays`).

    Returns:
        Its ``to_json()``: ``ok``, ``reason``, ``max_abs``, ``max_rel``,
        ``mismatches``, ``first_index``, the NaN/Inf disagreements.  An
        untyped binding (raw bytes) is compared as the golden's type.
    """
    from ..checks.compare import compare_arrays  # noqa: PLC0415

    want = np.asarray(want)
    if got.dtype == np.uint8 and want.dtype != np.uint8:
        got = _typed_as(got, want)  # untyped binding: compare as the golden's type
    return compare_arrays(got, want, rtol, atol, equal_nan=equal_nan).to_json()


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
    try:
        run = replay_in_child(prep, device, inputs, repeat, warmup, verify_checksums=verify_checksums,
                              timeout=remaining, timeout_total=None if watchdog is None else watchdog.seconds,
                              read_back=list(read_back), stats=stats_specs, max_memory=max_memory)
    except WrpTimeoutError:
        if watchdog is None or repeat + warmup <= 1:
            raise
        # Many replays asked for: the count is a cause too, not only a WHILE loop (as wrp-replay says).
        raise WrpTimeoutError(timeout_message(watchdog.seconds, repeat + warmup),
                              hint=timeout_hint(repeat + warmup)) from None
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
    """Path of the ``wrp-replay`` executable (:func:`wrpkit.run.native.find_native`)."""
    from ..run.native import find_native as find  # noqa: PLC0415

    return find()


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
        from ..run.native import native_env  # noqa: PLC0415
        from ..run.shared import memory_file  # noqa: PLC0415

        for name in wanted:
            fd = memory_file("wrpkit-result")
            fds.append(fd)
            outs[name] = fd
            args += ["--output", f"{name}=/dev/fd/{fd}"]

        env = native_env()  # WRP_WARP_LIB_DIR: the warp-lang this Python uses
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
            raise WrpTimeoutError(timeout_message(watchdog.seconds, watchdog.replays),
                                  hint=timeout_hint(watchdog.replays))
        if proc.returncode != 0:
            msg = report.get("error") if isinstance(report, dict) else None
            if not msg:
                msg = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-10:])
            if proc.returncode == EXIT_CRASH or -proc.returncode in CRASH_SIGNAL_NUMBERS:
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
    from ..checks.summary import shape_text  # noqa: PLC0415
    from .output import console, plural, stderr_console, table  # noqa: PLC0415

    # Notices (stderr) are never broken mid-phrase, on a terminal or not; the report (stdout) keeps
    # every line within the width, its titles included.
    con = console(soft_wrap=False)
    err = stderr_console()
    for name, what in (report.get("unset_inputs") or {}).items():
        err.print(f"notice: binding {name!r} was not given as an input: it holds {what}")
    from .debugopts import kernel_match_lines  # noqa: PLC0415

    for line in kernel_match_lines(report.get("kernels")):
        err.print(line)
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
        con.print("[dim]raw bytes: the file records no dtype for these bindings (type them from the script "
                  "that defines the kernels with --kernels FILE.py, pass an input or --check array, or save "
                  "with wrpkit to add a signature)[/]")
    chk = report.get("check")
    if chk:
        nan_rule = ", NaN == NaN" if chk.get("equal_nan") else ""
        ct = table(f"check against {chk['golden']} (rtol={chk['rtol']:g}, atol={chk['atol']:g}{nan_rule})",
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
                dtype_items=(), equal_nan: bool = False, kernels=(), max_memory=None,
                allow_unreached: bool = False) -> tuple:
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
    ``equal_nan`` makes ``--check`` count NaN against NaN as equal.

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
    watchdog = _Watchdog(timeout, repeat + warmup) if timeout is not None else None
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
                                      f"{sig.dtype.name} of shape {tuple(sig.shape)}",
                                      hint="--dtype is for bindings without a recorded signature; leave it out.")
            prep.signature[name] = runtime.signature_for_type(name, type_name, prep.sizes[name])
            typed_here.add(name)
        kernel_typing = None
        if kernels:
            from ..run.source_types import type_from_source  # noqa: PLC0415

            kernel_typing = type_from_source(prep.model, prep.annotations, list(kernels))
            for sig in kernel_typing.annotations.signature:
                if prep.signature.get(sig.name) is None and sig.name not in typed_here:
                    prep.signature[sig.name] = sig
                    typed_here.add(sig.name)

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
        "outputs": {n: with_warp_shape(summary[n], prep.signature.get(n)) for n in outputs},
        "unset_inputs": unset_inputs(prep, inputs),
        "warnings": warnings,
        "check": None,
        "output": None,
        "ok": True,
    }
    ok = True
    if golden_arrays is not None:
        per = {n: compare(results[n], w, rtol, atol, equal_nan) for n, w in golden_arrays.items()}
        ok = all(r["ok"] for r in per.values())
        total = warmup + repeat
        report["check"] = {"golden": str(golden), "rtol": rtol, "atol": atol, "equal_nan": equal_nan, "ok": ok,
                           "bindings": per,
                           "not_compared": [n for n in outputs if n not in golden_arrays],
                           "compared": f"values after the last of {total} replay{'s' if total != 1 else ''} "
                                       f"({warmup} warmup + {repeat} timed; inputs set once before the first, "
                                       "each replay starting from the state the previous one left)"}
        report["ok"] = ok
    if output is not None:
        atomic_write(output, [_savez_bytes(results)])
        report["output"] = str(output)
    if kernel_typing is not None:  # only with --kernels: the report's keys stay as they were without it
        report["kernels"] = kernel_typing.to_json()
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
@click.option("--equal-nan", is_flag=True, help="With --check: NaN in the output equals NaN in the golden at the "
              "same element (by default it is a mismatch).")
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
@click.option("--kernels", "kernels", multiple=True, metavar="FILE.py",
              type=click.Path(dir_okay=False, path_type=Path),
              help="The .py file that defines the capture's kernels (repeatable): types every binding a "
                   "matching kernel is passed (imported as a script, without its __main__ block).")
@click.pass_context
def replay(ctx, file, device, inputs_npz, input_items, output, repeat, warmup, golden, rtol, atol, equal_nan, engine,
           as_json, no_verify, timeout, allow_raw_pointers, modules_dir, max_memory, allow_unreached, dtype_items,
           kernels):
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
      wrp replay sim.wrp --check expected.npz --equal-nan
      wrp replay untrusted.wrp --timeout 10 --output out.npz
      wrp replay renamed.wrp --modules-dir old_name_modules
      wrp replay stock.wrp --dtype x=vec3f --input x=x.npy
      wrp replay stock.wrp --kernels sim.py --output out.npz
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
                                     dtype_items=dtype_items, equal_nan=equal_nan, kernels=kernels,
                                     max_memory=budget, allow_unreached=allow_unreached)
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
