"""Cut ops out of a capture into a capture of their own (``wrp slice``).

Example::

    r = wrpkit.slice("sim.wrp", "piece.wrpk", ops=(5000, 5010), inputs={"x": x})
    one = wrpkit.slice("sim.wrp", "bad.wrp", steps=(190, 191))  # the launch wrp trace numbers 190
    # stock Warp: wp.capture_launch(wp.capture_load("piece.wrpk"...)) reproduces
    # the original's state after op 5009, bit for bit

With ``steps=(A, B)`` the slice holds the leaf ops that ran at steps ``A`` to
``B-1`` (as ``wrp trace`` numbers them: inside IF and WHILE bodies, at their
iteration) as a flat program; the prefix is stepped with the trace's stepper.

With ``ops=(A, B)`` the slice holds ops ``A`` to ``B-1`` and, as its initial memory, the state of
every region just before op ``A``: the program's first ``A`` ops are replayed
once by Warp (as a capture of their own, with every region bound), with the
given inputs or the file's own initial data.  Regions that are all zero at
that point carry no data (Warp zero-fills them).  Bindings, kernels, modules
and annotations are kept, so inputs, outputs and ``wrp validate`` work as on
the original.  Handle slots (pointer locations) keep the original's values:
Warp patches them at load.

Limitation: meshes are rebuilt by Warp at load from the slice's initial
points, so a slice that starts after a BVH refit or rebuild starts from a
freshly built BVH.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .. import records
from ..records import record
from .. import model as m
from ..errors import WrpError, WrpRuntimeError, WrpUsageError
from ..atomic_writes import publish_wrp
from ..output_paths import check_output_path
from ..special_outputs import output_size
from ..formats import wrp1
from . import stepper as st
from .common import input_bytes, open_program, parse_range


@record
class SliceResult:
    """What :func:`slice` wrote.

    Attributes:
        path: The file written.
        start, stop: The range ``[start, stop)`` of the original: top-level ops, or steps (:attr:`unit`).
        ops: Number of top-level ops in the slice.
        regions_with_data: Regions carrying initial data in the slice.
        bytes_written: Size of the file written (modules excluded).
        prefix_seconds: Time spent replaying ops before ``start``.
    """

    path: Path
    start: int
    stop: int
    ops: int
    regions_with_data: int
    bytes_written: int
    prefix_seconds: float

    #: ``"ops"`` (start/stop are top-level ops) or ``"steps"`` (steps as ``wrp trace`` numbers them).
    unit: str = "ops"

    def to_json(self) -> dict:
        return {"path": str(self.path), "unit": self.unit, "start": self.start, "stop": self.stop, "ops": self.ops,
                "regions_with_data": self.regions_with_data, "bytes_written": self.bytes_written}


def state_before(opened, start: int, device: str, inputs: Optional[Mapping] = None) -> dict:
    """``{region_id: bytes (numpy uint8)}``: every region's contents just before top-level op ``start``."""
    prog = opened.model
    regions = prog.region_map()

    def initial(rid: int) -> np.ndarray:
        r = regions[rid]
        if r.has_initial_data and r.data is not None:
            return np.frombuffer(r.data, dtype=np.uint8)
        return np.zeros(r.size, dtype=np.uint8)

    given = input_bytes(opened, inputs, initial)
    if start == 0:
        return {rid: given.get(rid, None) if rid in given else initial(rid) for rid in regions}
    from ..run.replay.runtime import load  # noqa: PLC0415

    image = wrp1.encode_wrp1(st.prefix_program(prog, start))
    runner = load(image, device=device, modules=opened.modules)
    del image
    try:
        for rid, raw in given.items():
            runner.set(f"{st.REGION_BINDING}{rid}", raw)
        from ..run.warp_bridge.start import capture_launch, synchronize  # noqa: PLC0415

        try:
            capture_launch(runner.graph)
        except RuntimeError as e:
            raise WrpRuntimeError(f"Warp failed to replay ops 0:{start}: {e}") from None
        if not runner.device.is_cpu:
            synchronize(runner.device)
        # CPU: zero-copy views that keep the graph's memory alive after close(); CUDA: copies.
        return {rid: runner.numpy(f"{st.REGION_BINDING}{rid}") for rid in regions}
    finally:
        runner.close()


