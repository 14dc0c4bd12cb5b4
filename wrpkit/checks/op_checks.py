"""Validation of the op list: the walk over it (nested IF/WHILE bodies included)
and the checks of every op type but KERNEL_LAUNCH (schema/VALIDATION-RULES.md,
"Operation semantics").  The bytes each op touches are the op table's
(``REGIONS`` of :mod:`wrpkit.ops`, a ``Length`` per reference), checked by
one loop (:meth:`OpChecks.spans`) after each op's own field checks, as the C++
validator does with the table generated from it.

:class:`OpChecks` is a mixin of the validator's checker
(:mod:`wrpkit.checks.validate`): it reads the state and reports through the
methods of :class:`wrpkit.checks.table_checks.TableChecks`, and dispatches each
op to its ``op_<type>`` method (KERNEL_LAUNCH's is in
:mod:`wrpkit.checks.launch_checks`).
"""

from __future__ import annotations

from .. import model as m
from ..apic_types import APIC_SCALAR_SIZE
from ..region_lengths import LengthError
from .table_checks import INT_MAX


def _regions_touched(ops) -> set:
    """Every region id an op list (nested bodies included) can read or write."""
    out = set()
    for _, op in m.walk_ops(ops):
        if isinstance(op, m.KernelLaunch):
            out.update(r.region_id for r in op.relocations if r.kind == m.RelocKind.DATA_PTR)
        else:
            # the op table's region references (wrpkit.ops REGIONS), as every tool reads them
            for ref in type(op).REGIONS or ():
                out.add(getattr(op, ref.region))
    return out


class OpChecks:
    """The op walk and the non-launch op checks (a mixin over
    :class:`~wrpkit.checks.table_checks.TableChecks`)."""

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

    def spans(self, w, op):
        """Check every region reference of the op's type in the op table: its bytes lie in its region
        (an optional reference with region -1 is absent).  A record's only region is named by its op."""
        for ref in type(op).REGIONS:
            what = op.op_type.name if ref.role == "region" else ref.role
            try:
                nbytes = ref.nbytes(op)
            except LengthError as e:
                self.err(w, f"{what}: its byte length cannot be formed: {e}", op.at)
                continue
            self.span(w, op.at, getattr(op, ref.region), getattr(op, ref.offset) if ref.offset else 0, nbytes,
                      what, allow_absent=ref.optional)

    def op_memcpy_h2d(self, w, op):
        if self.prog.device_type == m.DeviceType.CPU:
            # Warp's CPU replayer has no case for it: it would skip the copy and report success.
            self.err(w, "MEMCPY_H2D cannot be replayed on CPU (Warp would silently skip it)", op.at)
        self.spans(w, op)

    def op_memcpy_d2d(self, w, op):
        self.spans(w, op)

    op_memset = op_alloc = op_memtile = op_memcpy_d2d

    def op_if(self, w, op):
        self.spans(w, op)  # the condition

    def op_while(self, w, op):
        self.op_if(w, op)
        # A body that touches no byte of the condition's region can never end
        # the loop: Warp would spin until its 2^24-iteration guard.
        if op.cond_region_id not in _regions_touched(op.body):
            self.err(w, f"WHILE body never touches its condition region {op.cond_region_id}, so the loop could "
                        "not end", op.at)

    def op_scan(self, w, op):
        if op.dtype not in (1, 3, 5, 6):
            self.err(w, f"scan dtype {op.dtype} is not int32, int64, float32 or float64", op.at)
            return
        if op.length > INT_MAX:
            self.err(w, f"scan length {op.length} exceeds INT_MAX", op.at)
            return
        if op.length and (op.in_stride < 0 or op.out_stride < 0 or op.type_len <= 0):
            self.err(w, "scan strides must be >= 0 and type_len > 0", op.at)
            return
        self.spans(w, op)

    def op_segmented_sort(self, w, op):
        if op.dtype not in (1, 5):
            self.err(w, f"segmented sort key dtype {op.dtype} is not int32 or float32", op.at)
        if op.count > INT_MAX // 2 or op.num_segments > INT_MAX - 1:
            self.err(w, f"count {op.count} or segment count {op.num_segments} is too large", op.at)
            return
        # keys and values hold 2 x count (the sort's scratch); ends inferred from starts alias the
        # start array one int32 later (the table's Adjacent term)
        self.spans(w, op)

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
        if op.count > INT_MAX:
            self.err(w, f"radix sort count {op.count} exceeds INT_MAX", op.at)
            return
        self.spans(w, op)  # keys and values: 2 x count, the second half the sort's scratch

    def op_runlength_encode(self, w, op):
        if op.value_count > INT_MAX:
            self.err(w, f"value count {op.value_count} exceeds INT_MAX", op.at)
            return
        self.spans(w, op)

    def op_bsr_from_triplets(self, w, op):
        if min(op.block_size, op.scalar_size_in_bytes, op.row_count, op.col_count, op.nnz_upper_bound) < 0:
            self.err(w, "BSR counts must not be negative", op.at)
            return
        # Formats 13-15 may name where the replay writes the count (bsr_nnz, an optional reference);
        # from 16 on it must be -1 with offset 0.
        if not self.layout.bsr_nnz_region and (op.bsr_nnz_region_id != -1 or op.bsr_nnz_offset != 0):
            self.err(w, "legacy bsr_nnz region must be -1 with offset 0", op.at)
            return
        self.spans(w, op)

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
        prev = 0
        for v in tail:
            if v < prev:
                self.err(w, "capacity offsets must ascend from 0", op.at)
                return
            prev = v
        self.spans(w, op)  # the last capacity offset sizes the destination columns (TailLast)

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
            return
        if op.kind == 2 and op.input_b_region_id == -1:  # optional in the table only for a SUM
            self.err(w, "an INNER reduction needs its second input; input_b_region_id is -1", op.at)
            return
        for v in (op.input_a_offset, op.input_b_offset, op.output_offset, op.input_a_stride, op.input_b_stride):
            if v % s:
                self.err(w, f"reduction offsets and strides must be multiples of the {s}-byte scalar", op.at)
                break
        self.spans(w, op)  # a SUM writes type_len scalars, an INNER product one

    def _live_only(self, w, op):
        self.err(w, f"{op.op_type.name} records a process-local handle and cannot be replayed from a file "
                    "(Warp refuses to load it)", op.at)

    op_bvh_refit = op_bvh_rebuild = op_hash_grid_update = _live_only
