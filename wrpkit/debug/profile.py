"""Where a capture's time goes, per op and per kernel (``wrp profile``).

Example::

    p = wrpkit.profile("sim.wrp", inputs={"x": x}, repeat=10)
    p.top(3)                 # the three kernels with the most time, with their share
    p.ops[5]["ms"]           # the sixth op run (numbered as `wrp trace` numbers them)
    p.coverage               # sum of per-op medians / a plain replay of the whole graph
    p.save_chrome_trace("sim.trace.json")   # open in Chromium DevTools' Performance panel or Perfetto UI

How: the capture is rewritten once by :mod:`wrpkit.debug.stepper`, as
``wrp trace`` does, so that one launch runs exactly one leaf op against the
one copy of the program's memory; IF and WHILE are driven from here.  Each
stepped launch is timed (host clock on the CPU; CUDA events around the
launch with the python engine on a GPU).  A launch costs more than its op
(the control values, the IF tree, Warp's launch call), so the same run also
times an *empty* step, a leaf that runs nothing, and subtracts its median
(the *floor*, reported) from every op; on a CPU device kernel launches get
the *launch floor* instead (see :func:`_zero_launch`).  The whole step is repeated ``repeat``
times after ``warmup`` untimed rounds, each round starting from the same
memory (the state after ``inputs`` were set), and every figure is a median
over the rounds.  Between rounds, a plain replay of the whole graph (the
original program, loaded once more) is timed from the same state: the sum
of the per-op medians against its median is the *coverage*.

Nothing here prints.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import gc
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .. import model as m
from ..checks.effects import launch_label
from ..environment import WARP_WHILE_GUARD, while_guard_error
from ..errors import WrpBindingError, WrpError, WrpFormatError, WrpNotFoundError, WrpRuntimeError
from ..fileio import atomic_write, read_user_text
from ..formats import wrp1
from . import stepper as st
from .common import open_program
from .isolation import run_in_child

PROFILE_FORMAT = "wrpkit-profile/1"
#: Empty steps timed per round (their median over all rounds is the floor).
EMPTY_STEPS = 16
#: What a profile child reports (beside its engine, device and load time).
CHILD_FIELDS = ("ops", "kernels", "top_level", "total_ms", "replay_ms", "floor_ms", "launch_floor_ms", "timer",
                "repeat", "warmup", "step_ms", "replay_rounds_ms", "grouped_ops", "group_floor_ms", "clock_choice")
#: Below this share of a whole replay, the sum of the ops is a poor account of where the time goes:
#: the result says so (:attr:`ProfileResult.coverage_warning`) and which clock to try.
MIN_COVERAGE = 0.75
#: ``clock="auto"`` on a CPU device takes the thread's CPU time when a whole replay's wall time is
#: more than this many times its CPU time (the thread waited for a core: a busy machine).
BUSY_WALL_OVER_CPU = 1.3
#: Zero-size launches in the graph that calibrates the launch floor (CPU), replayed once per round.
CALIBRATION_LAUNCHES = 2000
#: Most consecutive leaf ops of one body stepped together in one launch (see :func:`_groups`).
GROUP_OPS = 128


@dataclass
class ProfileResult:
    """Per-op and per-kernel times of one capture.

    Attributes:
        ops: One dict per op run in one step, in order (numbered as
            ``wrp trace`` numbers them): ``seq``, ``index``, ``path``,
            ``iteration`` (None outside WHILE bodies), ``iterations``, ``op``
            (kind), ``kernel`` (key, or None), ``ms`` (median over the rounds,
            the floor subtracted, never below 0; for an op of a group, its
            share of the group's time, see ``grouped_ops``) and ``raw_ms``
            (median as timed alone).
        kernels: Per kernel (or op kind, for ops that launch no kernel), most
            time first: ``name``, ``op``, ``calls`` (per step), ``total_ms``,
            ``median_ms`` (per call), ``share`` (of ``total_ms``, 0..1).
        top_level: Per top-level op, in program order: ``index``, ``op``,
            ``name`` (kernel key or op kind), ``calls``, ``total_ms``, ``share``.
        call_sites: Per line of the program that issued ops (captures made
            with ``wrpkit.capture``), most time first, each with ``callers``: the
            same time split by the line that called the function holding it
            (a helper called from several places): ``call_site``
            (``"sim.py:42"``), ``file``, ``line``, ``function``, ``names``
            (kernel keys or op kinds issued there), ``calls``, ``total_ms``,
            ``median_ms``, ``share``; ops the capture does not place are left
            out.  Empty for a stock capture.
        total_ms: Sum of the per-op medians (``ms``).
        replay_ms: Median time of a plain replay of the whole graph, from the same state.
        floor_ms: Median time of an empty step (subtracted from every op
            that launches no kernel).
        launch_floor_ms: Subtracted from every kernel launch instead: on a
            CPU device, what stepping a launch costs beyond the launch itself
            (a zero-size launch of the first kernel stepped alone, less the
            same launch inside a graph of many; never below ``floor_ms``);
            elsewhere ``floor_ms``.
        timer: ``"host"`` (the wall clock around each launch), ``"host-cpu"``
            (the thread's CPU time, ``clock="cpu"``) or ``"cuda-events"``.
        repeat, warmup: Rounds timed / run untimed first.
        step_ms: Per timed round, the wall time of stepping it (profiling
            included): each op alone, and the group walk.
        replay_rounds_ms: Per timed round, the whole replay's time.
        typing: With ``kernels=``: how each recorded kernel matched the
            user's files (``SourceTyping.to_json()``); None without.
        grouped_ops: Op runs whose ``ms`` comes from a group: runs of up to
            :data:`GROUP_OPS` consecutive leaf ops of one body are also
            stepped together, in rounds of their own, and each op gets the
            group's median (less the launch floor) split in proportion to its
            own ``raw_ms`` above the empty step.  Why: an op stepped alone
            pays Warp's per-stream costs every time, which a whole replay
            pays once per stream; for sub-microsecond launches that dwarfs
            the op (see :func:`_groups`).
        group_floor_ms: Subtracted from a group's time: on a CPU device, a
            group of :data:`GROUP_OPS` zero-size launches stepped, less as
            many inside a graph (never below ``floor_ms``); elsewhere
            ``launch_floor_ms``.
    """

    file: str
    engine: str
    device: str
    ops: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    top_level: list = field(default_factory=list)
    call_sites: list = field(default_factory=list)
    total_ms: float = 0.0
    replay_ms: float = 0.0
    floor_ms: float = 0.0
    launch_floor_ms: float = 0.0
    timer: str = "host"
    repeat: int = 1
    warmup: int = 0
    step_ms: list = field(default_factory=list)
    replay_rounds_ms: list = field(default_factory=list)
    load_seconds: float = 0.0
    typing: Optional[dict] = None
    grouped_ops: int = 0
    group_floor_ms: float = 0.0
    #: With ``clock="auto"`` on a CPU device: ``{"clock", "wall_ms", "cpu_ms", "why"}`` of the choice.
    clock_choice: Optional[dict] = None
    #: The profiled program (not serialized): the Chrome trace's IF/WHILE events come from it.
    program: Optional[m.Program] = field(default=None, repr=False, compare=False)

    @property
    def coverage(self) -> Optional[float]:
        """``total_ms / replay_ms`` (None when the replay took no measurable time)."""
        return self.total_ms / self.replay_ms if self.replay_ms > 0 else None

    @property
    def coverage_warning(self) -> Optional[str]:
        """A sentence when the ops' sum covers less than :data:`MIN_COVERAGE` of a whole replay, naming
        the clock to try; None otherwise."""
        cov = self.coverage
        if cov is None or cov >= MIN_COVERAGE:
            return None
        other = {"host": "--clock cpu (the thread's CPU time, which leaves out waits for a core)",
                 "host-cpu": "--clock wall"}.get(self.timer)
        return (f"the ops' sum covers {100 * cov:.0f}% of a whole replay (timer {self.timer}), under the "
                f"{100 * MIN_COVERAGE:.0f}% that makes per-op shares trustworthy: the machine is busy, or the "
                "ops are too short to time alone" + (f"; try {other}" if other else "") + ", or more --repeat")

    def top(self, n: int = 10, by: str = "kernel") -> list:
        """The ``n`` entries with the most time: ``by`` ``"kernel"``, ``"top_level"``, ``"call_site"`` or
        ``"op"`` (one per run).

        Raises:
            WrpError: ``by`` is none of those.
        """
        rows = {"kernel": self.kernels, "top_level": self.top_level, "op": self.ops,
                "call_site": self.call_sites}.get(by)
        if rows is None:
            raise WrpError(f"cannot rank by {by!r}", hint="Use 'kernel', 'top_level', 'call_site' or 'op'.")
        key = "ms" if by == "op" else "total_ms"
        return sorted(rows, key=lambda r: -r[key])[:max(0, int(n))]

    def to_json(self) -> dict:
        """``{"kernels", "ops", "top_level", "total_ms", "replay_ms", "floor_ms", "coverage", ...}``."""
        return {"format": PROFILE_FORMAT, "file": self.file, "engine": self.engine, "device": self.device,
                "timer": self.timer, "repeat": self.repeat, "warmup": self.warmup,
                "total_ms": self.total_ms, "replay_ms": self.replay_ms, "floor_ms": self.floor_ms,
                "launch_floor_ms": self.launch_floor_ms, "coverage": self.coverage, "kernels": self.kernels,
                "top_level": self.top_level, "call_sites": self.call_sites, "ops": self.ops,
                "step_ms": self.step_ms, "replay_rounds_ms": self.replay_rounds_ms, "typing": self.typing,
                "grouped_ops": self.grouped_ops, "group_floor_ms": self.group_floor_ms,
                "clock_choice": self.clock_choice, "coverage_warning": self.coverage_warning}

    def chrome_trace(self, program: Optional[m.Program] = None) -> dict:
        """The profile in Chrome's trace-event format (see :func:`chrome_trace`)."""
        return chrome_trace(self, program)

    def save_chrome_trace(self, path, program: Optional[m.Program] = None) -> Path:
        """Write :meth:`chrome_trace` as JSON, atomically; Chromium DevTools' Performance panel and Perfetto UI open it."""
        path = Path(path)
        atomic_write(path, [json.dumps(self.chrome_trace(program), separators=(",", ":")).encode()])
        return path


# ---------------------------------------------------------------------------
# Timers and NVTX
# ---------------------------------------------------------------------------


class HostTimer:
    """A host clock around a launch (the engines return once the launch is done, synchronized on CUDA).

    ``clock="wall"`` reads the monotonic wall clock; ``clock="cpu"`` this
    thread's CPU time, which Warp's CPU kernels run on: on a machine shared
    with other work it leaves out the time the thread waited for a core.
    """

    def __init__(self, clock: str = "wall"):
        self.read = time.thread_time_ns if clock == "cpu" else time.perf_counter_ns
        self.name = "host-cpu" if clock == "cpu" else "host"

    def __call__(self, launch) -> float:
        read = self.read
        t0 = read()
        launch()
        return (read() - t0) * 1e-6


class CudaEventTimer:
    """CUDA events recorded on the launching stream just before and just after a launch (python engine)."""

    name = "cuda-events"

    def __init__(self, device):
        import warp as wp  # noqa: PLC0415

        self.wp = wp
        self.device = wp.get_device(device)
        self.start = wp.Event(self.device, enable_timing=True)
        self.end = wp.Event(self.device, enable_timing=True)

    def __call__(self, launch) -> float:
        stream = self.device.stream
        stream.record_event(self.start)
        launch()
        stream.record_event(self.end)
        self.wp.synchronize_device(self.device)
        return float(self.wp.get_event_elapsed_time(self.start, self.end))


class Nvtx:
    """``nvtxRangePushA``/``nvtxRangePop`` from the NVTX library (``libnvToolsExt``), through ctypes.

    Raises:
        WrpNotFoundError: No NVTX library can be loaded.
    """

    NAMES = ("libnvToolsExt.so.1", "libnvToolsExt.so", "nvToolsExt64_1.dll")

    def __init__(self):
        lib = None
        found = ctypes.util.find_library("nvToolsExt")
        for name in ((found,) if found else ()) + self.NAMES:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise WrpNotFoundError("--nvtx needs the NVTX library (libnvToolsExt.so.1), which cannot be loaded here",
                                   hint="Install the CUDA toolkit's NVTX library or add its folder to "
                                        "LD_LIBRARY_PATH; or profile without --nvtx.")
        lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
        lib.nvtxRangePushA.restype = ctypes.c_int
        lib.nvtxRangePop.restype = ctypes.c_int
        self.push, self.pop = lib.nvtxRangePushA, lib.nvtxRangePop


def _engine_launch(engine):
    """The engine's launch without its own extras: the raw ``capture_launch`` on the python engine.

    On CUDA that launch returns before the graph has run: :class:`CudaEventTimer`
    records its end event right after it and then synchronizes, so the host's
    wait is not in the measured span.  The native engine synchronizes its own
    stream inside ``wrp_program_run``.
    """
    if isinstance(engine, st.PythonEngine):
        import warp as wp  # noqa: PLC0415

        graph, capture_launch = engine.prog.graph, wp.capture_launch

        def launch():
            try:
                capture_launch(graph)
            except RuntimeError as e:
                raise WrpRuntimeError(f"Warp failed to replay an op: {e}") from None

        return launch
    return engine.launch


class _TimedMachine(st.Machine):
    """A :class:`~wrpkit.debug.stepper.Machine` whose ``run_leaf`` times the launch alone (not the control write)."""

    def __init__(self, stepper, engine, timer, nvtx=None):
        super().__init__(stepper, engine)
        self.timer, self.nvtx = timer, nvtx
        self._launch = _engine_launch(engine)
        self.last_ms = 0.0
        self.label = b""

    def run_leaf(self, leaf: int) -> None:
        idx, vals = self.stepper.paths[leaf]
        ctl = self._ctl
        ctl[idx] = vals
        if self._ctl_view is None:
            self.engine.write(st.CONTROL_BINDING, ctl)
        if self.nvtx is not None:
            self.nvtx.push(self.label)
            self.last_ms = self.timer(self._launch)
            self.nvtx.pop()
        else:
            self.last_ms = self.timer(self._launch)


# ---------------------------------------------------------------------------
# Profiling
# ---------------------------------------------------------------------------


def profile(source, *, device=None, engine: str = "python", inputs: Optional[Mapping] = None, repeat: int = 5,
            warmup: int = 1, nvtx: bool = False, clock: str = "auto", modules: Optional[Mapping] = None,
            isolate: bool = True, timeout: Optional[float] = None, kernels=(), kernel_output=None) -> ProfileResult:
    """Time every leaf op of a capture, per op run, per kernel and per top-level op.

    Args:
        source: A ``.wrp`` or ``.wrpk`` path (or its bytes, with ``modules``).
        device: ``"cpu"`` or ``"cuda:N"``; default: the file's own family.
        engine: ``"python"`` (Warp's Python API) or ``"native"`` (the C++
            replayer's C API, in the process that profiles).
        inputs: ``{binding name: array}`` set before the first round.
        repeat: Timed rounds of the whole step (medians over them), at least 1.
        warmup: Untimed rounds first.
        nvtx: Push one NVTX range per op, named ``"<seq> <kernel>"``, so that
            Nsight Systems / Compute show wrpkit's op names.
        clock: On a CPU device, ``"auto"`` (the default: the thread's CPU time
            when a whole replay, timed both ways before the rounds, took more
            than :data:`BUSY_WALL_OVER_CPU` times its CPU time in wall time,
            else the wall clock; :attr:`ProfileResult.clock_choice` says
            which and why), ``"wall"`` or ``"cpu"`` (the profiling thread's CPU
            time, which leaves out waits for a core on a busy machine).  CUDA
            devices are timed with CUDA events (python engine) or the wall
            clock (native engine).
        modules: ``{filename: bytes}`` of module files (for bytes input).
        isolate: Validate here, then load and step in a child process
            (:mod:`wrpkit.debug.child`): a crash raises
            :class:`~wrpkit.errors.WrpCrashError` naming the op; the default.
            ``False`` profiles in this process.
        timeout: Seconds of wall time for the whole profile (implies ``isolate``).
        kernels: ``.py`` files defining the capture's kernels (a stock
            capture carries no types): imported as scripts, as ``wrp trace
            --kernels`` does; every matching kernel types the arrays it is
            passed, so that ``inputs`` are checked against those types.
            :attr:`ProfileResult.typing` says how each matched.
        kernel_output: (``isolate``) Where the kernels' own output (``wp.printf``) of one replay,
            the first round's stepped one, goes: a stream, ``"stdout"``, or None (the default: not
            shown; :func:`wrpkit.debug.isolation.run_in_child`).  In this process every replay
            prints where the process's output goes, as Warp does.

    Returns:
        A :class:`ProfileResult`.

    Raises:
        WrpFormatError, WrpValidationError, WrpModuleError: Invalid capture.
        WrpBindingError: Bad inputs, or a bad ``repeat``/``warmup``.
        WrpNotFoundError: ``nvtx`` without an NVTX library.
        WrpKernelsError: (``kernels``) A file fails to import, or no kernel matches.
        WrpRuntimeError: Warp failed to run an op.
        WrpCrashError: (``isolate``) The child died of a fatal signal.
        WrpTimeoutError: (``timeout``) The profile did not finish in time.
    """
    t0 = time.perf_counter()
    repeat, warmup = _rounds(repeat, warmup)
    if engine not in ("python", "native"):
        raise WrpError(f"unknown engine {engine!r}", hint="Use 'python' or 'native'.")
    if clock not in ("wall", "cpu", "auto"):
        raise WrpBindingError(f"unknown clock {clock!r}", hint="Use 'auto', 'wall' or 'cpu'.")
    opened = open_program(source, modules)
    from ..run.worker import verify_deferred  # noqa: PLC0415
    from ..run.prepare import check_runnable  # noqa: PLC0415
    from ..run.source_types import type_capture  # noqa: PLC0415
    from .trace import default_device  # noqa: PLC0415

    typing = type_capture(opened, list(kernels or ()))

    device = str(device) if device is not None else default_device(opened.program)
    if engine == "python":
        check_runnable(opened.program, device)
    if clock == "cpu" and not device.strip().lower().startswith("cpu"):
        raise WrpBindingError(f"--clock cpu times CPU devices only, not {device}",
                              hint="On CUDA, ops are timed with CUDA events (python engine); drop --clock.")
    verify_deferred(opened.prepared)
    if nvtx:
        Nvtx()  # refuse here, before the child starts, when there is no NVTX library
    if isolate or timeout is not None:
        result = _profile_in_child(opened, device=device, engine=engine, inputs=inputs, repeat=repeat,
                                   warmup=warmup, nvtx=nvtx, clock=clock, timeout=timeout, started=t0,
                                   kernel_output=kernel_output)
    else:
        result = run_profile(opened, device=device, engine=engine, inputs=inputs, repeat=repeat, warmup=warmup,
                             nvtx=nvtx, clock=clock, started=t0)
    result.typing = typing.to_json() if typing is not None else None
    result.call_sites = call_site_rows(result.ops, opened.program)
    return result


def call_site_rows(ops: list, program: m.Program) -> list:
    """Op times summed per line of the program that issued the ops (see :attr:`ProfileResult.call_sites`).

    Args:
        ops: :attr:`ProfileResult.ops`.
        program: The profiled program; its annotations say where each op was issued
            (:class:`wrpkit.checks.sources.Sources`).
    """
    from ..checks.sources import Sources, call_site_key  # noqa: PLC0415

    sources = Sources.of(program)
    if not sources.has_call_sites:
        return []
    per: dict = {}
    for o in ops:
        src = sources.op(o["path"])
        key = call_site_key(src)
        if key is None:
            continue
        row = per.setdefault(key, [src, [], [], {}])
        row[1].append(o["ms"])
        name = o["kernel"] or o["op"]
        if name not in row[2]:
            row[2].append(name)
        # The line that called the function holding the call (a helper called from several places).
        caller = src["stack"][1] if len(src.get("stack") or ()) > 1 else None
        if caller is not None:
            row[3].setdefault((call_site_key(caller), caller.get("function", "")), []).append(o["ms"])
    total = sum(o["ms"] for o in ops)

    def share(v):
        return round(sum(v) / total, 6) if total > 0 else 0.0

    return sorted(({"call_site": key, "file": src["file"], "line": src["line"], "function": src["function"],
                    "names": names, "calls": len(v), "total_ms": _ns(sum(v)), "median_ms": _ns(statistics.median(v)),
                    "share": share(v),
                    "callers": sorted(({"call_site": ck, "function": fn, "calls": len(cv), "total_ms": _ns(sum(cv)),
                                        "share": share(cv)} for (ck, fn), cv in callers.items()),
                                      key=lambda r: (-r["total_ms"], r["call_site"]))}
                   for key, (src, v, names, callers) in per.items()), key=lambda r: (-r["total_ms"], r["call_site"]))


def _profile_in_child(opened, *, device: str, engine: str, inputs: Optional[Mapping], repeat: int, warmup: int,
                      nvtx: bool = False, clock: str = "auto", timeout: Optional[float] = None,
                      started: Optional[float] = None, kernel_output=None) -> ProfileResult:
    """Profile a validated capture in a child process (:mod:`wrpkit.debug.isolation`); the body of
    ``profile(..., isolate=True)``.  The child times everything; its start counts in no figure."""
    job = {"device": device, "engine": engine, "repeat": int(repeat), "warmup": int(warmup), "nvtx": bool(nvtx),
           "clock": clock}
    data = run_in_child(opened, "profile", job, inputs, timeout=timeout, started=started, kernel_output=kernel_output)
    result = ProfileResult(str(opened.path) if opened.path is not None else "<bytes>", data["engine"],
                           data["device"], **{k: data[k] for k in CHILD_FIELDS}, load_seconds=data["load_seconds"])
    result.program = opened.program
    return result


def _choose_clock(whole_launch, tries: int = 3) -> dict:
    """The clock ``clock="auto"`` times a CPU device with: the whole graph replayed ``tries`` times,
    timed by the wall clock and by this thread's CPU time at once; the CPU time when the wall time
    is more than :data:`BUSY_WALL_OVER_CPU` times it (the thread waited for a core), else the wall
    clock (which also counts what the CPU time does not: page faults served, memory bandwidth)."""
    walls, cpus = [], []
    for _ in range(tries):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        whole_launch()
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        walls.append((w1 - w0) * 1e-6)
        cpus.append((c1 - c0) * 1e-6)
    wall, cpu = float(np.median(walls)), float(np.median(cpus))
    busy = cpu > 0 and wall > BUSY_WALL_OVER_CPU * cpu
    why = (f"wall time {wall / cpu:.2f}x the CPU time: the thread waited for a core" if busy
           else "wall time close to the CPU time: not busy")
    return {"clock": "cpu" if busy else "wall", "wall_ms": wall, "cpu_ms": cpu, "why": why}


def _rounds(repeat, warmup) -> tuple:
    try:
        r, w = int(repeat), int(warmup)
    except (TypeError, ValueError):
        raise WrpBindingError(f"repeat and warmup must be integers, got {repeat!r} and {warmup!r}") from None
    if r < 1 or w < 0:
        raise WrpBindingError(f"repeat must be at least 1 and warmup at least 0, got {r} and {w}",
                              hint="For example --repeat 10 --warmup 2.")
    return r, w


def _round_start(machine: st.Machine, prog: m.Program, given: dict) -> dict:
    """Each region's bytes at the start of a round (``{region_id: array}``): the inputs where given
    (whole regions), else the capture's own data, as a view of the file's mapping (no copy of a
    capture of many GiB), or zeros for a region the capture leaves zeroed (``np.zeros`` of a large
    size is pages the kernel maps on demand to its zero page: reading them costs no memory)."""
    start = {}
    for r in prog.regions:
        if r.region_id in given:
            start[r.region_id] = given[r.region_id]
        elif not r.has_initial_data or r.data is None:
            start[r.region_id] = np.zeros(r.size, dtype=np.uint8)
        elif len(memoryview(r.data).cast("B")) == r.size:
            start[r.region_id] = np.frombuffer(r.data, dtype=np.uint8, count=r.size)
        else:  # not the whole region in the record (not seen in a valid file): what Warp loaded
            start[r.region_id] = np.array(machine.region(r.region_id), copy=True)
    return start


def _restore(engine, snap: dict) -> None:
    """Write every region of ``snap`` into a loaded engine (bound as ``__wrpkit_r<id>``)."""
    for rid, data in snap.items():
        name = f"{st.REGION_BINDING}{rid}"
        view = engine.view(name)
        if view is not None:
            view[:] = data
        else:
            engine.write(name, data)


def run_profile(opened, *, device: str, engine: str, inputs: Optional[Mapping], repeat: int, warmup: int,
                nvtx: bool = False, clock: str = "auto", started: Optional[float] = None, before=None,
                stage=None, shown=None) -> ProfileResult:
    """Profile a validated capture in this process (the body of :func:`profile`).

    Args:
        opened: What :func:`~wrpkit.debug.common.open_program` returned.
        before: Called as ``before(op, index, path, iterations)`` just before each op runs.
        stage: Called with ``"loading"``, then ``"replaying"`` once the first op is about to run.
        shown: Called for a context manager that the first round's stepped replay runs in: its
            kernels' output (``wp.printf``) is shown (:mod:`wrpkit.debug.child`), one replay's
            worth; every other replay here (the other rounds, the whole-graph and grouped
            replays) prints where the process's output goes.  None: nothing is set up.
        Others: as :func:`profile`.
    """
    from .common import input_bytes  # noqa: PLC0415

    t0 = time.perf_counter() if started is None else started
    prog = opened.program
    if stage is not None:
        stage("loading")
    zero = _zero_launch(prog) if device.strip().lower().startswith("cpu") else None
    calib = None
    if zero is not None:
        try:
            calib = st.open_engine(engine, wrp1.encode_wrp1(_calibration_program(prog, zero)), opened.modules,
                                   device)
        except WrpError:  # a launch the loader refuses with no thread: profile with the empty-step floor alone
            zero = None
    stepped = prog if zero is None else dataclasses.replace(prog, ops=list(prog.ops) + [zero])
    groups = _groups(prog.ops)
    # With a zero-size launch: one more group of GROUP_OPS of them calibrates the group floor.
    stepper = st.build_stepper(stepped, empty_leaf=True,
                               groups=groups + ([[zero] * GROUP_OPS] if zero is not None and groups else []))
    group_at = {id(g[0]): (k, len(g)) for k, g in enumerate(groups)}
    image = wrp1.encode_wrp1(stepper.program)
    try:
        eng = st.open_engine(engine, image, opened.modules, device)
    except BaseException:
        if calib is not None:
            calib.close()
        raise
    del image
    timer = CudaEventTimer(device) if engine == "python" and not eng.is_cpu else HostTimer(
        "wall" if clock == "auto" else clock)
    machine = _TimedMachine(stepper, eng, timer, Nvtx() if nvtx else None)
    whole = None
    result = ProfileResult(str(opened.path) if opened.path is not None else "<bytes>", engine, device,
                           timer=timer.name, repeat=repeat, warmup=warmup)
    try:
        # The original graph, every region bound by name, for the plain replay of the same run.
        image = wrp1.encode_wrp1(st.prefix_program(prog, len(prog.ops)))
        whole = st.open_engine(engine, image, opened.modules, device)
        del image
        whole_launch = _engine_launch(whole)
        if clock == "auto" and eng.is_cpu:
            result.clock_choice = _choose_clock(whole_launch)
            machine.timer = timer = HostTimer(result.clock_choice["clock"])
            result.timer = timer.name
        if zero is not None:
            calib_launch, zero_leaf = _engine_launch(calib), stepper.leaf_of[id(zero)]
        # Every round starts from the same memory: the inputs over the captured data (restored below).
        snap = _round_start(machine, prog, input_bytes(opened, inputs, lambda r: np.array(machine.region(r),
                                                                                          copy=True)))
        result.load_seconds = time.perf_counter() - t0
        samples: dict = {}  # (path, iterations) -> raw ms per timed round
        order: list = []  # (path, iterations, index, op) of the first timed round, in run order
        floor: list = []
        group_samples: dict = {}  # (group number, iterations) -> raw ms per timed round
        group_members: dict = {}  # (group number, iterations) -> [(path, iterations)] of its ops
        zero_stepped: list = []  # ms of a zero-size launch stepped alone
        zero_group_stepped: list = []  # ms of a group of GROUP_OPS zero-size launches stepped
        zero_in_graph: list = []  # ms per zero-size launch inside the calibration graph
        empty = stepper.empty_leaf

        if stage is not None:
            stage("replaying")
        gc_was_enabled = gc.isenabled()
        gc.disable()  # as in trace: the walk makes small objects and frees none
        try:
            for rnd in range(warmup + repeat):
                timed = rnd >= warmup
                _restore(machine.engine, snap)
                seq = [0]
                for _ in range(EMPTY_STEPS):
                    machine.label = b"empty step"
                    machine.run_leaf(empty)
                    if timed:
                        floor.append(machine.last_ms)
                if zero is not None:
                    for _ in range(EMPTY_STEPS):
                        machine.label = b"launch floor"
                        machine.run_leaf(zero_leaf)
                        if timed:
                            zero_stepped.append(machine.last_ms)
                    if groups:
                        for _ in range(EMPTY_STEPS):
                            machine.label = b"group floor"
                            machine.run_leaf(stepper.group_leaves[-1])
                            if timed:
                                zero_group_stepped.append(machine.last_ms)
                    if nvtx:
                        machine.nvtx.push(b"launch calibration")
                    per_launch = timer(calib_launch) / CALIBRATION_LAUNCHES
                    if nvtx:
                        machine.nvtx.pop()
                    if timed:
                        zero_in_graph.append(per_launch)

                def visit(op, index, path, iterations, timed=timed):
                    if timed:
                        key = (path, iterations)
                        s = samples.get(key)
                        if s is None:
                            s = samples[key] = []
                            order.append((path, iterations, index, op))
                        s.append(machine.last_ms)
                    return False

                def set_label(op, index, path, iterations):
                    if nvtx:
                        name = launch_label(op) if isinstance(op, m.KernelLaunch) else op.op_type.name
                        machine.label = f"{seq[0]} {name}".encode()
                    seq[0] += 1
                    if before is not None:
                        before(op, index, path, iterations)

                with shown() if shown is not None and rnd == 0 else contextlib.nullcontext():
                    w0 = time.perf_counter()
                    st.walk_program(prog.ops, machine, visit, before=set_label)
                    w1 = time.perf_counter()
                _restore(whole, snap)
                if nvtx:
                    machine.nvtx.push(b"whole graph replay")
                rep = timer(whole_launch)
                if nvtx:
                    machine.nvtx.pop()
                stepping = w1 - w0
                if groups:
                    # The same step again from the same memory, each group in one launch (its ops run in the
                    # same order, so every condition reads what it read above).
                    _restore(machine.engine, snap)

                    def on_group(g, paths, iterations, timed=timed):
                        if timed:
                            key = (g, iterations)
                            group_samples.setdefault(key, []).append(machine.last_ms)
                            group_members.setdefault(key, [(p, iterations) for p in paths])

                    g0 = time.perf_counter()
                    _walk_groups(prog.ops, machine, group_at, stepper.group_leaves, on_group, before=before,
                                 nvtx=nvtx)
                    stepping += time.perf_counter() - g0
                if timed:
                    result.step_ms.append(stepping * 1e3)  # both walks: all that profiling a round costs
                    result.replay_rounds_ms.append(rep)
        finally:
            if gc_was_enabled:
                gc.enable()
        result.floor_ms = _ns(statistics.median(floor)) if floor else 0.0
        result.launch_floor_ms = result.floor_ms
        if zero_stepped and zero_in_graph:
            result.launch_floor_ms = _ns(max(result.floor_ms, statistics.median(zero_stepped)
                                             - statistics.median(zero_in_graph)))
        result.group_floor_ms = result.launch_floor_ms
        if zero_group_stepped and zero_in_graph:
            result.group_floor_ms = _ns(max(result.floor_ms, statistics.median(zero_group_stepped)
                                            - GROUP_OPS * statistics.median(zero_in_graph)))
        result.replay_ms = _ns(statistics.median(result.replay_rounds_ms)) if result.replay_rounds_ms else 0.0
        result.step_ms = [_ns(v) for v in result.step_ms]
        result.replay_rounds_ms = [_ns(v) for v in result.replay_rounds_ms]
        raw_of = {key: statistics.median(v) for key, v in samples.items()}
        kinds = {(path, iterations): op for path, iterations, _, op in order}
        grouped = _split_groups(group_samples, group_members, raw_of, kinds, result.floor_ms,
                                result.group_floor_ms)
        result.grouped_ops = len(grouped)
        for seq, (path, iterations, index, op) in enumerate(order):
            raw = raw_of[(path, iterations)]
            base = result.launch_floor_ms if isinstance(op, m.KernelLaunch) else result.floor_ms
            ms = grouped.get((path, iterations), max(0.0, raw - base))
            result.ops.append({"seq": seq, "index": index, "path": path,
                               "iteration": iterations[-1] if iterations else None, "iterations": list(iterations),
                               "op": op.op_type.name,
                               "kernel": launch_label(op) if isinstance(op, m.KernelLaunch) else None,
                               "ms": _ns(ms), "raw_ms": _ns(raw)})
    finally:
        machine.close()
        if whole is not None:
            whole.close()
        if calib is not None:
            calib.close()
    summarize(result, prog)
    result.program = prog
    return result


def _groups(ops, out: Optional[list] = None) -> list:
    """Runs of up to :data:`GROUP_OPS` consecutive leaf ops of one body (at any depth), each of two or more.

    Why: stepped alone, every op is the first op of its stream, and Warp's
    CPU replayer (``apic.cpp``, ``apic_cpu_replay_stream``) sets up per
    stream (its argument scratch) what a whole replay sets up once; stepped
    together, a group pays that once, as the whole replay does, so the
    group's time less the launch floor is what its ops cost inside the
    graph, and the ops stepped alone say how it divides among them.
    """
    out = [] if out is None else out
    run: list = []
    for op in list(ops) + [None]:
        if op is not None and not isinstance(op, (m.If, m.While)):
            run.append(op)
            continue
        for k in range(0, len(run), GROUP_OPS):
            if len(run[k:k + GROUP_OPS]) > 1:
                out.append(run[k:k + GROUP_OPS])
        run = []
        if op is not None:
            for body in m.nested_bodies(op):
                _groups(body, out)
    return out


def _walk_groups(ops, machine, group_at: dict, group_leaves: list, on_group, *, top: Optional[int] = None,
                 prefix: str = "", iterations: tuple = (), before=None, nvtx: bool = False) -> None:
    """Run ``ops`` as :func:`~wrpkit.debug.stepper.walk_program` does, but each group in one launch.

    ``on_group(group number, paths of its ops, iterations)`` is called after
    each group's launch (``machine.last_ms`` holds its time); ops outside
    groups are stepped alone, untimed.  ``before`` is called with a group's
    first op.
    """
    i = 0
    while i < len(ops):
        op, index, path = ops[i], (i if top is None else top), f"{prefix}{i}"
        if isinstance(op, m.If):
            then = machine.cond(op.cond_region_id, op.cond_offset)
            _walk_groups(op.then_ops if then else op.else_ops, machine, group_at, group_leaves, on_group, top=index,
                         prefix=path + ("." if then else ".e"), iterations=iterations, before=before, nvtx=nvtx)
        elif isinstance(op, m.While):
            it = 0
            while op.body and machine.cond(op.cond_region_id, op.cond_offset):
                _walk_groups(op.body, machine, group_at, group_leaves, on_group, top=index, prefix=path + ".",
                             iterations=iterations + (it,), before=before, nvtx=nvtx)
                it += 1
                if it >= WARP_WHILE_GUARD:  # profiling stops where Warp's replay would
                    raise while_guard_error(f"the WHILE at op {path}")
        else:
            if before is not None:
                before(op, index, path, iterations)
            group = group_at.get(id(op))
            if group is not None:
                g, n = group
                if nvtx:
                    machine.label = f"group {path} ({n} ops)".encode()
                machine.run_leaf(group_leaves[g])
                on_group(g, [f"{prefix}{j}" for j in range(i, i + n)], iterations)
                i += n
                continue
            machine.run_leaf(machine.stepper.leaf_of[id(op)])
        i += 1


def _split_groups(group_samples: dict, group_members: dict, raw_of: dict, kinds: dict, floor_ms: float,
                  group_floor_ms: float) -> dict:
    """``{(path, iterations): ms}`` of every op in a timed group: the group's median less its floor
    (``group_floor_ms`` for a group with a kernel launch, else ``floor_ms``), split by each op's own median
    above the empty step (equally where none is above it)."""
    out = {}
    for key, times in group_samples.items():
        members = [k for k in group_members[key] if k in raw_of]
        if not members:
            continue
        launches = any(isinstance(kinds.get(k), m.KernelLaunch) for k in members)
        total = max(0.0, statistics.median(times) - (group_floor_ms if launches else floor_ms))
        weights = [max(0.0, raw_of[k] - floor_ms) for k in members]
        whole = sum(weights)
        for k, w in zip(members, weights):
            out[k] = total * (w / whole if whole > 0 else 1 / len(members))
    return out


def _zero_launch(program: m.Program) -> Optional[m.KernelLaunch]:
    """A copy of the program's first kernel launch that runs no thread (shape 0); None without launches.

    Why: stepping a launch costs more than stepping nothing, beyond the
    launch's own cost in a graph (Warp's CPU replayer, ``apic.cpp``
    ``apic_cpu_replay_stream``, allocates its argument scratch once per
    stream it replays, so a stepped launch pays that every time, and an
    empty step not at all).  A launch of no thread costs what a launch
    costs without its kernel's work, stepped and inside a graph alike, so
    the difference of the two is that cost of stepping.
    """
    for _, op in m.walk_ops(program.ops):
        if isinstance(op, m.KernelLaunch):
            return dataclasses.replace(op, shape=tuple(0 for _ in op.shape), size=0, dim=0)
    return None


def _calibration_program(program: m.Program, zero: m.KernelLaunch) -> m.Program:
    """:data:`CALIBRATION_LAUNCHES` copies of ``zero`` over the program's regions, none with initial data.

    A launch of no thread touches no memory, so the regions are never paged in.
    """
    regions = [dataclasses.replace(r, has_initial_data=False, data=None) for r in program.regions]
    return dataclasses.replace(program, ops=[zero] * CALIBRATION_LAUNCHES, regions=regions, bindings=[],
                               annotations=b"")


def _ns(ms: float) -> float:
    """Milliseconds rounded to whole nanoseconds (what the clocks resolve; keeps the JSON readable)."""
    return round(ms, 6)


def summarize(result: ProfileResult, program: Optional[m.Program] = None) -> None:
    """Fill ``kernels``, ``top_level`` and ``total_ms`` of ``result`` from its ``ops``."""
    total = _ns(sum(o["ms"] for o in result.ops))
    result.total_ms = total
    per_kernel: dict = {}
    for o in result.ops:
        name = o["kernel"] or o["op"]
        per_kernel.setdefault((name, o["op"]), []).append(o["ms"])
    share = (lambda v: v / total) if total > 0 else (lambda v: 0.0)  # noqa: E731
    result.kernels = sorted(({"name": name, "op": op, "calls": len(v), "total_ms": _ns(sum(v)),
                              "median_ms": _ns(statistics.median(v)), "share": round(share(sum(v)), 6)}
                             for (name, op), v in per_kernel.items()), key=lambda r: (-r["total_ms"], r["name"]))
    per_top: dict = {}
    for o in result.ops:
        t = per_top.setdefault(o["index"], [0, 0.0, o])
        t[0] += 1
        t[1] += o["ms"]
    rows = []
    for index in sorted(per_top):
        calls, ms, first = per_top[index]
        op = program.ops[index] if program is not None and 0 <= index < len(program.ops) else None
        kind = op.op_type.name if op is not None else (first["op"] if first["path"] == str(index) else "?")
        name = launch_label(op) if isinstance(op, m.KernelLaunch) else kind
        rows.append({"index": index, "op": kind, "name": name, "calls": calls, "total_ms": _ns(ms),
                     "share": round(share(ms), 6)})
    result.top_level = rows


# ---------------------------------------------------------------------------
# Chrome trace-event format
# ---------------------------------------------------------------------------


#: Trace times are whole multiples of 1/1024 us (just under a nanosecond): binary fractions, so that a
#: viewer's ``ts + dur`` in floating point is exact and an enclosing event never ends a rounding error
#: before its last child (Chromium's Performance panel drops such a child, and everything it holds).
TICKS_PER_US = 1024


def _us(ticks: int) -> float:
    """Integer ticks (:data:`TICKS_PER_US`) as the format's microseconds (exact in binary floating point)."""
    return ticks / TICKS_PER_US


def chrome_trace(result: ProfileResult, program: Optional[m.Program] = None) -> dict:
    """The profile as a Chrome trace-event file (``{"traceEvents": [...], ...}``).

    One complete event (``"ph": "X"``) per op run, laid end to end on one
    track in run order, each as long as its median time (``ms``); every
    IF and WHILE that ran is an enclosing event over its body's ops, and
    every WHILE iteration an enclosing event of its own, with the
    iteration in ``args``.  Each op event's ``args`` hold ``seq``,
    ``index``, ``path``, ``iteration``, ``kernel`` and ``raw_ms``, so that
    ``wrp graph --profile`` can read times back.  Timestamps are in
    microseconds, as the format says, each a whole multiple of 1/1024 us
    (:data:`TICKS_PER_US`), so that nesting holds in a viewer's floating point.
    """
    meta = {"format": PROFILE_FORMAT, "file": result.file, "engine": result.engine, "device": result.device,
            "timer": result.timer, "repeat": result.repeat, "warmup": result.warmup, "total_ms": result.total_ms,
            "replay_ms": result.replay_ms, "floor_ms": result.floor_ms, "launch_floor_ms": result.launch_floor_ms,
            "group_floor_ms": result.group_floor_ms, "grouped_ops": result.grouped_ops, "coverage": result.coverage}
    pid, tid = 1, 1
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": tid,
               "args": {"name": f"wrp profile {Path(result.file).name}"}},
              {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
               "args": {"name": f"{result.engine} engine, {result.device} (medians of {result.repeat})"}}]
    program = program if program is not None else result.program
    # Times are whole ticks here, so that an enclosing event ends exactly where its last op does.
    open_groups: list = []  # [(key, event, start ns)], outermost first
    t = 0
    for o in result.ops:
        want = _groups_of(o, program)
        keep = 0
        while keep < min(len(open_groups), len(want)) and open_groups[keep][0] == want[keep][0]:
            keep += 1
        for _, ev, start in open_groups[keep:]:
            ev["dur"] = _us(t - start)
        del open_groups[keep:]
        for key, ev in want[keep:]:
            ev.update({"ph": "X", "ts": _us(t), "dur": 0.0, "pid": pid, "tid": tid})
            events.append(ev)
            open_groups.append((key, ev, t))
        dur = max(0, round(o["ms"] * 1e3 * TICKS_PER_US))
        events.append({"name": o["kernel"] or o["op"], "cat": o["op"], "ph": "X", "ts": _us(t), "dur": _us(dur),
                       "pid": pid, "tid": tid,
                       "args": {k: o[k] for k in ("seq", "index", "path", "iteration", "iterations", "kernel", "op",
                                                  "ms", "raw_ms")}})
        t += dur
    for _, ev, start in open_groups:
        ev["dur"] = _us(t - start)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"wrpkit": meta}}


