"""Validation of kernel launches: the launch record, its argument packing,
relocations, array descriptors, and the kernel's signature when wrpkit recorded
one (schema/VALIDATION-RULES.md, "Operation semantics", the Launch rows).

:class:`LaunchChecks` is a mixin of the validator's checker
(:mod:`wrpkit.checks.validate`): it reads the state and reports through the
methods of :class:`wrpkit.checks.table_checks.TableChecks`.
"""

from __future__ import annotations

from .. import model as m
from ..formats.annotations import strided_reach as _reach
from ..formats.launch_arrays import (ARRAY_BYTES, DescriptorLayoutError, argument_arrays, descriptor_view,
                                     index_counts)
from ..formats.wrp1_layout import CURRENT_FORMAT
from . import legacy as _legacy

_ALIGNMENTS = (0, 1, 2, 4, 8, 16, 32, 64)

#: Cap on the threads of one launch (Warp's launch bounds are 32-bit per dim;
#: a launch of 2^40 threads would run for hours).
MAX_LAUNCH_THREADS = 1 << 32


class LaunchChecks:
    """The KERNEL_LAUNCH checks (a mixin over :class:`~wrpkit.checks.table_checks.TableChecks`)."""

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
            if not a.ndim or a.dtype is None or p.value_size < ARRAY_BYTES or not rels:
                continue
            data = rels[0]
            base = p.value_offset
            if data.kind != m.RelocKind.DATA_PTR or data.value_byte_offset != 0 or base + ARRAY_BYTES > len(op.value_data):
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
