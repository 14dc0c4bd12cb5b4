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

import gc
import io
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .. import model as m
from ..checks.effects import effects
from ..errors import WrpError, WrpFormatError
from ..fileio import atomic_write
from ..formats import wrp1
from . import stepper as st
from .common import input_bytes, open_program

TRACE_FORMAT = "wrpkit-trace/1"


@dataclass
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
        first_nonfinite: With ``stop_at_nonfinite``, the first op that left a
            NaN or Inf in a region it writes (see :func:`trace`), else None.
        first_divergence: With ``against``, the first op whose digests differ
            from the other trace, else None.
        unknown_dtypes: Regions written whose dtype is unknown (no NaN check there).
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
    digest_seconds: float = 0.0
    step_seconds: float = 0.0
    load_seconds: float = 0.0
    #: CPU time of this thread in the same two parts (wall time on a loaded machine is not).
    digest_cpu_seconds: float = 0.0
    step_cpu_seconds: float = 0.0

    def to_json(self) -> dict:
        """``{"ops": [...], "first_nonfinite": ..., "first_divergence": ...}`` plus where it ran."""
        return {"format": TRACE_FORMAT, "file": self.file, "engine": self.engine, "device": self.device,
                "ops": self.ops, "first_nonfinite": self.first_nonfinite,
                "first_divergence": self.first_divergence, "unknown_dtypes": self.unknown_dtypes}

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
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WrpFormatError(f"cannot read trace {path}: {e}", hint="Pass a file written by `wrp trace --save`.") \
            from None
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT or not isinstance(data.get("ops"), list):
        raise WrpFormatError(f"{path} is not a wrpkit trace", hint="Pass a file written by `wrp trace --save`.")
    return data


def _key(rec: dict) -> tuple:
    return rec.get("index"), rec.get("path"), tuple(rec.get("iterations") or ())


def compare_traces(ops: list, other: list) -> Optional[dict]:
    """The first op where two traces differ (order, op, or a written region's digest), or None."""
    for a, b in zip(ops, other):
        if not isinstance(b, dict):
            raise WrpFormatError("the other trace holds an op that is not an object")
        where = {"seq": a["seq"], "index": a["index"], "path": a["path"], "iteration": a["iteration"],
                 "op": a["op"], "kernel": a["kernel"]}
        if _key(a) != _key(b) or a["op"] != b.get("op"):
            return {**where, "reason": "the op streams differ here", "other": {
                "index": b.get("index"), "path": b.get("path"), "iteration": b.get("iteration"), "op": b.get("op")}}
        theirs = {w.get("region"): w for w in b.get("writes") or () if isinstance(w, dict)}
        for w in a["writes"]:
            o = theirs.get(w["region"])
            if o is None or o.get("digest") != w["digest"]:
                return {**where, "reason": "a written region differs", "region": w["region"],
                        "binding": w["binding"], "digest": w["digest"],
                        "other_digest": None if o is None else o.get("digest")}
    if len(ops) != len(other):
        n = min(len(ops), len(other))
        return {"seq": n, "index": None, "path": None, "iteration": None, "op": None, "kernel": None,
                "reason": f"one trace has {len(ops)} ops, the other {len(other)}"}
    return None


def default_device(program: m.Program) -> str:
    return "cpu" if program.device_type == m.DeviceType.CPU else "cuda:0"


