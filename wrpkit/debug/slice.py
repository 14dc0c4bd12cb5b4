"""Cut top-level ops ``A:B`` out of a capture into a capture of their own (``wrp slice``).

Example::

    r = wrpkit.slice("sim.wrp", "5000:5010", "piece.wrpk", inputs={"x": x})
    # stock Warp: wp.capture_launch(wp.capture_load("piece.wrpk"...)) reproduces
    # the original's state after op 5009, bit for bit

The slice holds ops ``A`` to ``B-1`` and, as its initial memory, the state of
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

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .. import model as m
from ..errors import WrpError, WrpRuntimeError, WrpUsageError
from ..fileio import check_output_path, publish_wrp
from ..formats import wrp1
from . import stepper as st
from .common import input_bytes, open_program, parse_range


@dataclass
class SliceResult:
    """What :func:`slice` wrote.

    Attributes:
        path: The file written.
        start, stop: The top-level op range ``[start, stop)`` of the original.
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

    def to_json(self) -> dict:
        return {"path": str(self.path), "start": self.start, "stop": self.stop, "ops": self.ops,
                "regions_with_data": self.regions_with_data, "bytes_written": self.bytes_written}


def state_before(opened, start: int, device: str, inputs: Optional[Mapping] = None) -> dict:
    """``{region_id: bytes (numpy uint8)}``: every region's contents just before top-level op ``start``."""
    prog = opened.program
    regions = prog.region_map()

    def initial(rid: int) -> np.ndarray:
        r = regions[rid]
        if r.has_initial_data and r.data is not None:
            return np.frombuffer(r.data, dtype=np.uint8)
        return np.zeros(r.size, dtype=np.uint8)

    given = input_bytes(opened, inputs, initial)
    if start == 0:
        return {rid: given.get(rid, None) if rid in given else initial(rid) for rid in regions}
    from ..run.runtime import load  # noqa: PLC0415

    image = wrp1.encode_wrp1(st.prefix_program(prog, start))
    runner = load(image, device=device, modules=opened.modules)
    del image
    try:
        for rid, raw in given.items():
            runner.set(f"{st.REGION_BINDING}{rid}", raw)
        import warp as wp  # noqa: PLC0415

        try:
            wp.capture_launch(runner.graph)
        except RuntimeError as e:
            raise WrpRuntimeError(f"Warp failed to replay ops 0:{start}: {e}") from None
        if not runner.device.is_cpu:
            wp.synchronize_device(runner.device)
        # CPU: zero-copy views that keep the graph's memory alive after close(); CUDA: copies.
        return {rid: runner.numpy(f"{st.REGION_BINDING}{rid}") for rid in regions}
    finally:
        runner.close()


def slice(source, ops, out, *, inputs: Optional[Mapping] = None, device=None,  # noqa: A001  (the API's name)
          modules: Optional[Mapping] = None) -> SliceResult:
    """Write a capture holding top-level ops ``A`` to ``B-1`` of ``source``.

    Args:
        source: A ``.wrp`` or ``.wrpk`` path.
        ops: ``"A:B"`` or ``(A, B)``; negative numbers count from the end.
        out: Output path; ``.wrp`` (with ``<stem>_modules/``) or ``.wrpk``.
        inputs: ``{binding name: array}`` set before op 0 (default: the
            file's own initial data).
        device: Device for replaying ops before ``A``; default the file's family.
        modules: ``{filename: bytes}`` replacing ``<stem>_modules/``.

    Returns:
        A :class:`SliceResult`.

    Raises:
        WrpError: Bad range or output path.
        WrpFormatError, WrpValidationError, WrpModuleError: Invalid capture.
        WrpBindingError: Bad inputs.
        WrpRuntimeError: Warp failed to replay the prefix.
    """
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".wrp", ".wrpk"):
        raise WrpUsageError(f"cannot write a slice to {out}: the output must end in .wrp or .wrpk",
                       hint="For example -o piece.wrpk (one self-contained file).")
    check_output_path(out, [source] if not isinstance(source, (bytes, bytearray, memoryview)) else [])
    opened = open_program(source, modules)
    prog = opened.program
    start, stop = parse_range(ops, len(prog.ops))
    if device is None:
        device = "cpu" if prog.device_type == m.DeviceType.CPU else "cuda:0"
    # The device is checked even when no op runs before A (a slice from 0): a device this
    # machine lacks, or of the other family, is refused as every command refuses it (exit 2).
    from ..environment import init_warp  # noqa: PLC0415
    from ..run.runtime import check_runnable, resolve_device  # noqa: PLC0415

    check_runnable(prog, str(device))
    init_warp(cpu_only=str(device).strip().lower() == "cpu")  # no banner, no CUDA-driver warning on the CPU
    resolve_device(str(device))
    t0 = time.perf_counter()
    state = state_before(opened, start, str(device), inputs)
    prefix_seconds = time.perf_counter() - t0

    new_regions = []
    with_data = 0
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
            with_data += 1
        else:
            new_regions.append(m.Region(r.region_id, r.element_size, r.size, False, None))
    sliced = dataclasses.replace(prog, regions=new_regions, ops=prog.ops[start:stop])
    files = _all_module_files(opened)
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".wrp":
        n = publish_wrp(out, wrp1.iter_wrp1_chunks(sliced), files)
    else:
        from ..formats import wrpk  # noqa: PLC0415

        n = wrpk.write_wrpk(out, sliced, files)
    return SliceResult(out, start, stop, stop - start, with_data, int(n or out.stat().st_size), prefix_seconds)


def _all_module_files(opened) -> dict:
    """Every module file of the original (binaries and exported sources present)."""
    files = dict(opened.modules)
    path = opened.path
    if path is not None:
        from ..formats.container import open_capture  # noqa: PLC0415

        with open_capture(path) as cap:
            for mod in opened.program.modules:
                for name in (mod.binary_filename, mod.source_filename):
                    if name and name not in files:
                        try:
                            files[name] = bytes(cap.module_bytes(name))
                        except WrpError:
                            pass
    return files


__all__ = ["slice", "SliceResult", "state_before"]
