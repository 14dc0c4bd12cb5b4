"""Validation of a decoded capture: Warp's loader rules plus wrpkit's own.

The codecs already enforce the byte layout (every length, offset, record size
and reserved byte).  This module checks what a layout cannot: that every
reference points at something that exists and that every byte range an op,
relocation, binding, mesh or pointer location touches lies inside its region.
Warp's loader leaves most of these to replay time, where a bad offset becomes
a wrong result or a crash; wrpkit refuses the file up front.

:func:`validate_program` returns every problem it finds, not just the first,
so that ``wrp validate`` can list them all.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Optional

from . import model as m
from .fileio import is_plain_basename
from .model import APIC_SCALAR_SIZE

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_I32X4 = struct.Struct("<4i")
_U16 = struct.Struct("<H")

#: Cap on the threads of one launch (Warp's launch bounds are 32-bit per dim;
#: a launch of 2^40 threads would run for hours).
MAX_LAUNCH_THREADS = 1 << 32


@dataclass(frozen=True)
class Problem:
    """One validation finding.

    Attributes:
        where: Dotted path of the record, e.g. ``"ops[3].then[0]"``.
        message: What is wrong.
        offset: Byte offset of the record in the file, when known.
        severity: ``"error"`` (the file is refused) or ``"warning"``.
    """

    where: str
    message: str
    offset: Optional[int] = None
    severity: str = "error"

    def __str__(self) -> str:
        at = f" at byte {self.offset}" if self.offset is not None and self.offset >= 0 else ""
        return f"{self.where}{at}: {self.message}"


def _regions_touched(ops) -> set:
    """Every region id an op list (nested bodies included) can read or write."""
    out = set()
    for _, op in m.walk_ops(ops):
        if isinstance(op, m.KernelLaunch):
            out.update(r.region_id for r in op.relocations if r.kind == m.RelocKind.DATA_PTR)
        else:
            for name in m.op_fields(type(op)):
                if name.endswith("region_id"):
                    out.add(getattr(op, name))
    return out


class _Checker:
    def __init__(self, prog: m.Program):
        self.prog = prog
        self.regions = prog.region_map()
        self.kernels = {(k.module_hash, k.kernel_key) for k in prog.kernels}
        self.mesh_ptrs = {me.original_ptr for me in prog.meshes}
        self.problems: list = []
        self.kernel_sigs = self._kernel_signatures(prog)

    def _kernel_signatures(self, prog):
        """``{(module_hash, kernel_key): KernelSignature}`` from wrpkit's annotations, if any."""
        if not prog.annotations:
            return {}
        from .annotations import read_annotations  # noqa: PLC0415
        from .errors import WrpError  # noqa: PLC0415

        try:
            ann = read_annotations(prog)
        except WrpError as e:
            self.err("annotations", f"malformed annotations: {e.message}")
            return {}
        if ann is None:
            return {}
        return {(k.module_hash, k.kernel_key): k for k in ann.kernel_signatures}

    def err(self, where, msg, offset=None, severity="error"):
        self.problems.append(Problem(where, msg, offset, severity))

    def span(self, where, at, region_id, offset, nbytes, what="range", allow_absent=False):
        """Check that [offset, offset + nbytes) lies inside region ``region_id``."""
        if region_id == -1 and allow_absent:
            return
        r = self.regions.get(region_id)
        if r is None:
            self.err(where, f"{what}: region {region_id} does not exist", at)
            return
        if offset < 0 or nbytes < 0 or offset + nbytes > r.size:
            self.err(where, f"{what}: bytes [{offset}, {offset + nbytes}) fall outside region {region_id} "
                            f"of {r.size} bytes", at)

    # -- metadata ----------------------------------------------------------

    def metadata(self):
        p = self.prog
        cpu = p.device_type == m.DeviceType.CPU
        seen = set()
        for i, mod in enumerate(p.modules):
            w = f"modules[{i}]"
            if not mod.module_hash:
                self.err(w, "module hash is empty")
            elif not _HEX64.match(mod.module_hash):
                self.err(w, f"module hash {mod.module_hash!r} is not 64 lowercase hex characters")
            if mod.module_hash in seen:
                self.err(w, f"duplicate module hash {mod.module_hash}")
            seen.add(mod.module_hash)
            if not is_plain_basename(mod.binary_filename):
                self.err(w, f"binary file name {mod.binary_filename!r} is not a plain file name "
                            "(no '/', '\\\\', ':', NUL, '.' or '..')")
            if cpu and mod.target_arch != 0:
                self.err(w, f"CPU module has target arch {mod.target_arch}, expected 0")
            if not cpu and mod.target_arch == 0:
                self.err(w, "CUDA module has target arch 0")
            if mod.binary_kind > 2:
                self.err(w, f"binary kind {mod.binary_kind} is not NONE, PTX or CUBIN")
            if mod.fallback_reason > 6:
                self.err(w, f"fallback reason {mod.fallback_reason} is out of range 0..6")
            r = mod.recipe
            if r.optimization_level > 3 or r.arch_suffix > 2 or any(
                    v > 1 for v in (r.debug, r.verify_fp, r.fast_math, r.fuse_fp, r.lineinfo)):
                self.err(w, "CUDA compile recipe has out-of-range fields")
            if not cpu:
                self._cuda_module(w, mod)
            if mod.source_filename and not is_plain_basename(mod.source_filename):
                self.err(w, f"source file name {mod.source_filename!r} is not a plain file name")
        hashes = {mod.module_hash for mod in p.modules}
        seen_k = set()
        for i, k in enumerate(p.kernels):
            w = f"kernels[{i}]"
            key = (k.module_hash, k.kernel_key)
            if key in seen_k:
                self.err(w, f"duplicate kernel {k.kernel_key!r} in module {k.module_hash[:12]}")
            seen_k.add(key)
            if k.module_hash not in hashes:
                self.err(w, f"kernel {k.kernel_key!r} refers to module {k.module_hash[:12]}, which is not recorded")
            if not k.kernel_key or not k.forward_name:
                self.err(w, "kernel key or forward symbol name is empty")
        names = {}
        for i, b in enumerate(p.bindings):
            w = f"bindings[{i}]"
            if not b.name:
                self.err(w, "binding name is empty")
            # The same name in capture_save's inputs and outputs (an in-place
            # binding) is written twice with one region: legal.
            if b.name in names and names[b.name] != b.region_id:
                self.err(w, f"duplicate binding name {b.name!r} bound to regions {names[b.name]} and {b.region_id}")
            names.setdefault(b.name, b.region_id)
            if b.region_id not in self.regions:
                self.err(w, f"binding {b.name!r} refers to region {b.region_id}, which does not exist")
        for i, me in enumerate(p.meshes):
            w = f"meshes[{i}]"
            if me.num_points < 0 or me.num_tris < 0:
                self.err(w, "negative point or triangle count")
                continue
            self.span(w, None, me.points_region_id, 0, 12 * me.num_points, "points")
            self.span(w, None, me.indices_region_id, 0, 12 * me.num_tris, "indices")
            if me.velocities_region_id:
                self.span(w, None, me.velocities_region_id, 0, 12 * me.num_points, "velocities")
            if me.original_ptr == 0:
                self.err(w, "mesh has a zero original id")
        for i, pl in enumerate(p.pointer_locations):
            w = f"pointer_locations[{i}]"
            if pl.count == 0:
                continue
            if pl.stride == 0 and pl.count != 1:
                self.err(w, "stride 0 is only allowed with count 1")
                continue
            self.span(w, None, pl.region_id, pl.offset, (pl.count - 1) * pl.stride + 8, "handle slots")
        for r in p.regions:
            if r.has_initial_data and r.data is not None and len(r.data) != r.size:
                self.err(f"regions[{r.region_id}]", "initial data length differs from the region size", r.at)

    def _cuda_module(self, w, mod):
        if not mod.binary_digest:
            if (mod.source_filename or mod.source_digest or mod.binary_kind != 0 or mod.fallback_reason != 1
                    or mod.recipe != m.CudaCompileRecipe()):
                self.err(w, "CUDA binary-only module carries incomplete artifact metadata")
            return
        if not _HEX64.match(mod.binary_digest):
            self.err(w, "binary digest is not a SHA-256 hex string")
        ext = {1: ".ptx", 2: ".cubin"}.get(mod.binary_kind)
        if ext is None:
            self.err(w, "module with a digest must be PTX or CUBIN")
        elif not mod.binary_filename.endswith(ext):
            self.err(w, f"binary file name must end in {ext}")
        if bool(mod.source_filename) != bool(mod.source_digest):
            self.err(w, "source file name and digest must be both set or both empty")
        if mod.source_filename and not mod.source_filename.endswith(".cu"):
            self.err(w, "source file name must end in .cu")
        if mod.source_digest and not _HEX64.match(mod.source_digest):
            self.err(w, "source digest is not a SHA-256 hex string")
        if mod.recipe.arch_suffix == 1 and mod.target_arch < 90:
            self.err(w, "arch suffix 'a' needs sm_90 or later")
        if mod.recipe.arch_suffix == 2 and mod.target_arch < 100:
            self.err(w, "arch suffix 'f' needs sm_100 or later")
        if mod.fallback_reason == 0 and not mod.source_filename:
            self.err(w, "fallback reason AVAILABLE needs a source file")

    # -- operations ----------------------------------------------------------

    def ops(self, ops, path):
        for i, op in enumerate(ops):
            w = f"{path}[{i}]"
            fn = getattr(self, "op_" + op.op_type.name.lower(), None)
            if fn is not None:
                fn(w, op)
            if isinstance(op, m.If):
                self.ops(op.then_ops, w + ".then")
                self.ops(op.else_ops, w + ".else")
            elif isinstance(op, m.While):
                self.ops(op.body, w + ".body")

    def op_kernel_launch(self, w, op: m.KernelLaunch):
        at = op.at
        if (op.module_hash, op.kernel_key) not in self.kernels:
            self.err(w, f"launches kernel {op.kernel_key!r} of module {op.module_hash[:12]}, which is not in "
                        "the kernel table", at)
        if not 1 <= op.ndim <= 4:
            self.err(w, f"ndim {op.ndim} is outside 1..4", at)
        if op.size != op.dim:
            self.err(w, f"launch size {op.size} differs from dim {op.dim}", at)
        if op.size > MAX_LAUNCH_THREADS:
            self.err(w, f"launch of {op.size} threads exceeds the cap of {MAX_LAUNCH_THREADS}", at)
        prod = 1
        for d in op.shape[:max(1, min(op.ndim, 4))]:
            prod *= d
        if prod > op.size:
            self.err(w, f"launch shape {op.shape[:op.ndim]} holds more threads than the launch size {op.size}", at)
        if any(op.shape[max(op.ndim, 1):]):
            self.err(w, f"launch shape {op.shape} has non-zero dims past ndim {op.ndim}", at)
        sig = self.kernel_sigs.get((op.module_hash, op.kernel_key))
        if sig is not None:
            self._against_signature(w, op, sig)
        vsize = len(op.value_data)
        n_rel = sum(p.num_relocs for p in op.params) + sum(p.num_relocs for p in op.adjoint_params)
        if n_rel != len(op.relocations):
            self.err(w, f"params own {n_rel} relocations but the table has {len(op.relocations)}", at)
            return
        for adjoint in (False, True):
            for j, (p, rels) in enumerate(op.param_relocations(adjoint)):
                pw = f"{w}.{'adjoint_params' if adjoint else 'params'}[{j}]"
                if p.value_offset + p.value_size > vsize:
                    self.err(pw, f"value bytes [{p.value_offset}, {p.value_offset + p.value_size}) fall outside "
                                 f"the {vsize}-byte value data", at)
                    continue
                if p.value_align not in (0, 1, 2, 4, 8, 16, 32, 64):
                    self.err(pw, f"value alignment {p.value_align} is not a power of two up to 64", at)
                self._array_descriptors(pw, at, op, p, rels)
                for r in rels:
                    if r.value_byte_offset + 8 > p.value_size:
                        self.err(pw, f"relocation slot at {r.value_byte_offset} falls outside the argument's "
                                     f"{p.value_size} bytes", at)
                    if r.kind == m.RelocKind.DATA_PTR:
                        reg = self.regions.get(r.region_id)
                        if reg is None:
                            self.err(pw, f"relocation points into region {r.region_id}, which does not exist", at)
                        elif r.region_offset > reg.size:
                            self.err(pw, f"relocation offset {r.region_offset} falls outside region "
                                         f"{r.region_id} of {reg.size} bytes", at)
                    elif r.kind == m.RelocKind.HANDLE:
                        if r.region_id != -1:
                            self.err(pw, "HANDLE relocation must have region id -1", at)
                        if r.region_offset not in self.mesh_ptrs:
                            self.err(pw, f"handle {r.region_offset:#x} is not one of the file's meshes "
                                         "(a process-local pointer would dangle at replay)", at)
                    elif r.kind == m.RelocKind.NULL_PTR:
                        if r.region_id != -1 or r.region_offset != 0:
                            self.err(pw, "NULL relocation must have region id -1 and offset 0", at)
                    else:
                        self.err(pw, f"unknown relocation kind {r.kind}", at)

    def _against_signature(self, w, op, sig):
        """Files wrpkit wrote record each kernel's arguments: hold every launch to them.

        The argument count and byte sizes must match, and each array argument's
        descriptor must have the declared ndim and fit its region with the real
        element size (not just one byte, as without a signature).
        """
        args = sig.arguments
        if len(args) != len(op.params):
            self.err(w, f"launch passes {len(op.params)} arguments; kernel {op.kernel_key!r} takes {len(args)}", op.at)
            return
        regions = self.regions
        for j, (p, rels) in enumerate(op.param_relocations()):
            a = args[j]
            pw = f"{w}.params[{j}]"
            if a.value_size and p.value_size != a.value_size:
                self.err(pw, f"argument {a.name!r} is {p.value_size} bytes; its type {a.type} takes {a.value_size}",
                         op.at)
                continue
            if not a.ndim or a.dtype is None or p.value_size < 56 or not rels:
                continue
            data = rels[0]
            if data.kind != m.RelocKind.DATA_PTR or data.value_byte_offset != 0:
                continue
            base = p.value_offset
            ndim = _U16.unpack_from(op.value_data, base + 48)[0]
            if ndim != a.ndim:
                self.err(pw, f"array argument {a.name!r} has ndim {ndim}; the kernel declares {a.ndim}", op.at)
                continue
            dims = _I32X4.unpack_from(op.value_data, base + 16)[:ndim]
            steps = _I32X4.unpack_from(op.value_data, base + 32)[:ndim]
            if 0 in dims or min(dims) < 0 or min(steps) < 0:
                continue
            extent = sum((d - 1) * st for d, st in zip(dims, steps)) + a.dtype.size
            reg = regions.get(data.region_id)
            if reg is not None and data.region_offset + extent > reg.size:
                self.err(pw, f"array argument {a.name!r} ({a.dtype.name}, shape {dims}) spans {extent} bytes from "
                             f"offset {data.region_offset}, past the end of region {data.region_id} "
                             f"({reg.size} bytes)", op.at)

    def _array_descriptors(self, pw, at, op, p, rels):
        """Check every ``array_t`` in an argument against the region its pointers point into.

        An array descriptor is recognised by its two relocated slots: ``data``
        at +0 and ``grad`` at +8, followed by ``int32 shape[4]``, ``int32
        strides[4]`` (bytes) and ``uint16 ndim`` at +48.  Shape and strides are
        frozen in the file, so a descriptor larger than its region would make
        the kernel read or write outside the allocation.
        """
        by_slot = {r.value_byte_offset: r for r in rels}
        blob = op.value_data
        base = p.value_offset
        for off, r in by_slot.items():
            grad = by_slot.get(off + 8)
            if grad is None or off + 56 > p.value_size or r.kind != m.RelocKind.DATA_PTR:
                continue  # not a descriptor, or a None array (zeroed descriptor)
            shape = _I32X4.unpack_from(blob, base + off + 16)
            strides = _I32X4.unpack_from(blob, base + off + 32)
            ndim = _U16.unpack_from(blob, base + off + 48)[0]
            if not 1 <= ndim <= 4:
                self.err(pw, f"array descriptor at byte {off} has ndim {ndim}, outside 1..4", at)
                continue
            dims, steps = shape[:ndim], strides[:ndim]
            if any(d < 0 for d in dims) or any(st < 0 for st in steps):
                self.err(pw, f"array descriptor at byte {off} has a negative shape or stride {dims}/{steps}", at)
                continue
            if 0 in dims:
                continue
            # The last element starts at sum((d - 1) * stride) and has at least
            # one byte.  (The element size is not in the file, so this is the
            # tightest bound that never rejects a genuine strided view.)
            extent = sum((d - 1) * st for d, st in zip(dims, steps)) + 1
            for slot in (r, grad):
                if slot.kind != m.RelocKind.DATA_PTR:
                    continue
                reg = self.regions.get(slot.region_id)
                if reg is not None and slot.region_offset + extent > reg.size:
                    self.err(pw, f"array of shape {dims} and byte strides {steps} spans {extent} bytes from offset "
                                 f"{slot.region_offset}, past the end of region {slot.region_id} ({reg.size} bytes)",
                             at)

    def op_memcpy_h2d(self, w, op):
        if self.prog.device_type == m.DeviceType.CPU:
            # Warp's CPU replayer has no case for it: it would skip the copy and report success.
            self.err(w, "MEMCPY_H2D cannot be replayed on CPU (Warp would silently skip it)", op.at)
        self.span(w, op.at, op.dst_region_id, op.dst_offset, len(op.data), "destination")

    def op_memcpy_d2d(self, w, op):
        self.span(w, op.at, op.dst_region_id, op.dst_offset, op.size, "destination")
        self.span(w, op.at, op.src_region_id, op.src_offset, op.size, "source")

    def op_memset(self, w, op):
        self.span(w, op.at, op.region_id, op.offset, op.size, "destination")

    def op_alloc(self, w, op):
        if op.region_id not in self.regions:
            self.err(w, f"ALLOC names region {op.region_id}, which does not exist", op.at)

    def op_if(self, w, op):
        self.span(w, op.at, op.cond_region_id, op.cond_offset, 4, "condition")

    def op_while(self, w, op):
        self.op_if(w, op)
        # A body that touches no byte of the condition's region can never end
        # the loop: Warp would spin until its 2^24-iteration guard.
        if op.cond_region_id not in _regions_touched(op.body):
            self.err(w, f"WHILE body never touches its condition region {op.cond_region_id}, so the loop could "
                        "not end", op.at)

    def _strided(self, n, stride, lanes, scalar):
        return 0 if n == 0 else (n - 1) * stride + lanes * scalar

    def op_scan(self, w, op):
        if op.dtype not in (1, 3, 5, 6):
            self.err(w, f"scan dtype {op.dtype} is not int32, int64, float32 or float64", op.at)
            return
        if op.length == 0:
            return
        if op.in_stride < 0 or op.out_stride < 0 or op.type_len <= 0:
            self.err(w, "scan strides must be >= 0 and type_len > 0", op.at)
            return
        s = APIC_SCALAR_SIZE[op.dtype]
        self.span(w, op.at, op.src_region_id, op.src_offset, self._strided(op.length, op.in_stride, op.type_len, s),
                  "source")
        self.span(w, op.at, op.dst_region_id, op.dst_offset,
                  self._strided(op.length, op.out_stride, op.type_len, s), "destination")

    def op_memtile(self, w, op):
        self.span(w, op.at, op.region_id, op.offset, op.count * len(op.value), "destination")

    def op_segmented_sort(self, w, op):
        if op.dtype not in (1, 5):
            self.err(w, f"segmented sort key dtype {op.dtype} is not int32 or float32", op.at)
        self.span(w, op.at, op.keys_region_id, op.keys_offset, 8 * op.count, "keys (2 x count scratch)")
        self.span(w, op.at, op.values_region_id, op.values_offset, 8 * op.count, "values (2 x count scratch)")
        self.span(w, op.at, op.segstart_region_id, op.segstart_offset, 4 * op.num_segments, "segment starts")
        self.span(w, op.at, op.segend_region_id, op.segend_offset, 4 * op.num_segments, "segment ends")

    def op_radix_sort(self, w, op):
        if op.dtype not in APIC_SCALAR_SIZE:
            self.err(w, f"radix sort dtype {op.dtype} is unknown", op.at)
            return
        ks = APIC_SCALAR_SIZE[op.dtype]
        if op.value_size not in (4, 8):
            self.err(w, f"radix sort value size {op.value_size} is not 4 or 8", op.at)
            return
        if not 0 <= op.begin_bit <= op.end_bit <= 8 * ks:
            self.err(w, f"radix sort bit range [{op.begin_bit}, {op.end_bit}) is invalid for {8 * ks}-bit keys",
                     op.at)
        self.span(w, op.at, op.keys_region_id, op.keys_offset, 2 * op.count * ks, "keys (2 x count scratch)")
        self.span(w, op.at, op.values_region_id, op.values_offset, 2 * op.count * op.value_size,
                  "values (2 x count scratch)")

    def op_runlength_encode(self, w, op):
        n = 4 * op.value_count
        self.span(w, op.at, op.values_region_id, op.values_offset, n, "values")
        self.span(w, op.at, op.run_values_region_id, op.run_values_offset, n, "run values")
        self.span(w, op.at, op.run_lengths_region_id, op.run_lengths_offset, n, "run lengths")
        self.span(w, op.at, op.run_count_region_id, op.run_count_offset, 4, "run count")

    def _region_refs(self, w, op, names):
        for name in names:
            rid = getattr(op, name + "_region_id")
            off = getattr(op, name + "_offset")
            if rid == -1:
                continue
            self.span(w, op.at, rid, off, 0, name)

    def op_bsr_from_triplets(self, w, op):
        if min(op.block_size, op.scalar_size_in_bytes, op.row_count, op.col_count, op.nnz_upper_bound) < 0:
            self.err(w, "BSR counts must not be negative", op.at)
            return
        self.span(w, op.at, op.tpl_rows_region_id, op.tpl_rows_offset, 4 * op.nnz_upper_bound, "triplet rows")
        self.span(w, op.at, op.tpl_columns_region_id, op.tpl_columns_offset, 4 * op.nnz_upper_bound,
                  "triplet columns")
        self.span(w, op.at, op.bsr_offsets_region_id, op.bsr_offsets_offset, 4 * (op.row_count + 1), "bsr offsets")
        self._region_refs(w, op, ["tpl_nnz", "tpl_values", "summed_block_offsets", "summed_block_indices",
                                  "bsr_row_counts", "bsr_columns", "bsr_nnz"])

    def op_bsr_transpose(self, w, op):
        if min(op.row_count, op.col_count, op.nnz_upper_bound) < 0:
            self.err(w, "BSR counts must not be negative", op.at)
            return
        self.span(w, op.at, op.bsr_offsets_region_id, op.bsr_offsets_offset, 4 * (op.row_count + 1), "bsr offsets")
        self.span(w, op.at, op.transposed_offsets_region_id, op.transposed_offsets_offset, 4 * (op.col_count + 1),
                  "transposed offsets")
        self._region_refs(w, op, ["bsr_row_counts", "bsr_columns", "transposed_row_counts", "transposed_columns",
                                  "block_indices", "status"])

    def op_reduction(self, w, op):
        if op.kind not in (1, 2):
            self.err(w, f"reduction kind {op.kind} is not SUM or INNER", op.at)
            return
        if op.dtype not in (5, 6):
            self.err(w, f"reduction dtype {op.dtype} is not float32 or float64", op.at)
            return
        if op.count == 0 or op.count > 0x7FFFFFFF or op.type_len <= 0 or op.input_a_stride < 0 \
                or op.input_b_stride < 0:
            self.err(w, "reduction needs 0 < count <= 2^31-1, type_len > 0 and non-negative strides", op.at)
            return
        s = APIC_SCALAR_SIZE[op.dtype]
        if op.kind == 1 and (op.input_b_region_id != -1 or op.input_b_offset or op.input_b_stride):
            self.err(w, "SUM must have no second input (region -1, offset 0, stride 0)", op.at)
        for v in (op.input_a_offset, op.input_b_offset, op.output_offset, op.input_a_stride, op.input_b_stride):
            if v % s:
                self.err(w, f"reduction offsets and strides must be multiples of the {s}-byte scalar", op.at)
                break
        self.span(w, op.at, op.input_a_region_id, op.input_a_offset,
                  self._strided(op.count, op.input_a_stride, op.type_len, s), "input a")
        if op.kind == 2:
            self.span(w, op.at, op.input_b_region_id, op.input_b_offset,
                      self._strided(op.count, op.input_b_stride, op.type_len, s), "input b")
        self.span(w, op.at, op.output_region_id, op.output_offset, (op.type_len if op.kind == 1 else 1) * s,
                  "output")

    def _live_only(self, w, op):
        self.err(w, f"{op.op_type.name} records a process-local handle and cannot be replayed from a file "
                    "(Warp refuses to load it)", op.at)

    op_bvh_refit = op_bvh_rebuild = op_hash_grid_update = _live_only


