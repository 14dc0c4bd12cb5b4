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
the *launch floor* instead (see :func:`~wrpkit.debug.profile_floors.zero_launch`).
The whole step is repeated ``repeat`` times after ``warmup`` untimed rounds, each round starting from the same
memory (the state after ``inputs`` were set), and every figure is a median
over the rounds.  Between rounds, a plain replay of the whole graph (the
original program, loaded once more) is timed from the same state: the sum
of the per-op medians against its median is the *coverage*.

This module runs the profile; the rest is one job a module: the clocks and the
timed stepping machine (:mod:`~wrpkit.debug.profile_timers`), the floors
(:mod:`~wrpkit.debug.profile_floors`), the grouped steps
(:mod:`~wrpkit.debug.profile_groups`), the result and its summaries
(:mod:`~wrpkit.debug.profile_result`), the Chrome trace export
(:mod:`~wrpkit.debug.profile_export`) and reading a profile file back
(:mod:`~wrpkit.debug.profile_format`).

Nothing here prints.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from typing import Mapping, Optional

import numpy as np

from .. import records
from ..records import field, record
from .. import model as m
from ..checks.effects import launch_label
from ..errors import WrpBindingError, WrpError
from ..formats import wrp1
from . import stepper as st
from ..run.replay.loaded import open_loaded
from .common import open_program
from .isolation import run_in_child
from .profile_export import chrome_trace
from .profile_floors import CALIBRATION_LAUNCHES, EMPTY_STEPS, calibration_program, floors, zero_launch
from .profile_format import PROFILE_FORMAT, check_profile_matches, load_profile
from .profile_groups import GROUP_OPS, op_groups, split_groups, walk_groups
from .profile_result import MIN_COVERAGE, ProfileResult, call_site_rows, round_ns, summarize
from .profile_timers import BUSY_WALL_OVER_CPU, CudaEventTimer, HostTimer, Nvtx, TimedMachine, choose_clock

#: What a profile child reports (beside its engine, device and load time).
CHILD_FIELDS = ("ops", "kernels", "top_level", "total_ms", "replay_ms", "floor_ms", "launch_floor_ms", "timer",
                "repeat", "warmup", "step_ms", "replay_rounds_ms", "grouped_ops", "group_floor_ms", "clock_choice")


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
            (:mod:`wrpkit.debug.jobs`, in a wrpkit child): a crash raises
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
    from ..run.contain.worker import verify_deferred  # noqa: PLC0415
    from ..run.load.prepare import check_runnable  # noqa: PLC0415
    from ..run.capture.source_types import type_capture  # noqa: PLC0415
    from .trace import default_device  # noqa: PLC0415

    typing = type_capture(opened, list(kernels or ()))

    device = str(device) if device is not None else default_device(opened.model)
    if engine == "python":
        check_runnable(opened.model, device)
    if clock == "cpu" and not device.strip().lower().startswith("cpu"):
        raise WrpBindingError(f"--clock cpu times CPU devices only, not {device}",
                              hint="On CUDA, ops are timed with CUDA events (python engine); drop --clock.")
    verify_deferred(opened)
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
    result.call_sites = call_site_rows(result.ops, opened.model)
    return result


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
    result.program = opened.model
    return result


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


@record
class _Samples:
    """Every time one profile takes, in ms, per timed round (the medians are taken at the end)."""

    ops: dict = field(default_factory=dict)  # (path, iterations) -> raw ms per timed round
    order: list = field(default_factory=list)  # (path, iterations, index, op) of the first timed round, in run order
    floor: list = field(default_factory=list)  # empty steps
    groups: dict = field(default_factory=dict)  # (group number, iterations) -> raw ms per timed round
    group_members: dict = field(default_factory=dict)  # (group number, iterations) -> [(path, iterations)] of its ops
    zero_stepped: list = field(default_factory=list)  # a zero-size launch stepped alone
    zero_group_stepped: list = field(default_factory=list)  # a group of GROUP_OPS zero-size launches stepped
    zero_in_graph: list = field(default_factory=list)  # per zero-size launch inside the calibration graph