def open_machine(opened, engine: str, device: str) -> st.Machine:
    """Rewrite and load a capture for stepping (see :mod:`wrpkit.debug.stepper`)."""
    stepper = st.build_stepper(opened.program)
    image = wrp1.encode_wrp1(stepper.program)
    eng = st.open_engine(engine, image, opened.modules, device)
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
          isolate: bool = False, timeout: Optional[float] = None) -> TraceResult:
    """Replay a capture op by op; record each written region's digest and statistics.

    Args:
        source: A ``.wrp`` or ``.wrpk`` path (or its bytes, with ``modules``).
        device: ``"cpu"`` or ``"cuda:N"``; default: the file's own family.
        engine: ``"python"`` (Warp's Python API) or ``"native"`` (the C++
            replayer's C API, in the process that steps).
        inputs: ``{binding name: array}`` set before the first op.
        stop_at_nonfinite: Stop after the first op that leaves a NaN or Inf
            in a region it writes; :attr:`TraceResult.first_nonfinite` then
            holds ``index``, ``path``, ``iteration``, ``op``, ``kernel``,
            ``region``, ``binding``, ``element`` (flat index in the binding's
            typed array) and ``inputs`` (the op's input regions at that point).
        dump: A folder: write each op's written regions as ``.npy`` (typed
            where the dtype is known, else ``uint8``).
        against: A trace (path, :class:`TraceResult` or its ``to_json()``) to
            compare with; sets :attr:`TraceResult.first_divergence`.
        modules: ``{filename: bytes}`` of module files (for bytes input).
        isolate: Validate here, then load and step in a child process
            (:mod:`wrpkit.debug.trace_isolate`), so that a crash in kernel code
            or in Warp's runtime raises :class:`~wrpkit.errors.WrpCrashError`
            naming the op that was running instead of killing the caller, and
            nothing is written to ``dump``.  Costs a process start,
            ``import warp`` and a load per call; the default stays in-process.
        timeout: Seconds of wall time for the whole trace; implies
            ``isolate=True`` (the child is killed when it runs out).

    Returns:
        A :class:`TraceResult`.

    Raises:
        WrpFormatError, WrpValidationError, WrpModuleError: Invalid capture.
        WrpBindingError: Bad inputs.
        WrpRuntimeError: Warp failed to run an op.
        WrpCrashError: (``isolate``) The child died of a fatal signal.
        WrpTimeoutError: (``timeout``) The trace did not finish in time.
    """
    t0 = time.perf_counter()
    other = None
    if against is not None:
        if isinstance(against, TraceResult):
            other = against.ops
        elif isinstance(against, Mapping):
            other = list(against.get("ops") or [])
        else:
            other = load_trace(against)["ops"]
    opened = open_program(source, modules)
    device = str(device) if device is not None else default_device(opened.program)
    from ..run.isolate import verify_deferred  # noqa: PLC0415
    from ..run.runtime import check_runnable  # noqa: PLC0415

    if engine not in ("python", "native"):
        raise WrpError(f"unknown engine {engine!r}", hint="Use 'python' or 'native'.")
    if engine == "python":
        check_runnable(opened.program, device)
    verify_deferred(opened.prepared)
    if isolate or timeout is not None:
        from .trace_isolate import trace_in_child  # noqa: PLC0415

        result = trace_in_child(opened, device=device, engine=engine, inputs=inputs,
                                stop_at_nonfinite=stop_at_nonfinite, dump=dump, timeout=timeout, started=t0)
    else:
        result = run_trace(opened, device=device, engine=engine, inputs=inputs,
                           stop_at_nonfinite=stop_at_nonfinite, dump=dump, started=t0)
    if other is not None:
        result.first_divergence = compare_traces(result.ops, other)
    return result


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
    prog = opened.program
    if stage is not None:
        stage("loading")
    infos = st.region_infos(prog, opened.annotations)
    sigs = st.kernel_signatures(opened.annotations)
    machine = open_machine(opened, engine, device)
    result = TraceResult(str(opened.path) if opened.path is not None else "<bytes>", engine, device)
    dump_dir = Path(dump) if dump is not None else None
    if dump_dir is not None:
        dump_dir.mkdir(parents=True, exist_ok=True)
    unknown = set()
    clock = time.perf_counter
    try:
        apply_inputs(machine, opened, inputs)
        result.load_seconds = clock() - t0
        writes_of: dict = {}
        t_digest = [0.0, 0.0]
        cpu = time.thread_time

        def visit(op, index, path, iterations):
            t1, c1 = clock(), cpu()
            known = writes_of.get(id(op))
            if known is None:
                fx = effects(op, prog, sigs)
                known = writes_of[id(op)] = ([r for r in fx.written_regions() if r in infos], fx)
            rids, fx = known
            writes = []
            for rid in rids:
                info = infos[rid]
                raw = machine.region(rid)
                writes.append(st.region_stats(info, raw))
                if info.sig is None:
                    unknown.add(rid)
                if dump_dir is not None:
                    _dump(dump_dir, len(result.ops), path, iterations, info, raw)
            rec = {"seq": len(result.ops), "index": index, "path": path,
                   "iteration": iterations[-1] if iterations else None, "iterations": list(iterations),
                   "op": op.op_type.name, "kernel": op.kernel_key if isinstance(op, m.KernelLaunch) else None,
                   "writes": writes}
            result.ops.append(rec)
            stop = False
            if stop_at_nonfinite:
                for w in writes:
                    if w["nan"] or w["inf"]:
                        info = infos[w["region"]]
                        result.first_nonfinite = {
                            **{k: rec[k] for k in ("seq", "index", "path", "iteration", "op", "kernel")},
                            "region": w["region"], "binding": w["binding"],
                            "element": st.first_nonfinite(info, machine.region(w["region"])),
                            "nan": w["nan"], "inf": w["inf"],
                            "inputs": [st.region_stats(infos[r], machine.region(r))
                                       for r in fx.read_regions() if r in infos]}
                        stop = True
                        break
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
    result.unknown_dtypes = sorted(unknown)
    return result


def _dump(folder: Path, seq: int, path: str, iterations, info: st.RegionInfo, raw: np.ndarray) -> None:
    it = "".join(f"_it{i}" for i in iterations)
    name = f"{seq:06d}_op{path}{it}_r{info.region_id}.npy"
    typed = info.typed(raw)
    buf = io.BytesIO()
    np.save(buf, np.array(typed if typed is not None else raw, copy=True))
    atomic_write(folder / name, [buf.getvalue()])


__all__ = ["trace", "TraceResult", "load_trace", "compare_traces"]