def validate_program(prog: m.Program) -> list:
    """Check a decoded program against Warp's loader rules and wrpkit's own.

    Args:
        prog: A program from any codec.

    Returns:
        A list of :class:`Problem`; empty when the program is valid.
    """
    c = _Checker(prog)
    c.metadata()
    c.ops(prog.ops, "ops")
    return c.problems


def check_module_symbols(prog: m.Program, files) -> list:
    """Pin the code of a CPU capture's modules before any of it is loaded.

    Every kernel symbol the graph names must be *defined* in its own module's
    ELF object, and no kernel symbol may name a C library function.

    Args:
        prog: The program.
        files: ``{binary_filename: bytes}`` of the module files.

    Returns:
        A list of :class:`Problem` (empty for CUDA programs: they carry no ELF).
    """
    from .elf import check_kernel_symbols, read_object  # noqa: PLC0415
    from .errors import WrpError  # noqa: PLC0415

    if prog.device_type != m.DeviceType.CPU:
        return []
    symbols: dict = {}
    for k in prog.kernels:
        symbols.setdefault(k.module_hash, []).extend([k.forward_name, k.backward_name])
    out = []
    for i, mod in enumerate(prog.modules):
        data = files.get(mod.binary_filename)
        if data is None:
            continue
        try:
            info = read_object(data, mod.binary_filename)
        except WrpError as e:
            out.append(Problem(f"modules[{i}]", e.message))
            continue
        for msg in check_kernel_symbols(info, symbols.get(mod.module_hash, []), mod.binary_filename):
            out.append(Problem(f"modules[{i}]", msg))
    return out


def validate_modules(capture) -> list:
    """Check that every module file the graph names is present, non-empty, safe,
    and defines the kernel symbols the graph names.

    Args:
        capture: A :class:`wrpkit.container.Capture`.

    Returns:
        A list of :class:`Problem`.
    """
    from .container import PRESENT  # noqa: PLC0415

    prog = capture.program
    out = []
    files = {}
    for i, mod in enumerate(prog.modules):
        names = [mod.binary_filename] + ([mod.source_filename] if mod.source_filename else [])
        for name in names:
            state = capture.module_state(name)
            if state != PRESENT:
                where = capture.modules_dir if capture.modules_dir is not None else "the bundle"
                out.append(Problem(f"modules[{i}]", f"module file {name!r} is {state} in {where}"))
            elif name == mod.binary_filename:
                files[name] = capture.module_bytes(name)
    return out + check_module_symbols(prog, files)


def validate_capture(capture) -> list:
    """All checks of :func:`validate_program` and :func:`validate_modules`."""
    return validate_program(capture.program) + validate_modules(capture)