@record
class _Engines:
    """What one profile in this process runs: the stepped program's machine, the whole graph (for the
    plain replay) and, on a CPU device, the calibration graph of zero-size launches."""

    prog: m.Program
    stepper: st.Stepper
    machine: TimedMachine
    groups: list  # op_groups() of the program
    group_at: dict  # id(first op of a group) -> (group number, ops in it)
    zero: Optional[m.KernelLaunch] = None  # the zero-size launch stepped (None: no launch floor)
    calib: object = None  # engine of the calibration graph
    whole: object = None  # engine of the whole graph
    whole_launch: object = None
    calib_launch: object = None
    zero_leaf: Optional[int] = None

    def close(self) -> None:
        self.machine.close()
        if self.whole is not None:
            self.whole.close()
        if self.calib is not None:
            self.calib.close()


def _open_stepped(opened, device: str, engine: str, clock: str, nvtx: bool) -> _Engines:
    """Load the stepped program (every leaf op, an empty leaf, the groups and, on a CPU device, a
    zero-size launch with its calibration graph) and its timed machine."""
    prog = opened.model
    zero = zero_launch(prog) if device.strip().lower().startswith("cpu") else None
    calib = None
    if zero is not None:
        try:
            calib = open_loaded(engine, wrp1.encode_wrp1(calibration_program(prog, zero)), opened.modules,
                                device, made_from_valid=True)
        except WrpError:  # a launch the loader refuses with no thread: profile with the empty-step floor alone
            zero = None
    stepped = prog if zero is None else records.replace(prog, ops=list(prog.ops) + [zero])
    groups = op_groups(prog.ops)
    # With a zero-size launch: one more group of GROUP_OPS of them calibrates the group floor.
    stepper = st.build_stepper(stepped, empty_leaf=True,
                               groups=groups + ([[zero] * GROUP_OPS] if zero is not None and groups else []))
    group_at = {id(g[0]): (k, len(g)) for k, g in enumerate(groups)}
    image = wrp1.encode_wrp1(stepper.program)
    try:
        eng = open_loaded(engine, image, opened.modules, device, made_from_valid=True)
    except BaseException:
        if calib is not None:
            calib.close()
        raise
    del image
    timer = CudaEventTimer(device) if engine == "python" and not eng.is_cpu else HostTimer(
        "wall" if clock == "auto" else clock)
    machine = TimedMachine(stepper, eng, timer, Nvtx() if nvtx else None)
    return _Engines(prog, stepper, machine, groups, group_at, zero=zero, calib=calib)


def _open_whole(run: _Engines, opened, device: str, engine: str, clock: str, result: ProfileResult) -> None:
    """Load the original graph, every region bound by name, for the plain replay of the same run; with
    ``clock="auto"`` on a CPU device, choose the clock by timing it (:func:`choose_clock`)."""
    prog = run.prog
    image = wrp1.encode_wrp1(st.prefix_program(prog, len(prog.ops)))
    run.whole = open_loaded(engine, image, opened.modules, device, made_from_valid=True)
    del image
    run.whole_launch = run.whole.launcher()
    if clock == "auto" and run.machine.engine.is_cpu:
        result.clock_choice = choose_clock(run.whole_launch)
        run.machine.timer = HostTimer(result.clock_choice["clock"])
        result.timer = run.machine.timer.name
    if run.zero is not None:
        run.calib_launch, run.zero_leaf = run.calib.launcher(), run.stepper.leaf_of[id(run.zero)]