def slice(source, out, legacy_out=None, *, ops=None, steps=None,  # noqa: A001  (the API's name)
          inputs: Optional[Mapping] = None, device=None, modules: Optional[Mapping] = None,
          kernels=()) -> SliceResult:
    """Write a capture holding top-level ops ``A`` to ``B-1``, or the ops that ran at steps ``A`` to ``B-1``.

    Args:
        source: A ``.wrp`` or ``.wrpk`` path.
        out: Output path; ``.wrp`` (with ``<stem>_modules/``) or ``.wrpk``.
        legacy_out: Deprecated call form ``slice(source, ops, out)``.
        ops: ``(A, B)``: top-level ops, as ``wrp inspect --ops`` numbers them
            (negative numbers count from the end; ``None`` for an open end).
            IF and WHILE ops are kept whole.
        steps: ``(A, B)``: the leaf ops that ran at steps ``A`` to ``B-1``, as
            ``wrp trace`` numbers its steps (``seq``), inside IF and WHILE
            bodies at the iteration they ran: a flat program whose initial
            memory is the state just before step ``A``.  ``(k, k + 1)`` is one
            launch alone, and replaying it reproduces that step's writes.
        inputs: ``{binding name: array}`` set before op 0 (default: the
            file's own initial data).
        device: Device for replaying what runs before ``A``; default the file's family.
        modules: ``{filename: bytes}`` replacing ``<stem>_modules/``.
        kernels: ``.py`` files typing a stock capture's kernels
            (:mod:`wrpkit.run.capture.source_types`); the slice then carries those types.

    Returns:
        A :class:`SliceResult`.

    Raises:
        WrpUsageError: Neither or both of ``ops`` and ``steps``, or a range
            outside the program (``steps``: outside the steps that ran).
        WrpError: Bad output path.
        WrpKernelsError: A ``kernels`` file fails to import or matches nothing.
        WrpFormatError, WrpValidationError, WrpModuleError: Invalid capture.
        WrpBindingError: Bad inputs.
        WrpRuntimeError: Warp failed to replay the prefix.
    """
    if legacy_out is not None:  # slice(source, "A:B" or (A, B), out): the form before ops=/steps=
        ops, out = out, legacy_out
    if (ops is None) == (steps is None):
        raise WrpUsageError("give exactly one of ops=(A, B) and steps=(A, B)",
                            hint="ops: top-level ops (wrp inspect --ops); steps: steps as wrp trace numbers them.")
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".wrp", ".wrpk"):
        raise WrpUsageError(f"cannot write a slice to {out}: the output must end in .wrp or .wrpk",
                       hint="For example -o piece.wrpk (one self-contained file).")
    check_output_path(out, [source] if not isinstance(source, (bytes, bytearray, memoryview)) else [],
                      modules_beside=suffix == ".wrp")
    opened = open_program(source, modules)
    if kernels:
        from ..run.capture.source_types import type_capture  # noqa: PLC0415

        type_capture(opened, list(kernels))
    prog = opened.model
    if device is None:
        device = "cpu" if prog.device_type == m.DeviceType.CPU else "cuda:0"
    # The device is checked even when no op runs before A (a slice from 0): a device this
    # machine lacks, or of the other family, is refused as every command refuses it (exit 2).
    from ..run.warp_bridge.start import init_warp  # noqa: PLC0415
    from ..run.load.prepare import check_runnable  # noqa: PLC0415
    from ..run.load.program_load import resolve_device  # noqa: PLC0415

    check_runnable(prog, str(device))
    init_warp(cpu_only=str(device).strip().lower() == "cpu")  # no banner, no CUDA-driver warning on the CPU
    resolve_device(str(device))
    t0 = time.perf_counter()
    if steps is not None:
        start, stop = _step_range(steps)
        state, cut = state_at_step(opened, start, stop, str(device), inputs)
    else:
        start, stop = parse_range(ops, len(prog.ops))
        state = state_before(opened, start, str(device), inputs)
        cut = prog.ops[start:stop]
    prefix_seconds = time.perf_counter() - t0
    sliced = records.replace(prog, regions=_regions_from(prog, state), ops=list(cut))
    files = _all_module_files(opened)
    if suffix == ".wrp":
        n = publish_wrp(out, wrp1.iter_wrp1_chunks(sliced), files)
    else:
        from ..formats.wrpk import builder  # noqa: PLC0415

        n = builder.write_wrpk(out, sliced, files)
    res = SliceResult(out, start, stop, len(cut), sum(1 for r in sliced.regions if r.has_initial_data),
                      int(n if n is not None else output_size(out, 0)), prefix_seconds)
    res.unit = "steps" if steps is not None else "ops"
    return res