def _groups_of(o: dict, program: Optional[m.Program]) -> list:
    """``[(key, event)]`` of the IF/WHILE bodies (and WHILE iterations) enclosing an op run, outermost first."""
    if program is None:
        return []
    parts = o["path"].split(".")
    its = list(o["iterations"])
    out, prefix, ops, depth = [], "", program.ops, 0
    for k, part in enumerate(parts[:-1]):
        prefix = part if not prefix else f"{prefix}.{part}"
        try:
            node = ops[int(part.lstrip("e"))]
        except (ValueError, IndexError):
            return out
        if isinstance(node, m.While) and depth < len(its):
            outer = tuple(its[:depth])
            out.append(((prefix, outer), {"name": f"WHILE {prefix}", "cat": "WHILE", "args": {"path": prefix}}))
            out.append(((prefix, outer + (its[depth],)),
                        {"name": f"iteration {its[depth]}", "cat": "WHILE iteration",
                         "args": {"path": prefix, "iteration": its[depth]}}))
            depth += 1
            ops = node.body
        elif isinstance(node, m.If):
            branch = "else" if parts[k + 1].startswith("e") else "then"
            out.append(((prefix, tuple(its[:depth]), branch),
                        {"name": f"IF {prefix} ({branch})", "cat": "IF", "args": {"path": prefix, "branch": branch}}))
            ops = node.else_ops if branch == "else" else node.then_ops
        else:
            return out
    return out