def _time_floors(run: _Engines, samples: _Samples, timed: bool, nvtx: bool) -> None:
    """One round's empty steps and, with a zero-size launch, its launch-floor calibration."""
    machine = run.machine
    for _ in range(EMPTY_STEPS):
        machine.label = b"empty step"
        machine.run_leaf(run.stepper.empty_leaf)
        if timed:
            samples.floor.append(machine.last_ms)
    if run.zero is None:
        return
    for _ in range(EMPTY_STEPS):
        machine.label = b"launch floor"
        machine.run_leaf(run.zero_leaf)
        if timed:
            samples.zero_stepped.append(machine.last_ms)
    if run.groups:
        for _ in range(EMPTY_STEPS):
            machine.label = b"group floor"
            machine.run_leaf(run.stepper.group_leaves[-1])
            if timed:
                samples.zero_group_stepped.append(machine.last_ms)
    if nvtx:
        machine.nvtx.push(b"launch calibration")
    per_launch = machine.timer(run.calib_launch) / CALIBRATION_LAUNCHES
    if nvtx:
        machine.nvtx.pop()
    if timed:
        samples.zero_in_graph.append(per_launch)


def _time_ops(run: _Engines, samples: _Samples, timed: bool, nvtx: bool, before, shown) -> float:
    """One round's stepped walk, each leaf op timed alone; returns the walk's wall time in seconds."""
    machine = run.machine
    seq = [0]

    def visit(op, index, path, iterations):
        if timed:
            key = (path, iterations)
            s = samples.ops.get(key)
            if s is None:
                s = samples.ops[key] = []
                samples.order.append((path, iterations, index, op))
            s.append(machine.last_ms)
        return False

    def set_label(op, index, path, iterations):
        if nvtx:
            name = launch_label(op, run.prog) if isinstance(op, m.KernelLaunch) else op.op_type.name
            machine.label = f"{seq[0]} {name}".encode()
        seq[0] += 1
        if before is not None:
            before(op, index, path, iterations)

    with shown() if shown is not None else contextlib.nullcontext():
        w0 = time.perf_counter()
        st.walk_program(run.prog.ops, machine, visit, before=set_label)
        w1 = time.perf_counter()
    return w1 - w0


def _time_whole(run: _Engines, snap: dict, nvtx: bool) -> float:
    """One plain replay of the whole graph from the round's start; its time in ms."""
    machine = run.machine
    _restore(run.whole, snap)
    if nvtx:
        machine.nvtx.push(b"whole graph replay")
    rep = machine.timer(run.whole_launch)
    if nvtx:
        machine.nvtx.pop()
    return rep


def _time_groups(run: _Engines, samples: _Samples, snap: dict, timed: bool, nvtx: bool, before) -> float:
    """The same step again from the same memory, each group in one launch (its ops run in the same
    order, so every condition reads what it read before); returns its wall time in seconds."""
    machine = run.machine
    _restore(machine.engine, snap)

    def on_group(g, paths, iterations):
        if timed:
            key = (g, iterations)
            samples.groups.setdefault(key, []).append(machine.last_ms)
            samples.group_members.setdefault(key, [(p, iterations) for p in paths])

    g0 = time.perf_counter()
    walk_groups(run.prog.ops, machine, run.group_at, run.stepper.group_leaves, on_group, before=before, nvtx=nvtx)
    return time.perf_counter() - g0