def _regions_from(prog: m.Program, state: dict) -> list:
    """The program's regions with ``state`` as initial data (all-zero: none); handle slots as the original's."""
    new_regions = []
    for r in prog.regions:
        raw = state[r.region_id]
        for pl in prog.pointer_locations:
            if pl.region_id != r.region_id:
                continue
            if raw.base is not None or not raw.flags.writeable:
                raw = np.array(raw, dtype=np.uint8, copy=True)
            orig = np.frombuffer(r.data, dtype=np.uint8) if r.has_initial_data and r.data is not None else None
            for i in range(pl.count):
                o = pl.offset + i * pl.stride
                raw[o:o + 8] = orig[o:o + 8] if orig is not None else 0
        if raw.any():
            new_regions.append(m.Region(r.region_id, r.element_size, r.size, True, memoryview(raw)))
        else:
            new_regions.append(m.Region(r.region_id, r.element_size, r.size, False, None))
    return new_regions


def _step_range(steps) -> tuple:
    """``(A, B)`` of a step range (tuple, or ``"A:B"`` from the command line); B None means A + 1.

    Raises:
        WrpUsageError: Not two non-negative integers with A < B.
    """
    if isinstance(steps, str):
        a, sep, b = steps.partition(":")
        try:
            a = int(a) if a.strip() else 0
            b = (int(b) if b.strip() else None) if sep else a + 1
        except ValueError:
            raise WrpUsageError(f"step range {steps!r} is not of the form A:B with integers",
                                hint="For example --steps 190:191 (the # column of wrp trace).") from None
    elif isinstance(steps, (tuple, list)) and len(steps) == 2:
        a, b = steps
    else:
        raise WrpUsageError(f"steps must be a pair (A, B), got {steps!r}", hint="For example steps=(190, 191).")
    if not isinstance(a, int) or (b is not None and not isinstance(b, int)):
        raise WrpUsageError(f"steps must be integers, got {steps!r}", hint="For example steps=(190, 191).")
    b = a + 1 if b is None else b
    if a < 0 or b <= a:
        raise WrpUsageError(f"step range {a}:{b} is empty or negative",
                            hint="Pick 0 <= A < B, as wrp trace numbers its steps (the # column).")
    return a, b


def state_at_step(opened, start: int, stop: int, device: str, inputs: Optional[Mapping] = None) -> tuple:
    """Step the capture to step ``start``; ``(state, ops)``: every region just before it, and the leaf ops
    that run at steps ``start`` to ``stop - 1`` (IF/WHILE driven as the replay does; see :mod:`.stepper`).

    Raises:
        WrpUsageError: The program runs fewer than ``stop`` steps (with these inputs).
    """
    from .trace import apply_inputs, open_machine  # noqa: PLC0415

    prog = opened.model
    machine = open_machine(opened, "python", device)
    state: dict = {}
    cut: list = []
    count = [0]

    def snapshot() -> None:
        for r in prog.regions:
            state[r.region_id] = np.array(machine.region(r.region_id), dtype=np.uint8, copy=True)

    def visit(op, index, path, iterations):
        k = count[0]
        count[0] += 1
        if k >= start:
            cut.append(op)
        if k + 1 == start:
            snapshot()
        return count[0] >= stop

    try:
        apply_inputs(machine, opened, inputs)
        if start == 0:
            snapshot()
        st.walk_program(prog.ops, machine, visit)
    finally:
        machine.close()
    if count[0] < stop:
        raise WrpUsageError(f"step range {start}:{stop} is outside the {count[0]} steps this program runs"
                            + (" with these inputs" if inputs else ""),
                            hint=f"Pick A < B within 0:{count[0]} (the # column of `wrp trace`).")
    return state, cut


def _all_module_files(opened) -> dict:
    """Every module file of the original (binaries and exported sources present)."""
    files = dict(opened.modules)
    path = opened.path
    if path is not None:
        from ..formats.container import open_capture  # noqa: PLC0415

        with open_capture(path) as cap:
            for mod in opened.model.modules:
                for name in (mod.binary_filename, mod.source_filename):
                    if name and name not in files:
                        try:
                            files[name] = bytes(cap.module_bytes(name))
                        except WrpError:
                            pass
    return files


__all__ = ["slice", "SliceResult", "state_before"]
