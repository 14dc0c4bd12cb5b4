"""Replay a capture op by op and record what each op writes (``wrp trace``).

Example::

    t = wrpkit.trace("sim.wrp", inputs={"x": x}, stop_at_nonfinite=True)
    if t.first_nonfinite:
        print(t.first_nonfinite["index"], t.first_nonfinite["kernel"], t.first_nonfinite["binding"])
    t.save("cpu.trace.json")
    t2 = wrpkit.trace("sim.wrp", engine="native", against="cpu.trace.json")
    t2.first_divergence            # None: both engines wrote the same bytes at every op

Ops are numbered as ``wrp inspect --ops`` numbers them: ``index`` is the
top-level op (0-based), ``path`` the position inside IF/WHILE bodies
(``"1.2"``; ``"1.e0"`` for an else body), ``iteration`` the (innermost) WHILE
iteration, 0-based.  How ops are run one at a time: :mod:`wrpkit.debug.stepper`.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import io
import json
import os
import shutil
import time
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..records import field, record
from .. import model as m
from ..checks.effects import effects, launch_label
from ..errors import EXIT_FAILED, EXIT_OK, WrpError, WrpFormatError
from ..atomic_writes import atomic_write
from ..file_reads import read_user_text
from ..io_errors import io_error
from ..output_paths import make_folder
from ..formats import wrp1
from . import stepper as st
from ..run.replay.loaded import open_loaded
from .common import input_bytes, open_program
from .isolation import run_in_child

TRACE_FORMAT = "wrpkit-trace/1"
#: Timings a trace child reports beside its trace.
CHILD_TIMINGS = ("digest_seconds", "step_seconds", "load_seconds", "digest_cpu_seconds", "step_cpu_seconds")


@record
class TraceResult:
    """The digest trace of one replay.

    Attributes:
        ops: One dict per op run, in order: ``seq``, ``index``, ``path``,
            ``iteration`` (None outside WHILE bodies), ``iterations`` (one per
            enclosing WHILE), ``op`` (kind), ``kernel`` (key, or None) and
            ``writes``: per written region ``region``, ``binding``, ``name`` (the
            binding's, else the kernel arguments' that pass it), ``digest``,
            ``dtype`` (None: unknown), ``nan``, ``inf``, ``min``, ``max``
            (None where the dtype is unknown).
        first_nonfinite: The first op that left a NaN or Inf in a region it
            writes (see :func:`trace`), else None; found with or without
            ``stop_at_nonfinite``, among the regions of known dtype
            (:attr:`unchecked` lists the others).
        first_divergence: With ``against``, the first op whose digests differ
            from the other trace (see :func:`compare_traces`), else None.
        unknown_dtypes: Regions written whose dtype is unknown (no NaN check there).  An
            argument whose access the file does not record counts as written only where
            an op changed its bytes (the digests before and after say so).
        digest_seconds: Time spent digesting and summarizing regions.
        step_seconds: Time spent running ops (including IF/WHILE conditions).
        load_seconds: Time spent decoding, rewriting and loading the capture.
    """

    file: str
    engine: str
    device: str
    ops: list = field(default_factory=list)
    first_nonfinite: Optional[dict] = None
    first_divergence: Optional[dict] = None
    unknown_dtypes: list = field(default_factory=list)
    #: Per region of unknown dtype that ops wrote (not checked for NaN/Inf): ``region``,
    #: ``binding``, ``writes`` (how many ops changed it), up to 8 ``writers`` (``seq``, ``index``, ``path``,
    #: ``name``) and ``unchanged`` (how many ops that may have written it, access unrecorded, left its bytes).
    unchecked: list = field(default_factory=list)
    #: With ``kernels=``: how each recorded kernel matched the files (``SourceTyping.to_json()``).
    kernels: Optional[dict] = None
    #: Which program this is a trace of (:func:`program_identity`).
    program: Optional[dict] = None
    #: With ``against``: a warning when the other trace is of another program, else None.
    against_warning: Optional[str] = None
    digest_seconds: float = 0.0
    step_seconds: float = 0.0
    load_seconds: float = 0.0
    #: CPU time of this thread in the same two parts (wall time on a loaded machine is not).
    digest_cpu_seconds: float = 0.0
    step_cpu_seconds: float = 0.0

    def exit_code(self, stop_at_nonfinite: bool = False, strict: bool = False) -> int:
        """The verdict as an exit code: 1 when the trace diverged from ``against``, or found a NaN/Inf and
        ``stop_at_nonfinite`` asked for that to fail, or (``strict``) left a written region unchecked
        for want of its dtype, since then "no NaN or Inf" is not a whole answer; else 0 (a full trace
        that names a NaN succeeded)."""
        bad = ((stop_at_nonfinite and self.first_nonfinite is not None) or self.first_divergence is not None
               or (strict and bool(self.unchecked)))
        return EXIT_FAILED if bad else EXIT_OK

    def to_json(self) -> dict:
        """``{"ops": [...], "first_nonfinite": ..., "first_divergence": ...}`` plus where it ran."""
        return {"format": TRACE_FORMAT, "file": self.file, "engine": self.engine, "device": self.device,
                "ops": self.ops, "first_nonfinite": self.first_nonfinite,
                "first_divergence": self.first_divergence, "unknown_dtypes": self.unknown_dtypes,
                "unchecked": self.unchecked, "kernels": self.kernels, "program": self.program,
                "against_warning": self.against_warning}

    def save(self, path) -> Path:
        """Write the trace as JSON (atomically); :func:`load_trace` reads it back."""
        path = Path(path)
        atomic_write(path, [json.dumps(self.to_json(), indent=1).encode()])
        return path


def load_trace(path) -> dict:
    """Read a trace written by :meth:`TraceResult.save`.

    Raises:
        WrpFormatError: The file is not a wrpkit trace.
    """
    text = read_user_text(path, "trace")  # missing: exit 2; unreadable: an I/O error (exit 1)
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WrpFormatError(f"cannot read trace {path}: {e}", hint="Pass a file written by `wrp trace --save`.") \
            from None
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT or not isinstance(data.get("ops"), list):
        raise WrpFormatError(f"{path} is not a wrpkit trace", hint="Pass a file written by `wrp trace --save`.")
    return data


def _key(rec: dict) -> tuple:
    return rec.get("index"), rec.get("path"), tuple(rec.get("iterations") or ())


def _unchanged_maybe(write: dict) -> bool:
    """A write the trace listed only because the file does not say the op writes the region (an
    untyped trace's ``touches``), whose bytes the op left as they were: not a write after all."""
    return bool(write.get("maybe")) and write.get("changed") is False


def compare_traces(ops: list, other: list) -> Optional[dict]:
    """The first op where two traces differ (order, op, or a written region's digest), or None.

    ``reason`` says exactly what: ``"the op streams differ here"``, ``"a written
    region differs"`` (both traces wrote it, with other bytes), or ``"a written
    region is absent from the other trace"`` / ``"... from this trace"``
    (``absent_from`` then says which: ``"other"`` or ``"this"``).  A region one trace lists only
    as maybe written (``maybe``: its file does not say; an untyped stock capture) and left unchanged
    is not a write: a typed trace and an untyped one of the same run compare as the same.
    """
    for a, b in zip(ops, other):
        if not isinstance(b, dict):
            raise WrpFormatError("the other trace holds an op that is not an object")
        where = {"seq": a["seq"], "index": a["index"], "path": a["path"], "iteration": a["iteration"],
                 "op": a["op"], "kernel": a["kernel"]}
        if _key(a) != _key(b) or a["op"] != b.get("op") or a["kernel"] != b.get("kernel"):
            return {**where, "reason": "the op streams differ here", "other": {
                "index": b.get("index"), "path": b.get("path"), "iteration": b.get("iteration"), "op": b.get("op"),
                "kernel": b.get("kernel")}}
        theirs = {w.get("region"): w for w in b.get("writes") or () if isinstance(w, dict)}
        for w in a["writes"]:
            o = theirs.get(w["region"])
            if o is None and _unchanged_maybe(w):
                continue  # one trace only guessed the op might write it, and it did not
            if o is None:
                return {**where, "reason": "a written region is absent from the other trace", "absent_from": "other",
                        "region": w["region"], "binding": w["binding"], "digest": w["digest"], "other_digest": None}
            if o.get("digest") != w["digest"]:
                return {**where, "reason": "a written region differs", "region": w["region"],
                        "binding": w["binding"], "digest": w["digest"], "other_digest": o.get("digest")}
        mine = {w["region"] for w in a["writes"]}
        for rid, o in theirs.items():
            if rid not in mine and not _unchanged_maybe(o):
                return {**where, "reason": "a written region is absent from this trace", "absent_from": "this",
                        "region": rid, "binding": o.get("binding"), "digest": None, "other_digest": o.get("digest")}
    if len(ops) != len(other):
        n = min(len(ops), len(other))
        return {"seq": n, "index": None, "path": None, "iteration": None, "op": None, "kernel": None,
                "reason": f"one trace has {len(ops)} ops, the other {len(other)}"}
    return None


def program_identity(program: m.Program) -> dict:
    """What says which program a trace is of: its kernels (key and per-kernel code hash) and op counts."""
    import hashlib  # noqa: PLC0415

    kernels = sorted(f"{k.kernel_key} {k.forward_name}" for k in program.kernels)
    counts = sorted((str(getattr(t, "name", t)), n) for t, n in program.op_counts().items())
    text = json.dumps({"kernels": kernels, "ops": counts, "top": len(program.ops)})
    return {"kernels": sorted(k.kernel_key for k in program.kernels),
            "fingerprint": hashlib.sha256(text.encode()).hexdigest()[:16]}


def program_mismatch(mine: Optional[dict], theirs, ops: list, other: list) -> Optional[str]:
    """A warning when two traces are of different programs, else None."""
    if isinstance(mine, dict) and isinstance(theirs, dict) and theirs.get("fingerprint"):
        if mine.get("fingerprint") == theirs.get("fingerprint"):
            return None
        ka, kb = set(mine.get("kernels") or ()), set(theirs.get("kernels") or ())
        if ka != kb:
            only_a, only_b = sorted(ka - kb)[:4], sorted(kb - ka)[:4]
            return ("the two traces are of different programs: kernels only in this one: "
                    f"{', '.join(only_a) or '-'}; only in the other: {', '.join(only_b) or '-'}")
        return "the two traces are of different programs (same kernel names, other code or ops)"
    ka = {o.get("kernel") for o in ops if o.get("kernel")}
    kb = {o.get("kernel") for o in other if isinstance(o, dict) and o.get("kernel")}
    if ka != kb:
        return ("the two traces launch different kernels: only in this one: "
                f"{', '.join(sorted(ka - kb)[:4]) or '-'}; only in the other: {', '.join(sorted(kb - ka)[:4]) or '-'}")
    return None


def default_device(program: m.Program) -> str:
    return "cpu" if program.device_type == m.DeviceType.CPU else "cuda:0"


def open_machine(opened, engine: str, device: str) -> st.Machine:
    """Rewrite and load a capture for stepping (see :mod:`wrpkit.debug.stepper`)."""
    stepper = st.build_stepper(opened.model)
    image = wrp1.encode_wrp1(stepper.program)
    eng = open_loaded(engine, image, opened.modules, device, made_from_valid=True)  # rewritten from a valid capture
    del image
    return st.Machine(stepper, eng)


def apply_inputs(machine: st.Machine, opened, inputs: Optional[Mapping]) -> None:
    """Write checked inputs into a loaded machine's regions."""
    for rid, raw in input_bytes(opened, inputs, lambda r: np.array(machine.region(r), copy=True)).items():
        view = machine.engine.view(f"{st.REGION_BINDING}{rid}")
        if view is not None:
            view[:] = raw
        else:
            machine.write_region(rid, raw)


def trace(source, *, device=None, engine: str = "python", inputs: Optional[Mapping] = None,
          stop_at_nonfinite: bool = False, dump=None, against=None, modules: Optional[Mapping] = None,
          isolate: bool = False, timeout: Optional[float] = None, kernels=(), kernel_output=None) -> TraceResult:
    """Replay a capture op by op; record each written region's digest and statistics.

    Args:
        source: A ``.wrp`` or ``.wrpk`` path (or its bytes, with ``modules``).
        device: ``"cpu"`` or ``"cuda:N"``; default: the file's own family.
        engine: ``"python"`` (Warp's Python API) or ``"native"`` (the C++
            replayer's C API, in the process that steps).
        inputs: ``{binding name: array}`` set before the first op.
        stop_at_nonfinite: Stop after the first op that leaves a NaN or Inf
            in a region it writes.  With or without it,
            :attr:`TraceResult.first_nonfinite` names that op: ``seq`` (the
            step, as the trace numbers it), ``index``, ``path``,
            ``iteration``, ``iterations``, ``op``, ``kernel``, ``region``,
            ``binding`` (None for an unbound array), ``argument`` (the kernel
            argument's name), ``dtype``, ``element`` (flat index in the typed
            array), ``nan``, ``inf`` and ``inputs``: the op's input regions
            as they were BEFORE it ran (each with its ``argument``), and
            ``source``: where the program issued the op (``{"file", "line",
            "function", "stack"}``, :mod:`wrpkit.checks.sources`), None when the
            capture does not record it.
        dump: A folder: write each op's written regions as ``.npy`` (typed
            where the dtype is known, else ``uint8``).
        against: A trace (path, :class:`TraceResult` or its ``to_json()``) to
            compare with; sets :attr:`TraceResult.first_divergence` (with the
            op's ``source``, as ``first_nonfinite``).
        modules: ``{filename: bytes}`` of module files (for bytes input).
        isolate: Validate here, then load and step in a child process
            (:mod:`wrpkit.debug.jobs`, in a wrpkit child), so that a crash in kernel code
            or in Warp's runtime raises :class:`~wrpkit.errors.WrpCrashError`
            naming the op that was running instead of killing the caller, and
            nothing is written to ``dump``.  Costs a process start,
            ``import warp`` and a load per call; the default stays in-process.
        timeout: Seconds of wall time for the whole trace; implies
            ``isolate=True`` (the child is killed when it runs out).
        kernels: ``.py`` files defining the capture's kernels (a stock
            capture records no types): each recorded kernel that matches
            (:mod:`wrpkit.run.capture.source_types`) types the regions it is passed;
            :attr:`TraceResult.kernels` says how each matched.
        kernel_output: (``isolate``) Where the kernels' own output (``wp.printf``) goes: a
            stream, ``"stdout"``, or None (the default: not shown;
            :func:`wrpkit.debug.isolation.run_in_child`).  In this process it goes where the
            process's output goes, as Warp's own replay prints it.

    Returns:
        A :class:`TraceResult`.

    Raises:
        WrpFormatError, WrpValidationError, WrpModuleError: Invalid capture.
        WrpBindingError: Bad inputs.
        WrpRuntimeError: Warp failed to run an op.
        WrpCrashError: (``isolate``) The child died of a fatal signal.
        WrpTimeoutError: (``timeout``) The trace did not finish in time.
        WrpKernelsError: (``kernels``) A file fails to import, or no kernel matches.
    """
    t0 = time.perf_counter()
    other = other_program = None
    if against is not None:
        if isinstance(against, TraceResult):
            other, other_program = against.ops, against.program
        elif isinstance(against, Mapping):
            other, other_program = list(against.get("ops") or []), against.get("program")
        else:
            loaded = load_trace(against)
            other, other_program = loaded["ops"], loaded.get("program")
    opened = open_program(source, modules)
    from ..run.capture.source_types import type_capture  # noqa: PLC0415

    typing = type_capture(opened, list(kernels or ()))
    device = str(device) if device is not None else default_device(opened.model)
    from ..run.contain.worker import verify_deferred  # noqa: PLC0415
    from ..run.load.prepare import check_runnable  # noqa: PLC0415

    if engine not in ("python", "native"):
        raise WrpError(f"unknown engine {engine!r}", hint="Use 'python' or 'native'.")
    if engine == "python":
        check_runnable(opened.model, device)
    verify_deferred(opened)
    if isolate or timeout is not None:
        result = _trace_in_child(opened, device=device, engine=engine, inputs=inputs,
                                stop_at_nonfinite=stop_at_nonfinite, dump=dump, timeout=timeout, started=t0,
                                kernel_output=kernel_output)
    else:
        result = run_trace(opened, device=device, engine=engine, inputs=inputs,
                           stop_at_nonfinite=stop_at_nonfinite, dump=dump, started=t0)
    if typing is not None:
        result.kernels = typing.to_json()
    result.program = program_identity(opened.model)
    if other is not None:
        result.first_divergence = compare_traces(result.ops, other)
        result.against_warning = program_mismatch(result.program, other_program, result.ops, other)
    _add_sources(result, opened.model)
    return result


def _add_sources(result: TraceResult, program: m.Program) -> None:
    """Name where the program issued the ops the verdicts point at (``source``: None when the capture does not say)."""
    from ..checks.sources import Sources  # noqa: PLC0415

    sources = Sources.of(program)
    for rec in (result.first_nonfinite, result.first_divergence):
        if rec is not None:
            rec["source"] = sources.op(rec["path"]) if rec.get("path") is not None else None


def _trace_in_child(opened, *, device: str, engine: str, inputs: Optional[Mapping], stop_at_nonfinite: bool,
                    dump=None, timeout: Optional[float] = None, started: Optional[float] = None,
                    kernel_output=None) -> TraceResult:
    """Step a validated capture in a child process (:mod:`wrpkit.debug.isolation`); the body of
    ``trace(..., isolate=True)``.  The dump files move to ``dump`` only after the child succeeded."""
    job = {"device": device, "engine": engine, "stop_at_nonfinite": bool(stop_at_nonfinite), "dump": dump is not None}
    collect = None if dump is None else (lambda d: _publish_dump(d / "dump", Path(dump)))
    data = run_in_child(opened, "trace", job, inputs, timeout=timeout, started=started, collect=collect,
                        kernel_output=kernel_output)
    return TraceResult(str(opened.path) if opened.path is not None else "<bytes>", data["engine"],
                       data["device"], data["ops"], data["first_nonfinite"], None, data["unknown_dtypes"],
                       data.get("unchecked") or [], **{k: data[k] for k in CHILD_TIMINGS})


def _publish_dump(src: Path, dst: Path) -> None:
    """Move the child's dump files into ``dst``, all of them or none.

    On the private folder's own file system each file is renamed into place
    (atomically, no space needed).  On another, every file is first copied
    beside its target under a temporary name, and only once all are copied
    are they renamed into place: a copy that fails (a full disk) leaves
    ``dst`` as it was, with no temporary file and no folder this made.

    Raises:
        WrpIOError: A file cannot be written (its path and the reason in words; exit 1).
    """
    files = sorted(src.iterdir()) if src.is_dir() else []
    made = make_folder(dst, "dump folder")
    staged = []  # (temporary name, target): copies not yet renamed into place
    placed = []  # targets already in place
    target = dst
    try:
        for f in files:
            target = dst / f.name
            try:
                os.replace(f, target)
                placed.append(target)
                continue
            except OSError as e:
                if e.errno != errno.EXDEV:
                    raise
            tmp = dst / f".{f.name}.{os.getpid()}.wrpkit-tmp"
            staged.append((tmp, target))
            shutil.copyfile(f, tmp)
        for tmp, target in staged:
            os.replace(tmp, target)
            placed.append(target)
    except OSError as e:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if made:  # the folder is this call's: nothing of it stays
            for p in placed:
                with contextlib.suppress(OSError):
                    os.unlink(p)
            with contextlib.suppress(OSError):
                os.rmdir(dst)
        raise io_error(e, target, "write") from None


def run_trace(opened, *, device: str, engine: str, inputs: Optional[Mapping], stop_at_nonfinite: bool, dump,
              started: Optional[float] = None, before=None, stage=None) -> TraceResult:
    """Step a validated capture in this process (the body of :func:`trace`).

    Args:
        opened: What :func:`~wrpkit.debug.common.open_program` returned.
        before: Called as ``before(op, index, path, iterations)`` just before each op runs.
        stage: Called with ``"loading"``, then ``"replaying"`` once the first op is about to run.
        Others: as :func:`trace`.
    """
    t0 = time.perf_counter() if started is None else started
    prog = opened.model
    if stage is not None:
        stage("loading")
    infos = st.region_infos(prog, opened.annotations)
    sigs = opened.annotations.kernel_map() if opened.annotations is not None else {}
    machine = open_machine(opened, engine, device)
    result = TraceResult(str(opened.path) if opened.path is not None else "<bytes>", engine, device)
    dump_dir = Path(dump) if dump is not None else None
    if dump_dir is not None:
        make_folder(dump_dir, "dump folder")
    unknown: dict = {}  # region id -> {"region", "writes", "writers", "unchanged"} (dtype unknown: not checked)
    last: dict = {}  # region id -> its statistics after the latest op that wrote it
    clock = time.perf_counter
    try:
        apply_inputs(machine, opened, inputs)
        result.load_seconds = clock() - t0
        writes_of: dict = {}
        t_digest = [0.0, 0.0]
        cpu = time.thread_time
        initial = _initial_state(opened, inputs)
        initial_digests: dict = {}

        def initial_digest(rid: int) -> str:
            if rid not in initial_digests:
                initial_digests[rid] = st.digest(initial(rid))
            return initial_digests[rid]

        def before_stats(rid: int, written_now: set) -> dict:
            """A region's statistics as they were before the current op ran."""
            if rid in last:
                return last[rid]
            if rid in written_now:  # never written before: its initial bytes
                return st.region_stats(infos[rid], initial(rid))
            return st.region_stats(infos[rid], machine.region(rid))

        def visit(op, index, path, iterations):
            t1, c1 = clock(), cpu()
            known = writes_of.get(id(op))
            if known is None:
                fx = effects(op, prog, sigs)
                modes = fx.region_modes()
                known = writes_of[id(op)] = ([r for r in fx.written_regions() if r in infos], fx,
                                             {r for r, mode in modes.items() if mode == "touches"},
                                             st.region_arguments(fx))
            rids, fx, touched_only, arguments = known
            writes = []
            seq = len(result.ops)
            for rid in rids:
                info = infos[rid]
                raw = machine.region(rid)
                stats = st.region_stats(info, raw)
                stats["argument"] = arguments.get(rid)  # what this op calls it (an unbound region's only name)
                if rid in touched_only:
                    # The file does not say whether this op writes the region: it is listed (the
                    # conservative rule), marked, with whether its bytes changed, so that a trace typed
                    # with --kernels (which knows it was only read) compares without a false divergence.
                    stats["maybe"] = True
                    stats["changed"] = stats["digest"] != (last[rid]["digest"] if rid in last
                                                           else initial_digest(rid))
                writes.append(stats)
                if info.sig is None:
                    u = unknown.get(rid)
                    if u is None:
                        u = unknown[rid] = {"region": rid, "binding": info.bindings[0] if info.bindings else None,
                                            "argument": None, "writes": 0, "writers": [], "unchanged": 0}
                    if u["argument"] is None and isinstance(op, m.KernelLaunch):
                        # the first kernel argument that writes it: the name wrp inspect gives an unbound
                        # region (a fill only calls it "region", its op-table role)
                        u["argument"] = arguments.get(rid)
                    # An argument whose access the file does not record counts as written (the
                    # conservative rule of checks.effects); the digests say whether this op changed it.
                    if rid in touched_only and not stats["changed"]:
                        u["unchanged"] += 1
                    else:
                        u["writes"] += 1
                        name = launch_label(op, prog) if isinstance(op, m.KernelLaunch) else op.op_type.name
                        if len(u["writers"]) < 8 and all(w["path"] != path or w["name"] != name
                                                         for w in u["writers"]):
                            u["writers"].append({"seq": seq, "index": index, "path": path, "name": name})
                if dump_dir is not None:
                    _dump(dump_dir, seq, path, iterations, info, raw)
            rec = {"seq": seq, "index": index, "path": path,
                   "iteration": iterations[-1] if iterations else None, "iterations": list(iterations),
                   "op": op.op_type.name, "kernel": launch_label(op, prog) if isinstance(op, m.KernelLaunch) else None,
                   "writes": writes}
            result.ops.append(rec)
            stop = False
            if result.first_nonfinite is None:
                for w in writes:
                    if w["nan"] or w["inf"]:
                        result.first_nonfinite = _nonfinite_record(fx, rec, w, infos, machine,
                                                                   lambda r: before_stats(r, set(rids)))
                        stop = stop_at_nonfinite
                        break
            for w in writes:
                last[w["region"]] = w
            t_digest[0] += clock() - t1
            t_digest[1] += cpu() - c1
            return stop

        t1, c1 = clock(), cpu()
        # The walk makes a few small objects per op and frees none: the cyclic
        # collector would rescan the whole decoded program again and again.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if stage is not None:
                stage("replaying")
            st.walk_program(prog.ops, machine, visit, before=before)
        finally:
            if gc_was_enabled:
                gc.enable()
        result.step_seconds = clock() - t1 - t_digest[0]
        result.step_cpu_seconds = cpu() - c1 - t_digest[1]
        result.digest_seconds, result.digest_cpu_seconds = t_digest
    finally:
        machine.close()
    changed = sorted(r for r in unknown if unknown[r]["writes"])  # never changed: no NaN can have been written
    result.unknown_dtypes = changed
    result.unchecked = [unknown[r] for r in changed]
    return result


def _initial_state(opened, inputs):
    """``initial(region_id) -> bytes``: a region as the trace started (file data, then inputs)."""
    regions = opened.model.region_map()
    cache: dict = {}

    def raw_initial(rid: int) -> np.ndarray:
        r = regions[rid]
        if r.has_initial_data and r.data is not None:
            return np.frombuffer(r.data, dtype=np.uint8)
        return np.zeros(r.size, dtype=np.uint8)

    def initial(rid: int) -> np.ndarray:
        if not cache:
            cache.update(input_bytes(opened, inputs, raw_initial) or {-1: None})
        got = cache.get(rid)
        return got if got is not None else raw_initial(rid)

    return initial


def _nonfinite_record(fx, rec: dict, w: dict, infos: dict, machine, before) -> dict:
    """``first_nonfinite``: where, what, how many, and the op's inputs as they were before it ran.

    ``fx`` is the op's :class:`~wrpkit.checks.effects.OpEffects`.
    """
    names = st.region_arguments(fx)
    info = infos[w["region"]]
    inputs = []
    for r in fx.read_regions():
        if r in infos:
            inputs.append({**before(r), "argument": names.get(r)})
    return {**{k: rec[k] for k in ("seq", "index", "path", "iteration", "iterations", "op", "kernel")},
            "region": w["region"], "binding": w["binding"], "argument": names.get(w["region"]),
            "dtype": w["dtype"], "element": st.first_nonfinite(info, machine.region(w["region"])),
            "nan": w["nan"], "inf": w["inf"], "inputs": inputs, "inputs_state": "before the op ran"}


def _dump(folder: Path, seq: int, path: str, iterations, info: st.RegionInfo, raw: np.ndarray) -> None:
    it = "".join(f"_it{i}" for i in iterations)
    name = f"{seq:06d}_op{path}{it}_r{info.region_id}.npy"
    typed = info.typed(raw)
    buf = io.BytesIO()
    np.save(buf, np.array(typed if typed is not None else raw, copy=True))
    atomic_write(folder / name, [buf.getvalue()])


__all__ = ["trace", "TraceResult", "load_trace", "compare_traces"]