def _time_rounds(run: _Engines, samples: _Samples, snap: dict, result: ProfileResult, *, nvtx: bool, before,
                 shown) -> None:
    """The ``warmup`` untimed rounds, then the ``repeat`` timed ones, each from ``snap``: floors, the
    stepped walk, a whole replay and the group walk."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as in trace: the walk makes small objects and frees none
    try:
        for rnd in range(result.warmup + result.repeat):
            timed = rnd >= result.warmup
            _restore(run.machine.engine, snap)
            _time_floors(run, samples, timed, nvtx)
            stepping = _time_ops(run, samples, timed, nvtx, before, shown if rnd == 0 else None)
            rep = _time_whole(run, snap, nvtx)
            if run.groups:
                stepping += _time_groups(run, samples, snap, timed, nvtx, before)
            if timed:
                result.step_ms.append(stepping * 1e3)  # both walks: all that profiling a round costs
                result.replay_rounds_ms.append(rep)
    finally:
        if gc_was_enabled:
            gc.enable()


def _fill_times(result: ProfileResult, samples: _Samples, program: m.Program) -> None:
    """The floors, the replay's median and one row per op run (``result.ops``), from the samples."""
    result.floor_ms, result.launch_floor_ms, result.group_floor_ms = floors(
        samples.floor, samples.zero_stepped, samples.zero_group_stepped, samples.zero_in_graph)
    result.replay_ms = round_ns(statistics.median(result.replay_rounds_ms)) if result.replay_rounds_ms else 0.0
    result.step_ms = [round_ns(v) for v in result.step_ms]
    result.replay_rounds_ms = [round_ns(v) for v in result.replay_rounds_ms]
    raw_of = {key: statistics.median(v) for key, v in samples.ops.items()}
    kinds = {(path, iterations): op for path, iterations, _, op in samples.order}
    grouped = split_groups(samples.groups, samples.group_members, raw_of, kinds, result.floor_ms,
                           result.group_floor_ms)
    result.grouped_ops = len(grouped)
    for seq, (path, iterations, index, op) in enumerate(samples.order):
        raw = raw_of[(path, iterations)]
        base = result.launch_floor_ms if isinstance(op, m.KernelLaunch) else result.floor_ms
        ms = grouped.get((path, iterations), max(0.0, raw - base))
        result.ops.append({"seq": seq, "index": index, "path": path,
                           "iteration": iterations[-1] if iterations else None, "iterations": list(iterations),
                           "op": op.op_type.name,
                           "kernel": launch_label(op, program) if isinstance(op, m.KernelLaunch) else None,
                           "ms": round_ns(ms), "raw_ms": round_ns(raw)})


def run_profile(opened, *, device: str, engine: str, inputs: Optional[Mapping], repeat: int, warmup: int,
                nvtx: bool = False, clock: str = "auto", started: Optional[float] = None, before=None,
                stage=None, shown=None) -> ProfileResult:
    """Profile a validated capture in this process (the body of :func:`profile`).

    Args:
        opened: What :func:`~wrpkit.debug.common.open_program` returned.
        before: Called as ``before(op, index, path, iterations)`` just before each op runs.
        stage: Called with ``"loading"``, then ``"replaying"`` once the first op is about to run.
        shown: Called for a context manager that the first round's stepped replay runs in: its
            kernels' output (``wp.printf``) is shown (:mod:`wrpkit.debug.jobs`, in a wrpkit child), one replay's
            worth; every other replay here (the other rounds, the whole-graph and grouped
            replays) prints where the process's output goes.  None: nothing is set up.
        Others: as :func:`profile`.
    """
    from .common import input_bytes  # noqa: PLC0415

    t0 = time.perf_counter() if started is None else started
    prog = opened.model
    if stage is not None:
        stage("loading")
    run = _open_stepped(opened, device, engine, clock, nvtx)
    machine = run.machine
    result = ProfileResult(str(opened.path) if opened.path is not None else "<bytes>", engine, device,
                           timer=machine.timer.name, repeat=repeat, warmup=warmup)
    try:
        _open_whole(run, opened, device, engine, clock, result)
        # Every round starts from the same memory: the inputs over the captured data (restored each round).
        snap = _round_start(machine, prog, input_bytes(opened, inputs, lambda r: np.array(machine.region(r),
                                                                                          copy=True)))
        result.load_seconds = time.perf_counter() - t0
        samples = _Samples()
        if stage is not None:
            stage("replaying")
        _time_rounds(run, samples, snap, result, nvtx=nvtx, before=before, shown=shown)
        _fill_times(result, samples, prog)
    finally:
        run.close()
    summarize(result, prog)
    result.program = prog
    return result


__all__ = ["profile", "ProfileResult", "chrome_trace", "load_profile", "check_profile_matches", "run_profile",
           "CHILD_FIELDS", "GROUP_OPS", "MIN_COVERAGE", "BUSY_WALL_OVER_CPU", "PROFILE_FORMAT"]
