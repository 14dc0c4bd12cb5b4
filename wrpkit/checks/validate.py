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

import array
import re
import sys
from dataclasses import dataclass
from typing import Optional

from .. import model as m
from ..formats.annotations import SCALAR_SIZES
from ..formats.annotations import strided_reach as _reach
from ..formats.launch_arrays import DescriptorLayoutError, argument_arrays, descriptor_view, index_counts
from ..formats.wrp1_layout import CURRENT_FORMAT, LAYOUTS
from ..fileio import is_plain_basename
from ..model import APIC_SCALAR_SIZE
from . import legacy as _legacy

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ALIGNMENTS = (0, 1, 2, 4, 8, 16, 32, 64)
_INT_MAX = 0x7FFFFFFF

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
            # the op table's region references (wrpkit.model REGIONS), as every tool reads them
            for ref in type(op).REGIONS or ():
                out.add(getattr(op, ref.region))
    return out


class _Checker:
    def __init__(self, prog: m.Program, annotations=None):
        self.prog = prog
        self.regions = prog.region_map()
        self.kernels = {(k.module_hash, k.kernel_key): k for k in prog.kernels}
        self.kernels_by_key = {k.kernel_key: k for k in prog.kernels}  # formats 3/10 (checks/legacy.py)
        self.mesh_ptrs = {me.original_ptr for me in prog.meshes}
        self.layout = LAYOUTS.get(prog.format_version, LAYOUTS[CURRENT_FORMAT])
        self.problems: list = []
        self.kernel_sigs = self._kernel_signatures(prog, annotations)
        self.clean: set = set()  # ids of leaf op objects that passed (the program keeps them alive)

    def _kernel_signatures(self, prog, decoded=None):
        """``{(module_hash, kernel_key): KernelSignature}`` from wrpkit's annotations, after checking
        the annotations against the rest of the file (as the C++ validator's annotations.cpp does)."""
        if not prog.annotations:
            return {}
        from ..formats.annotations import read_annotations  # noqa: PLC0415
        from ..errors import WrpError  # noqa: PLC0415

        try:
            ann = decoded if decoded is not None else read_annotations(prog)
        except WrpError as e:
            self.err("annotations", f"malformed annotations: {e.message}")
            return {}
        if ann is None:
            return {}
        self._binding_signatures(ann)
        self._module_digests(ann)
        out = {}
        for i, k in enumerate(ann.kernel_signatures):
            w = f"annotations.kernel_signatures[{i}]"
            key = (k.module_hash, k.kernel_key)
            if key not in self.kernels:
                self.err(w, f"kernel {k.kernel_key!r} of module {k.module_hash[:12]} is not in the kernel table")
            elif key in out:
                self.err(w, f"kernel {k.kernel_key!r} has two signatures")
            for j, a in enumerate(k.arguments):
                if a.ndim > 4:
                    self.err(f"{w}.arguments[{j}]", f"argument {a.name!r} declares ndim {a.ndim} (at most 4)")
            out.setdefault(key, k)
        return out

    def _binding_signatures(self, ann):
        from ..formats.annotations import ScalarKind  # noqa: PLC0415

        bindings = {b.name: b.region_id for b in self.prog.bindings}
        seen = set()
        for i, s in enumerate(ann.signature):
            w = f"annotations.signature[{i}]"
            if s.name not in bindings:
                self.err(w, f"binding {s.name!r} does not exist")
                continue
            if s.name in seen:
                self.err(w, f"binding {s.name!r} has two signatures")
                continue
            seen.add(s.name)
            dt = s.dtype
            if dt.scalar > max(ScalarKind):
                self.err(w, f"dtype has an unknown scalar kind {int(dt.scalar)}")
                continue
            if len(dt.shape) > 2 or any(not 1 <= v <= 4096 for v in dt.shape):
                self.err(w, f"dtype shape {tuple(dt.shape)} is not 0 to 2 extents of 1..4096")
                continue
            if dt.size == 0:
                self.err(w, "element size is zero (or the dtype is missing)")
                continue
            lanes = 1
            for v in dt.shape:
                lanes *= v
            if dt.scalar != ScalarKind.UNKNOWN and SCALAR_SIZES[dt.scalar] * lanes != dt.size:
                self.err(w, f"element size {dt.size} is not {lanes} scalars of {SCALAR_SIZES[dt.scalar]} bytes")
                continue
            if len(s.shape) > 4 or len(s.strides) != len(s.shape):
                self.err(w, f"{len(s.shape)} dimensions with {len(s.strides)} strides (need equal counts, at most 4)")
                continue
            if any(not 0 <= d <= _INT_MAX for d in s.shape) or any(not -_INT_MAX - 1 <= st <= _INT_MAX
                                                                    for st in s.strides):
                self.err(w, f"shape {tuple(s.shape)} or strides {tuple(s.strides)} out of the int32 range")
                continue
            reg = self.regions.get(bindings[s.name])
            if reg is None:
                continue  # reported with the binding
            if 0 in s.shape:
                continue  # an empty view addresses nothing
            lo, hi = s.extent()
            if lo < 0 or hi > reg.size:
                self.err(w, f"the view of {s.name!r} addresses bytes [{lo}, {hi}) outside region "
                            f"{reg.region_id} of {reg.size} bytes")

    def _module_digests(self, ann):
        names = {mod.binary_filename for mod in self.prog.modules}
        seen = set()
        for i, d in enumerate(ann.module_digests):
            w = f"annotations.module_digests[{i}]"
            if not is_plain_basename(d.binary_filename):
                self.err(w, f"{d.binary_filename!r} is not a plain file name")
            elif d.binary_filename not in names:
                self.err(w, f"{d.binary_filename!r} is not a module of this graph")
            elif d.binary_filename in seen:
                self.err(w, f"{d.binary_filename!r} has two digests")
            if len(d.sha256) != 32:
                self.err(w, "SHA-256 must be 32 bytes")
            seen.add(d.binary_filename)

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
            if cpu and (mod.binary_digest or mod.source_filename or mod.source_digest or mod.binary_kind != 0
                        or mod.fallback_reason != 1 or mod.recipe != m.CudaCompileRecipe()):
                self.err(w, "a CPU module must carry no CUDA artifact metadata (digests, source, kind, recipe)")
            if not cpu and not 1 <= mod.target_arch <= 0x7FFFFFFF:
                self.err(w, f"CUDA module needs a target arch between 1 and 2^31-1, found {mod.target_arch}")
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
            # Symbol names are looked up in the module's ELF symbols; Warp only writes C identifiers.
            if k.forward_name and not _C_IDENT.match(k.forward_name):
                self.err(w, f"forward symbol {k.forward_name!r} is not a C identifier")
            # A backward symbol is only looked up where a backward launch uses it (as Warp
            # replays a module without one): unused, a malformed name is only a warning.
            if k.backward_name and not _C_IDENT.match(k.backward_name):
                used = key in backward_launched(p)
                self.err(w, f"backward symbol {k.backward_name!r} is not a C identifier"
                         + ("" if used else " (no backward launch uses it, so it is never looked up)"),
                         severity="error" if used else "warning")
        names = {}
        for i, b in enumerate(p.bindings):
            w = f"bindings[{i}]"
            if not b.name:
                self.err(w, "binding name is empty")
            # The same name in capture_save's inputs and outputs (an in-place
            # binding) is written twice with one region: legal.  Another region
            # under a name already written resolves as Warp's loader resolves
            # it (the last record wins), so it is only a warning.
            if b.name in names and names[b.name] != b.region_id:
                self.err(w, f"binding {b.name!r} names region {b.region_id} here but region {names[b.name]} "
                         f"before; Warp uses the last, region {b.region_id}", severity="warning")
            names[b.name] = b.region_id
            if b.region_id not in self.regions:
                self.err(w, f"binding {b.name!r} refers to region {b.region_id}, which does not exist")
        if m.binding_split([b.name for b in p.bindings]) is None:
            # Warp writes capture_save's inputs, then its outputs, each once; a
            # graph saved twice keeps every save's names (Warp's APIC state
            # accumulates them).  Stock Warp loads that file, so: a warning.
            self.err("bindings", "binding names repeat: the list is not one capture_save's inputs then outputs "
                     "(was capture_save called twice on one graph?); each name resolves to its last record, "
                     "as in Warp's loader", severity="warning")
        mesh_ids = set()
        for i, me in enumerate(p.meshes):
            self._mesh(f"meshes[{i}]", me, mesh_ids)
        for i, pl in enumerate(p.pointer_locations):
            w = f"pointer_locations[{i}]"
            if pl.region_id not in self.regions:
                self.err(w, f"pointer-location region {pl.region_id} does not exist")
                continue
            if pl.count == 0:
                continue
            if pl.stride == 0 and pl.count != 1:
                self.err(w, "stride 0 is only allowed with count 1")
                continue
            self.span(w, None, pl.region_id, pl.offset, (pl.count - 1) * pl.stride + 8, "handle slots")
        for r in p.regions:
            if r.has_initial_data and r.data is not None and len(r.data) != r.size:
                self.err(f"regions[{r.region_id}]", "initial data length differs from the region size", r.at)

    def _mesh(self, w, me, mesh_ids):
        """Warp rebuilds each mesh at load from region memory (apic_create_meshes); its BVH build
        reads ``points[indices[k]]``, so every triangle index in initial data must be a point."""
        if me.num_points < 0 or me.num_tris < 0:
            self.err(w, f"negative point or triangle count ({me.num_points}, {me.num_tris})")
            return
        if me.bvh_constructor > 2:
            self.err(w, f"BVH constructor {me.bvh_constructor} is not 0 (SAH), 1 or 2")
        if me.bvh_leaf_size < 1:
            self.err(w, "BVH leaf size must be at least 1")
        if me.original_ptr == 0:
            self.err(w, "mesh has a zero original id")
        elif me.original_ptr in mesh_ids:
            self.err(w, f"mesh id {me.original_ptr:#x} appears twice")
        mesh_ids.add(me.original_ptr)
        self.span(w, None, me.points_region_id, 0, 12 * me.num_points, "points")
        self.span(w, None, me.indices_region_id, 0, 12 * me.num_tris, "indices")
        if me.velocities_region_id:
            self.span(w, None, me.velocities_region_id, 0, 12 * me.num_points, "velocities")
        if me.num_tris > 0 and me.num_points == 0:
            self.err(w, "mesh has triangles but no points")
            return
        reg = self.regions.get(me.indices_region_id)
        n = 3 * me.num_tris
        if reg is None or not reg.has_initial_data or reg.data is None or len(reg.data) < 4 * n:
            return
        idx = array.array("i")
        idx.frombytes(bytes(reg.data[:4 * n]))
        if sys.byteorder != "little":  # pragma: no cover
            idx.byteswap()
        if n and (min(idx) < 0 or max(idx) >= me.num_points):
            k = next(k for k, v in enumerate(idx) if v < 0 or v >= me.num_points)
            self.err(w, f"triangle index {idx[k]} (entry {k} of region {reg.region_id}) is outside "
                        f"0..{me.num_points - 1}", reg.at + 24 + 4 * k if reg.at >= 0 else None)

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
        clean = self.clean
        for i, op in enumerate(ops):
            if id(op) in clean:
                continue  # the same op object, listed again (shared tables of a .wrpk): already valid
            w = f"{path}[{i}]"
            if op.op_type != m.OpType.KERNEL_LAUNCH and op.op_type not in self.layout.ops:
                # Only a .wrpk can say so (the WRP1 decoder refuses the op type).
                self.err(w, f"op type {int(op.op_type)} is {op.op_type.name}, which format {self.layout.version} "
                            "does not have", op.at)
                continue
            fn = getattr(self, "op_" + op.op_type.name.lower(), None)
            if fn is not None:
                before = len(self.problems)
                fn(w, op)
                # A leaf op's checks read only the op and the program's tables, so
                # a clean result holds wherever the same object appears.
                if len(self.problems) == before and not isinstance(op, (m.If, m.While)):
                    clean.add(id(op))
            if isinstance(op, m.If):
                self.ops(op.then_ops, w + ".then")
                self.ops(op.else_ops, w + ".else")
            elif isinstance(op, m.While):
                self.ops(op.body, w + ".body")

    def op_kernel_launch(self, w, op: m.KernelLaunch):
        at = op.at
        k = self.kernels.get((op.module_hash, op.kernel_key))
        if k is None and self.prog.format_version != CURRENT_FORMAT:
            k = _legacy.launch_kernel(self.prog, self.kernels_by_key, op)
            if k is not None:
                self.err(w, f"kernel {op.kernel_key!r} of module {op.module_hash[:12]} has no kernel record; Warp "
                            f"keyed kernels by key alone and runs module {k.module_hash[:12]}'s kernel for it "
                            "(`wrp upgrade --collision producer|intent` chooses)", at, severity="warning")
        if op.legacy_args or op.handle_offsets or self.prog.format_version != CURRENT_FORMAT:
            for msg in _legacy.launch_problems(self.prog, self.regions, op):
                self.err(w, msg, at)
        if k is None:
            self.err(w, f"launches kernel {op.kernel_key!r} of module {op.module_hash[:12]}, which is not in "
                        "the kernel table", at)
        elif not op.is_forward and not k.backward_name:
            self.err(w, f"backward launch of kernel {op.kernel_key!r}, whose module was built without backward "
                        "code", at)
        if op.size != op.dim:
            self.err(w, f"launch size {op.size} differs from dim {op.dim}", at)
        if op.size > MAX_LAUNCH_THREADS:
            self.err(w, f"launch of {op.size} threads exceeds the cap of {MAX_LAUNCH_THREADS}", at)
        if not 1 <= op.ndim <= 4:
            self.err(w, f"ndim {op.ndim} is outside 1..4", at)
        else:
            # The generated entry point unravels thread i with % and / by each extent: a zero
            # extent would divide by zero, and a size that is not a multiple of the shape's
            # elements would produce coordinates outside it.
            prod = 1
            for d, extent in enumerate(op.shape):
                if d >= op.ndim:
                    if extent:
                        self.err(w, f"launch shape {op.shape} has non-zero dims past ndim {op.ndim}", at)
                        break
                    continue
                if extent < 0:  # formats before 16 store int32 extents; Warp 1.18 refuses negative ones
                    self.err(w, f"launch shape[{d}] is negative ({extent})", at)
                if extent == 0 and op.size != 0:
                    self.err(w, f"launch shape[{d}] is 0 in a launch of {op.size} threads", at)
                prod *= extent
            if op.size and prod and op.size % prod:
                self.err(w, f"launch size {op.size} is not a multiple of the shape's {prod} elements", at)
        sig = self.kernel_sigs.get((op.module_hash, op.kernel_key))
        if sig is not None:
            self._against_signature(w, op, sig)
        self._launch_arguments(w, op)

    def _launch_arguments(self, w, op):
        """Parameter records against the value data, and each argument's relocations.

        Warp packs the arguments exactly like the C args struct the replayer rebuilds
        (align, then append), forward then adjoint; a record that disagrees would hand
        the kernel shifted fields.
        """
        at = op.at
        vsize = len(op.value_data)
        n_rel = len(op.relocations)
        blocks = [("params", j, p) for j, p in enumerate(op.params)]
        if not op.is_forward:
            blocks += [("adjoint_params", j, p) for j, p in enumerate(op.adjoint_params)]
        cursor = packed_end = 0
        for table, j, p in blocks:
            pw = f"{w}.{table}[{j}]"
            if p.value_offset + p.value_size > vsize:
                self.err(pw, f"value bytes [{p.value_offset}, {p.value_offset + p.value_size}) fall outside "
                             f"the {vsize}-byte value data", at)
                return
            if p.value_align not in _ALIGNMENTS:
                self.err(pw, f"value alignment {p.value_align} is not 0 or a power of two up to 64", at)
                return
            a = p.value_align or 8  # the replayer's default, alignof(void*)
            aligned = -(-packed_end // a) * a
            if p.value_offset != aligned:
                self.err(pw, f"value offset {p.value_offset}, but packed with alignment {p.value_align} the "
                             f"argument starts at {aligned}", at)
                return
            packed_end = p.value_offset + p.value_size
            if cursor + p.num_relocs > n_rel:
                self.err(pw, f"its {p.num_relocs} relocations run past the table of {n_rel}", at)
                return
            rels = op.relocations[cursor:cursor + p.num_relocs]
            cursor += p.num_relocs
            ok = True
            for r in rels:
                ok = self._relocation(pw, at, p, r) and ok
            if ok:
                self._argument_pointers(pw, at, op, p, rels)
        if packed_end != vsize:
            self.err(w, f"arguments end at byte {packed_end} of the {vsize} value bytes", at)
        if cursor != n_rel:
            self.err(w, f"params own {cursor} relocations but the table has {n_rel}", at)

    def _relocation(self, pw, at, p, r) -> bool:
        ok = True
        if r.value_byte_offset + 8 > p.value_size:
            self.err(pw, f"relocation slot at {r.value_byte_offset} falls outside the argument's "
                         f"{p.value_size} bytes", at)
            ok = False
        if r.kind == m.RelocKind.DATA_PTR:
            reg = self.regions.get(r.region_id)
            if reg is None:
                self.err(pw, f"relocation points into region {r.region_id}, which does not exist", at)
                ok = False
            elif r.region_offset > reg.size:
                self.err(pw, f"relocation offset {r.region_offset} falls outside region "
                             f"{r.region_id} of {reg.size} bytes", at)
                ok = False
        elif r.kind == m.RelocKind.HANDLE:
            if r.region_id != -1:
                self.err(pw, "HANDLE relocation must have region id -1", at)
                ok = False
            # 0 is a null handle (Warp writes it for a None mesh); any other unknown handle
            # would be passed on unchanged: a stale pointer from the capturing process.
            if r.region_offset != 0 and r.region_offset not in self.mesh_ptrs:
                self.err(pw, f"handle {r.region_offset:#x} is not one of the file's meshes "
                             "(a process-local pointer would dangle at replay)", at)
                ok = False
        elif r.kind == m.RelocKind.NULL_PTR:
            if r.region_id != -1 or r.region_offset != 0:
                self.err(pw, "NULL relocation must have region id -1 and offset 0", at)
                ok = False
        else:
            self.err(pw, f"unknown relocation kind {r.kind}", at)
            ok = False
        return ok

    def _argument_pointers(self, pw, at, op, p, rels):
        """The relocations of one argument follow the shape of its type, as Warp's capture walks it
        (:func:`~wrpkit.formats.launch_arrays.argument_arrays`), and every descriptor's frozen shape
        and strides must address bytes inside its regions."""
        try:
            for d in argument_arrays(p, rels):
                self._array_extent(pw, at, op, p.value_offset + d.offset, d.offset, d.relocations)
        except DescriptorLayoutError as e:
            self.err(pw, str(e), at)

    def _array_extent(self, pw, at, op, base, off, rels):
        """Check an ``array_t`` (at ``base`` in the value data) against the regions its pointers
        point into.  The element size is not in the file, so the first byte of the last element
        is what is bounded (a signature tightens this, see :meth:`_against_signature`)."""
        data, grad = rels[0], rels[1]
        if data.kind != m.RelocKind.DATA_PTR and grad.kind != m.RelocKind.DATA_PTR:
            return  # a None array
        blob = op.value_data
        ndim, shape, strides = descriptor_view(blob, base)
        if not 1 <= ndim <= 4:
            self.err(pw, f"array descriptor at byte {off} has ndim {ndim}, outside 1..4", at)
            return
        shape, strides = shape[:ndim], strides[:ndim]
        if any(d < 0 for d in shape):
            self.err(pw, f"array descriptor at byte {off} has a negative shape {shape}", at)
            return
        if 0 not in shape:
            lo, hi = _reach(shape, strides)
            for name, slot in (("data", data), ("grad", grad)):
                if slot.kind != m.RelocKind.DATA_PTR:
                    continue
                reg = self.regions.get(slot.region_id)
                if reg is None or slot.region_offset > reg.size:
                    continue  # reported as a relocation problem
                if -lo > slot.region_offset or slot.region_offset + hi + 1 > reg.size:
                    self.err(pw, f"array {name} of shape {shape} and byte strides {strides} at byte {off} reaches "
                                 f"bytes [{slot.region_offset + lo}, {slot.region_offset + hi + 1}) outside region "
                                 f"{slot.region_id} ({reg.size} bytes)", at)
        # An indexedarray's index array d holds shape[d] int32 entries (its own shape, at +88).
        counts = index_counts(blob, base) if len(rels) == 6 else ()
        for d, r in enumerate(rels[2:6]):
            if r.kind != m.RelocKind.DATA_PTR:
                continue
            count = counts[d]
            reg = self.regions.get(r.region_id)
            if count < 0 or (reg is not None and r.region_offset <= reg.size
                             and 4 * count > reg.size - r.region_offset):
                self.err(pw, f"index array {d} of {count} entries (indexedarray at byte {off}) does not fit "
                             f"its region {r.region_id}", at)

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
            base = p.value_offset
            if data.kind != m.RelocKind.DATA_PTR or data.value_byte_offset != 0 or base + 56 > len(op.value_data):
                continue
            ndim, dims, steps = descriptor_view(op.value_data, base)
            if ndim != a.ndim:
                self.err(pw, f"array argument {a.name!r} has ndim {ndim}; the kernel declares {a.ndim}", op.at)
                continue
            if ndim > 4:
                continue  # reported with the descriptor
            dims, steps = dims[:ndim], steps[:ndim]
            if 0 in dims or min(dims) < 0:
                continue
            lo, hi = _reach(dims, steps)
            reg = regions.get(data.region_id)
            if reg is not None and data.region_offset <= reg.size and (
                    -lo > data.region_offset or data.region_offset + hi + a.dtype.size > reg.size):
                self.err(pw, f"array argument {a.name!r} ({a.dtype.name}, shape {dims}) spans bytes "
                             f"[{data.region_offset + lo}, {data.region_offset + hi + a.dtype.size}), past the "
                             f"bounds of region {data.region_id} ({reg.size} bytes)", op.at)

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
        self.span(w, op.at, op.region_id, 0, op.size, "ALLOC")

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
        if op.length > _INT_MAX:
            self.err(w, f"scan length {op.length} exceeds INT_MAX", op.at)
            return
        if op.length and (op.in_stride < 0 or op.out_stride < 0 or op.type_len <= 0):
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
        if op.count > _INT_MAX // 2 or op.num_segments > _INT_MAX - 1:
            self.err(w, f"count {op.count} or segment count {op.num_segments} is too large", op.at)
            return
        # As at replay: ends inferred from starts alias the start array one int32 later.
        inferred = (op.segstart_region_id == op.segend_region_id and op.segend_offset - op.segstart_offset == 4)
        self.span(w, op.at, op.keys_region_id, op.keys_offset, 8 * op.count, "keys (2 x count scratch)")
        self.span(w, op.at, op.values_region_id, op.values_offset, 8 * op.count, "values (2 x count scratch)")
        self.span(w, op.at, op.segstart_region_id, op.segstart_offset, 4 * (op.num_segments + inferred),
                  "segment starts")
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
        if op.count > _INT_MAX:
            self.err(w, f"radix sort count {op.count} exceeds INT_MAX", op.at)
            return
        self.span(w, op.at, op.keys_region_id, op.keys_offset, 2 * op.count * ks, "keys (2 x count scratch)")
        self.span(w, op.at, op.values_region_id, op.values_offset, 2 * op.count * op.value_size,
                  "values (2 x count scratch)")

    def op_runlength_encode(self, w, op):
        if op.value_count > _INT_MAX:
            self.err(w, f"value count {op.value_count} exceeds INT_MAX", op.at)
            return
        n = 4 * op.value_count
        self.span(w, op.at, op.values_region_id, op.values_offset, n, "values")
        self.span(w, op.at, op.run_values_region_id, op.run_values_offset, n, "run values")
        self.span(w, op.at, op.run_lengths_region_id, op.run_lengths_offset, n, "run lengths")
        self.span(w, op.at, op.run_count_region_id, op.run_count_offset, 4, "run count")

    def op_bsr_from_triplets(self, w, op):
        if min(op.block_size, op.scalar_size_in_bytes, op.row_count, op.col_count, op.nnz_upper_bound) < 0:
            self.err(w, "BSR counts must not be negative", op.at)
            return
        if self.layout.bsr_nnz_region:  # formats 13-15: where the replay writes the count (-1 if absent)
            self.span(w, op.at, op.bsr_nnz_region_id, op.bsr_nnz_offset, 4, "bsr_nnz", allow_absent=True)
        elif op.bsr_nnz_region_id != -1 or op.bsr_nnz_offset != 0:
            self.err(w, "legacy bsr_nnz region must be -1 with offset 0", op.at)
        ints = 4 * op.nnz_upper_bound
        values = op.nnz_upper_bound * op.block_size * op.scalar_size_in_bytes
        for name, nbytes, optional in (
                ("tpl_nnz", 4, True), ("tpl_rows", ints, False), ("tpl_columns", ints, False),
                ("tpl_values", values, True), ("summed_block_offsets", ints, False),
                ("summed_block_indices", ints, False), ("bsr_offsets", 4 * (op.row_count + 1), False),
                ("bsr_row_counts", 4 * op.row_count, True), ("bsr_columns", ints, False)):
            self.span(w, op.at, getattr(op, name + "_region_id"), getattr(op, name + "_offset"), nbytes, name,
                      allow_absent=optional)

    def op_bsr_transpose(self, w, op):
        if min(op.row_count, op.col_count, op.nnz_upper_bound) < 0:
            self.err(w, "BSR counts must not be negative", op.at)
            return
        # From format 14 a padded destination (transposed row counts given) appends its col_count + 1
        # capacity offsets; replay copies them into the destination offsets, and the last sizes its
        # columns.  Format 13 has no tail: Warp 1.15-1.18 read the capacity from the live offsets.
        padded = op.transposed_row_counts_region_id >= 0
        has_tail = padded and self.layout.bsr_transpose_tail
        tail = op.padded_tail
        if len(tail) != (op.col_count + 1 if has_tail else 0):
            self.err(w, f"record carries {len(tail)} capacity offsets; expected "
                        f"{op.col_count + 1 if has_tail else 0}", op.at)
            return
        ints = 4 * op.nnz_upper_bound
        capacity = ints
        if has_tail:
            prev = 0
            for v in tail:
                if v < prev:
                    self.err(w, "capacity offsets must ascend from 0", op.at)
                    return
                prev = v
            capacity = 4 * prev
        for name, nbytes, optional in (
                ("bsr_offsets", 4 * (op.row_count + 1), False), ("bsr_row_counts", 4 * op.row_count, True),
                ("bsr_columns", ints, False), ("transposed_offsets", 4 * (op.col_count + 1), False),
                ("transposed_row_counts", 4 * op.col_count, True), ("transposed_columns", capacity, False),
                ("block_indices", max(ints, capacity), False), ("status", 4, True)):
            self.span(w, op.at, getattr(op, name + "_region_id"), getattr(op, name + "_offset"), nbytes, name,
                      allow_absent=optional)

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


def validate_program(prog: m.Program, annotations=None) -> list:
    """Check a decoded program against Warp's loader rules and wrpkit's own.

    Args:
        prog: A program from any codec.
        annotations: The decoded form of ``prog.annotations``, for a writer
            that has just encoded them from it (``wrp upgrade``): it is
            checked in place of decoding the bytes, which needs the
            FlatBuffers runtime.  Leave it None for anything read from a file.

    Returns:
        A list of :class:`Problem`; empty when the program is valid.
    """
    c = _Checker(prog, annotations)
    c.metadata()
    for where, msg, severity in _legacy.metadata_problems(prog):
        c.err(where, msg, severity=severity)
    c.ops(prog.ops, "ops")
    from ..formats.launch_arrays import exceeded_launches, exceeded_message  # noqa: PLC0415

    for w, op, largest in exceeded_launches(prog.ops):
        c.err(w, exceeded_message(op, largest), op.at, severity="warning")
    if not any(p.severity == "error" for p in c.problems):
        from .memory import unreached_regions  # noqa: PLC0415

        regions = {r.region_id: i for i, r in enumerate(prog.regions)}
        for u in unreached_regions(prog):  # loading allocates what no op uses: an edited file?
            i = regions[u.region_id]
            c.err(f"regions[{i}].size", u.message(), getattr(prog.regions[i], "at", None), severity="warning")
    return c.problems


def backward_launched(prog: m.Program) -> set:
    """``{(module_hash, kernel_key)}`` of the kernels some backward launch runs."""
    return {(op.module_hash, op.kernel_key) for _, op in m.walk_ops(prog.ops)
            if isinstance(op, m.KernelLaunch) and not op.is_forward}


def kernel_symbols(prog: m.Program) -> dict:
    """``{module_hash: [symbol, ...]}`` a replay looks up: every forward symbol, and the
    backward symbols of kernels that a backward launch runs."""
    used = backward_launched(prog)
    out: dict = {}
    for k in prog.kernels:
        names = out.setdefault(k.module_hash, [])
        names.append(k.forward_name)
        if (k.module_hash, k.kernel_key) in used:
            names.append(k.backward_name)
    return out


def unused_backward_problems(prog: m.Program, files) -> list:
    """Warnings for backward symbols that no launch uses and that their module does not define."""
    from .elf import read_object  # noqa: PLC0415
    from ..errors import WrpError  # noqa: PLC0415

    used = backward_launched(prog)
    out = []
    infos: dict = {}
    for i, k in enumerate(prog.kernels):
        if not k.backward_name or (k.module_hash, k.kernel_key) in used:
            continue
        mod = next((mo for mo in prog.modules if mo.module_hash == k.module_hash), None)
        if mod is None or files.get(mod.binary_filename) is None or prog.device_type != m.DeviceType.CPU:
            continue
        if mod.binary_filename not in infos:
            try:
                infos[mod.binary_filename] = read_object(files[mod.binary_filename], mod.binary_filename)
            except WrpError:
                infos[mod.binary_filename] = None
        info = infos[mod.binary_filename]
        if info is not None and k.backward_name not in info.defined:
            out.append(Problem(f"kernels[{i}]", f"backward symbol {k.backward_name!r} of kernel {k.kernel_key!r} "
                                                f"is not defined in {mod.binary_filename!r}; no backward launch "
                                                "uses it, so it is never looked up", severity="warning"))
    return out


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
    from ..errors import WrpError  # noqa: PLC0415

    if prog.device_type != m.DeviceType.CPU:
        return []
    symbols = kernel_symbols(prog)
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
        capture: A :class:`wrpkit.formats.container.Capture`.

    Returns:
        A list of :class:`Problem`.
    """
    from ..formats.container import PRESENT, UNSAFE  # noqa: PLC0415

    prog = capture.program
    out = []
    files = {}
    required = set(prog.required_module_files())
    where = capture.modules_dir if capture.modules_dir is not None else "the bundle"
    for i, mod in enumerate(prog.modules):
        names = [mod.binary_filename] + ([mod.source_filename] if mod.source_filename else [])
        for name in names:
            state = capture.module_state(name)
            if state == PRESENT:
                if name == mod.binary_filename:
                    files[name] = capture.module_bytes(name)
            elif name in required or state == UNSAFE:
                _, message, hint = capture.module_problem(name)
                out.append(Problem(f"modules[{i}]", f"{message} (fix: {hint})"))
            else:
                # Warp's loader never reads it (see Program.required_module_files): the file loads without it.
                what = "exported source (Warp's compile fallback)" if name != mod.binary_filename else \
                    "binary of a module no kernel uses"
                out.append(Problem(f"modules[{i}]", f"module file {name!r}, the {what}, is {state} in {where}",
                                   severity="warning"))
    return (out + check_module_digests(prog, files) + check_module_symbols(prog, files)
            + unused_backward_problems(prog, files))


def check_module_digests(prog: m.Program, files, annotations=None) -> list:
    """Module files must match the SHA-256 wrpkit recorded in the annotations, when it recorded one.

    The one statement of this rule: ``wrp validate`` and the loader
    (:func:`wrpkit.run.prepare.prepare`) both apply it.

    Args:
        prog: The program.
        files: ``{binary_filename: bytes}`` of the module files there are.
        annotations: ``prog``'s decoded annotations, when the caller has them (read here otherwise).

    Returns:
        A list of :class:`Problem`, one per module file that does not match.
    """
    from ..formats.annotations import read_annotations  # noqa: PLC0415
    from ..errors import WrpError  # noqa: PLC0415

    ann = annotations
    if ann is None:
        try:
            ann = read_annotations(prog)
        except WrpError:
            return []  # reported by validate_program
    if ann is None:
        return []
    digests = ann.digest_map()
    out = []
    for i, mod in enumerate(prog.modules):
        d = digests.get(mod.binary_filename)
        data = files.get(mod.binary_filename)
        if d is not None and data is not None and not d.matches(data):
            out.append(Problem(f"modules[{i}]", f"module file {mod.binary_filename!r} does not match the SHA-256 "
                                                "recorded when the capture was saved"))
    return out


def validate_capture(capture) -> list:
    """All checks of :func:`validate_program` and :func:`validate_modules`."""
    return validate_program(capture.program) + validate_modules(capture)