# ---------------------------------------------------------------------------
# Reading a profile back (``wrp graph --profile``)
# ---------------------------------------------------------------------------


def load_profile(path) -> dict:
    """Per-path times of a profile file: a ``wrp profile -o`` trace-event file, or its ``--json``.

    Returns:
        ``{"paths": {path: {"ms": total over its runs, "calls": runs, "kernel": key or None, "op": kind}},
        "total_ms", "replay_ms", "engine", "device", "timer", "repeat", "file"}``.

    Raises:
        WrpFormatError: The file is neither.
    """
    hint = "Pass a file written by `wrp profile FILE -o OUT.json` (or its --json output)."
    try:
        data = json.loads(read_user_text(path, "profile"))  # missing: exit 2; unreadable: exit 1
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WrpFormatError(f"cannot read profile {path}: {e}", hint=hint) from None
    ops = None
    meta: dict = {}
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        other = data.get("otherData")
        meta = other.get("wrpkit") if isinstance(other, dict) and isinstance(other.get("wrpkit"), dict) else {}
        ops = []
        for ev in data["traceEvents"]:
            if not isinstance(ev, dict) or ev.get("ph") != "X":
                continue
            args = ev.get("args")
            if isinstance(args, dict) and "seq" in args and "path" in args:
                ms = args.get("ms")
                if not isinstance(ms, (int, float)):
                    ms = ev.get("dur", 0) / 1e3 if isinstance(ev.get("dur"), (int, float)) else None
                ops.append({"path": args.get("path"), "kernel": args.get("kernel"), "op": args.get("op"), "ms": ms})
    elif isinstance(data, dict) and data.get("format") == PROFILE_FORMAT and isinstance(data.get("ops"), list):
        meta, ops = data, data["ops"]
    if ops is None or meta.get("format", PROFILE_FORMAT) != PROFILE_FORMAT:
        raise WrpFormatError(f"{path} is not a wrp profile", hint=hint)
    paths: dict = {}
    for o in ops:
        ms = o.get("ms") if isinstance(o, dict) else None
        if not isinstance(o.get("path") if isinstance(o, dict) else None, str) or not isinstance(ms, (int, float)) \
                or isinstance(ms, bool) or not 0 <= ms < float("inf"):
            raise WrpFormatError(f"{path}: an op record has no path or no finite, non-negative time", hint=hint)
        p = paths.setdefault(o["path"], {"ms": 0.0, "calls": 0, "kernel": o.get("kernel"), "op": o.get("op")})
        p["ms"] += float(o["ms"])
        p["calls"] += 1
    def number(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf") \
            else None

    def text(v):
        return str(v)[:200] if v is not None else None

    total = number(meta.get("total_ms"))
    return {"paths": paths, "total_ms": total if total is not None else sum(p["ms"] for p in paths.values()),
            "replay_ms": number(meta.get("replay_ms")), "engine": text(meta.get("engine")),
            "device": text(meta.get("device")), "timer": text(meta.get("timer")),
            "repeat": text(meta.get("repeat")), "file": text(meta.get("file"))}


def check_profile_matches(profile: dict, program: m.Program) -> None:
    """Refuse a profile whose op paths or kernels are not those of ``program``.

    Raises:
        WrpBindingError: A path the program lacks, or another op kind or kernel there.
    """
    from ..run.crash import op_at_path  # noqa: PLC0415

    for path, p in profile["paths"].items():
        op = op_at_path(program.ops, path)
        kernel = launch_label(op) if isinstance(op, m.KernelLaunch) else None
        if op is None or (p.get("op") and p["op"] != op.op_type.name) or (p.get("kernel") and p["kernel"] != kernel):
            what = "no op" if op is None else f"{op.op_type.name} {kernel or ''}".strip()
            raise WrpBindingError(f"the profile is not of this capture: it times "
                                  f"{p.get('kernel') or p.get('op') or 'an op'} at op {path}, where this capture has "
                                  f"{what}",
                                  hint="Profile this file (`wrp profile FILE -o OUT.json`) and pass that OUT.json.")


__all__ = ["profile", "ProfileResult", "chrome_trace", "load_profile", "check_profile_matches", "run_profile"]
