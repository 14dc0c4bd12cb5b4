"""Rewrite a capture of an older APIC format as the current one (format 18).

This is the pure record rewriting of ``wrp upgrade``; nothing here needs
Warp.  :func:`upgrade_program` takes a decoded program of format 10 to 16
(or 3, together with kernels rebuilt by the installed Warp, see
:mod:`wrpkit.run.load.upgrade`) and returns the format-18 program plus a report
of what it changed.  Region data is shared with the input, never copied.

What changes, per format (README "Keeping captures across Warp upgrades"):

* metadata: format 18, the producer Warp version, CPU module extras (empty
  digests, kind NONE, fallback SOURCE_UNAVAILABLE, zero recipe), pointer
  locations get their slot count (old semantics: stride 0 is one slot, else
  every stride to the end of the region);
* kernel records of formats 3 and 10 say ``block_dim`` 256 on CPU (the
  Python default, unread by every CPU loader); they become 1, what 1.15 and
  later write;
* launches of formats 3 and 10 gain grid_stride 0 / cluster_dim 1 (the model
  already holds these); IF/WHILE branch sizes are recomputed by the encoder;
* BSR_FROM_TRIPLETS before 16: the legacy ``bsr_nnz`` slot becomes -1/0;
* BSR_TRANSPOSE of format 13 into a padded destination gains the capacity
  tail format 14 added, read from the capture's memory snapshot of the
  destination offsets (what Warp 1.15-1.18 read at replay when nothing had
  changed them), so Warp 1.19 can restore and bounds-check the capacity;
* formats 3 and 10 key kernels by kernel key alone, so a second module's
  kernel of the same key has no record and Warp 1.13/1.14 ran the first
  module's kernel for it.  ``collision="producer"`` (the default) keeps that
  behaviour by pointing the launch at the recorded kernel;
  ``collision="intent"`` adds a record for the launch's own module, which
  runs the kernel the code asked for (what 1.15 and later do);
* format 3's argument descriptors are re-encoded as bindings, relocations and
  a value blob laid out like the kernel's C argument struct, for kernels
  rebuilt by the installed Warp (the descriptors do not record scalar
  alignment; it comes from the rebuilt kernel's argument types).
"""

from __future__ import annotations

import struct
from typing import Callable, Mapping, Optional

from ..records import field, record, replace
from .. import model as m
from ..errors import WrpError
from .wrp1_layout import CURRENT_FORMAT, LAYOUTS, describe_format

#: ``--collision`` choices; the first is the default.
COLLISION_POLICIES = ("producer", "intent")

#: Warp's ``array_t`` on 64-bit hosts: data, grad, shape i32[4], strides i32[4],
#: ndim u16, flags u16, 4 bytes of tail padding.
ARRAY_T = struct.Struct("<QQ4i4iHH4x")
ARRAY_T_ALIGN = 8


@record(frozen=True)
class ArgSpec:
    """One kernel argument as the installed Warp packs it.

    Attributes:
        name: Argument name (for messages).
        is_array: A ``wp.array`` (packed as ``array_t``).
        size: ``ctypes.sizeof`` of the packed value.
        align: ``ctypes.alignment`` of the packed value.
    """

    name: str
    is_array: bool
    size: int
    align: int


@record(frozen=True)
class RebuiltKernel:
    """A kernel compiled by the installed Warp, to replace a format-3 one."""

    kernel_key: str
    module_hash: str
    module_name: str
    binary_filename: str
    forward_name: str
    backward_name: str
    block_dim: int
    args: tuple


@record
class KernelRoute:
    """Which route one kernel's module took in an upgrade.

    ``route`` is ``"kept"`` (the original object, unchanged), ``"rebuilt"``
    (compiled by the installed Warp from ``--kernels``),
    ``"collision:producer"`` or ``"collision:intent"``.
    """

    kernel_key: str
    module_hash: str
    binary_filename: str
    route: str
    detail: str = ""


@record
class UpgradeReport:
    """What :func:`upgrade_program` did."""

    source_format: int
    target_format: int
    producer_version: str
    collision: str
    kernels: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    #: ``{binary_filename in the output: binary_filename in the input, or None when rebuilt}``.
    module_sources: dict = field(default_factory=dict)

    @property
    def source(self) -> str:
        return describe_format(self.source_format)


def find_collisions(prog: m.Program) -> list:
    """Launches whose (module hash, kernel key) has no kernel record but whose key has one.

    Returns:
        ``[(launch, recorded Kernel), ...]`` in stream order (one per launch).
    """
    kernels = {(k.module_hash, k.kernel_key) for k in prog.kernels}
    by_key = {}
    for k in prog.kernels:
        by_key.setdefault(k.kernel_key, k)
    out = []
    for _, op in m.walk_ops(prog.ops):
        if isinstance(op, m.KernelLaunch) and (op.module_hash, op.kernel_key) not in kernels:
            k = by_key.get(op.kernel_key)
            if k is not None:
                out.append((op, k))
    return out


def _pointer_count(pl: m.PointerLocation, regions: dict) -> int:
    if pl.stride == 0:
        return 1
    r = regions.get(pl.region_id)
    if r is None or pl.offset + 8 > r.size:
        return 0
    return (r.size - pl.offset - 8) // pl.stride + 1


def _map_ops(ops: list, fn) -> list:
    """``ops`` with ``fn`` applied to every leaf (nested bodies included); unchanged objects are kept."""
    out = []
    for op in ops:
        if isinstance(op, m.If):
            op = replace(op, then_ops=_map_ops(op.then_ops, fn), else_ops=_map_ops(op.else_ops, fn))
        elif isinstance(op, m.While):
            op = replace(op, body=_map_ops(op.body, fn))
        else:
            op = fn(op)
        out.append(op)
    return out


def encode_legacy_args(op: m.KernelLaunch, kernel: RebuiltKernel) -> m.KernelLaunch:
    """Re-encode a format-3 launch's argument descriptors for ``kernel``.

    Raises:
        WrpError: The descriptors do not match the kernel's arguments.
    """
    args = sorted(op.legacy_args, key=lambda a: a.param_index)
    if [a.param_index for a in args] != list(range(1, len(kernel.args) + 1)):
        raise WrpError(f"launch of {op.kernel_key!r} records arguments {[a.param_index for a in args]}, but the "
                       f"rebuilt kernel takes {len(kernel.args)}",
                       hint="Pass the module that defined the kernel when the capture was made.")
    value = bytearray()
    params, relocs = [], []
    for a, spec in zip(args, kernel.args):
        if bool(a.is_array) != spec.is_array:
            raise WrpError(f"argument {a.param_index} ({spec.name}) of {op.kernel_key!r} is "
                           f"{'an array' if a.is_array else 'a scalar'} in the capture but "
                           f"{'an array' if spec.is_array else 'a scalar'} in the rebuilt kernel",
                           hint="Pass the module that defined the kernel when the capture was made.")
        align = ARRAY_T_ALIGN if spec.is_array else max(spec.align, 1)
        value += bytes(-len(value) % align)
        off = len(value)
        if spec.is_array:
            if spec.size != ARRAY_T.size:
                raise WrpError(f"the installed Warp packs arrays in {spec.size} bytes, not {ARRAY_T.size}")
            nd = a.ndim if a.region_id >= 0 else 0
            shape = [int(a.shape[d]) if d < nd else 0 for d in range(4)]
            strides = [int(a.strides[d]) if d < nd else 0 for d in range(4)]
            value += ARRAY_T.pack(0, 0, *shape, *strides, nd, 0)
            if a.region_id >= 0:
                relocs.append(m.Relocation(0, a.region_id, a.byte_offset, m.RelocKind.DATA_PTR))
            else:
                relocs.append(m.Relocation(0, -1, 0, m.RelocKind.NULL_PTR))
            relocs.append(m.Relocation(8, -1, 0, m.RelocKind.NULL_PTR))
            params.append(m.LaunchParam(a.param_index, 2, off, ARRAY_T.size, ARRAY_T_ALIGN))
        else:
            if a.byte_offset != spec.size:
                raise WrpError(f"argument {a.param_index} ({spec.name}) of {op.kernel_key!r} has {a.byte_offset} "
                               f"bytes in the capture but {spec.size} in the rebuilt kernel",
                               hint="Pass the module that defined the kernel when the capture was made.")
            value += a.scalar_bytes()
            params.append(m.LaunchParam(a.param_index, 0, off, spec.size, align))
    return replace(op, module_hash=kernel.module_hash, params=params, adjoint_params=[], relocations=relocs,
                   value_data=bytes(value), legacy_args=[], handle_offsets=[], grid_stride=0, cluster_dim=1)


def upgrade_program(prog: m.Program, producer_version: str, *, collision: str = "producer",
                    rebuilt: Optional[Mapping] = None,
                    forward_symbol: Optional[Callable[[m.Module, str], Optional[str]]] = None) -> tuple:
    """Rewrite a decoded program of an older format as format 18.

    Args:
        prog: The decoded program (any format :mod:`wrpkit.formats.wrp1` reads).
        producer_version: The Warp version to record (the installed one; Warp
            1.19 loads only captures that name its own version).
        collision: ``"producer"`` or ``"intent"``: how a format-3/10 kernel-key
            collision is resolved (see the module docstring).
        rebuilt: :class:`RebuiltKernel` list; required for format 3, whose
            kernel objects the current Warp cannot call.  A launch is matched
            by kernel key (and, when several modules define the key, by the
            recorded module name); block dims must agree.
        forward_symbol: ``(module, kernel_key, backward=False) -> symbol or
            None``: the forward (or backward) symbol a module's object defines
            for a key; needed by ``collision="intent"`` for formats 10.

    Returns:
        ``(program, UpgradeReport)``.  The program shares region data with ``prog``.

    Raises:
        WrpError: Format 3 without rebuilt kernels for all its keys, an unknown
            collision policy, or a collision ``intent`` cannot resolve.
    """
    if collision not in COLLISION_POLICIES:
        raise WrpError(f"unknown collision policy {collision!r}; choose one of {', '.join(COLLISION_POLICIES)}")
    src = prog.format_version
    layout = LAYOUTS[src]
    report = UpgradeReport(src, CURRENT_FORMAT, producer_version, collision)
    cpu = prog.device_type == m.DeviceType.CPU
    mods_by_hash = {mod.module_hash: mod for mod in prog.modules}

    def new_module(mod: m.Module) -> m.Module:
        if src == CURRENT_FORMAT:
            return replace(mod, binary=None, source=None)
        return m.Module(mod.module_hash, mod.module_name, mod.binary_filename, mod.target_arch)

    if layout.legacy_args:
        return _upgrade_format3(prog, producer_version, list(rebuilt or ()), collision, report)

    kernels = []
    for k in prog.kernels:
        k = replace(k)
        if layout.kernels_by_key and cpu and k.block_dim == 256:
            k.block_dim = 1
        kernels.append(k)
    if layout.kernels_by_key and cpu and prog.kernels:
        report.notes.append("kernel records: block_dim 256 (what Warp 1.13/1.14 wrote on CPU, read by no CPU "
                            "loader) normalised to 1, what Warp 1.15 and later write")
    redirect = {}
    regions = {r.region_id: r for r in prog.regions}
    for op, k in find_collisions(prog) if layout.kernels_by_key else []:
        pair = (op.module_hash, op.kernel_key)
        if pair in redirect:
            continue
        orphan = mods_by_hash.get(op.module_hash)
        if collision == "producer":
            redirect[pair] = k.module_hash
            report.kernels.append(KernelRoute(
                op.kernel_key, k.module_hash, mods_by_hash[k.module_hash].binary_filename, "collision:producer",
                f"launches of {op.kernel_key!r} from module {orphan.module_name if orphan else op.module_hash[:12]} "
                f"run module {mods_by_hash[k.module_hash].module_name}'s kernel, as Warp {layout.releases} "
                "replayed them"))
            continue
        sym = forward_symbol(orphan, op.kernel_key) if (orphan is not None and forward_symbol) else None
        if sym is None:
            raise WrpError(f"kernel {op.kernel_key!r} of module {op.module_hash[:12]} has no kernel record and its "
                           "forward symbol cannot be found in the module's object",
                           hint="Upgrade with --collision producer, which replays what the producing Warp did.")
        back = sym[:-len("_forward")] + "_backward" if sym.endswith("_forward") else ""
        if back and forward_symbol(orphan, op.kernel_key, backward=True) is None:
            back = ""
        kernels.append(m.Kernel(op.kernel_key, op.module_hash, sym, back, 0, 0, 1))
        redirect[pair] = op.module_hash
        report.kernels.append(KernelRoute(
            op.kernel_key, op.module_hash, orphan.binary_filename, "collision:intent",
            f"added a kernel record for module {orphan.module_name} ({sym}): each launch runs its own module's "
            "kernel, as Warp 1.15 and later do"))

    def leaf(op):
        if isinstance(op, m.KernelLaunch):
            to = redirect.get((op.module_hash, op.kernel_key))
            if to is not None and to != op.module_hash:
                return replace(op, module_hash=to)
        elif isinstance(op, m.BsrFromTriplets) and src < 16 and op.bsr_nnz_region_id != -1:
            return replace(op, bsr_nnz_region_id=-1, bsr_nnz_offset=0)
        elif (isinstance(op, m.BsrTranspose) and not layout.bsr_transpose_tail
              and op.transposed_row_counts_region_id >= 0):
            return replace(op, padded_tail=_snapshot_capacity(op, regions, report))
        return op

    ops = _map_ops(prog.ops, leaf) if (redirect or src < 16) else list(prog.ops)
    routed = {(r.kernel_key, r.module_hash) for r in report.kernels}
    for k in kernels:
        if (k.kernel_key, k.module_hash) not in routed:
            mod = mods_by_hash.get(k.module_hash)
            report.kernels.append(KernelRoute(k.kernel_key, k.module_hash, mod.binary_filename if mod else "",
                                              "kept", "original object, unchanged"))
    modules = [new_module(mod) for mod in prog.modules]
    report.module_sources = {mod.binary_filename: mod.binary_filename for mod in modules}
    out = _assemble(prog, producer_version, modules, kernels, ops)
    return out, report


def _snapshot_capacity(op: m.BsrTranspose, regions: dict, report: "UpgradeReport") -> tuple:
    """The ``col_count + 1`` capacity offsets of a format-13 padded transpose, from the memory snapshot.

    Raises:
        WrpError: The snapshot does not hold the destination offsets.
    """
    n = op.col_count + 1
    r = regions.get(op.transposed_offsets_region_id)
    start = op.transposed_offsets_offset
    if r is None or not r.has_initial_data or r.data is None or start + 4 * n > len(r.data):
        raise WrpError(
            f"BSR_TRANSPOSE at byte {op.at}: format 13 records no capacity offsets for its padded destination, and "
            f"the capture's memory snapshot holds none for region {op.transposed_offsets_region_id} either, so "
            "format 18 cannot say what Warp 1.15-1.18 would have read",
            hint="Recapture the program with the installed Warp.")
    note = ("BSR_TRANSPOSE (padded destination): format 13 records no capacity offsets; the upgrade took them from "
            "the memory snapshot of the destination offsets, which Warp 1.15-1.18 read at replay unless the graph or "
            "the caller had changed them; Warp 1.19 restores them before each transpose (GH-1587)")
    if note not in report.notes:
        report.notes.append(note)
    return struct.unpack_from(f"<{n}i", r.data, start)


def _assemble(prog, producer_version, modules, kernels, ops) -> m.Program:
    regions = {r.region_id: r for r in prog.regions}
    ptrs = [pl if prog.format_version == CURRENT_FORMAT
            else m.PointerLocation(pl.region_id, pl.offset, pl.stride, _pointer_count(pl, regions))
            for pl in prog.pointer_locations]
    return m.Program(CURRENT_FORMAT, producer_version, prog.device_type, prog.target_arch, modules, kernels,
                     list(prog.bindings), list(prog.meshes), ptrs, list(prog.regions), ops, b"")


def _pick_rebuilt(rebuilt, key: str, module_name: Optional[str]):
    cands = [rk for rk in rebuilt if rk.kernel_key == key]
    named = [rk for rk in cands if rk.module_name == module_name]
    if named:
        return named[0]
    if len(cands) == 1:
        return cands[0]
    if not cands:
        return None
    raise WrpError(f"kernel {key!r} is defined in several --kernels modules "
                   f"({', '.join(rk.module_name for rk in cands)}) and none is named {module_name!r}, the module "
                   "the capture recorded", hint="Pass only the module that defined the kernel.")


def _upgrade_format3(prog, producer_version, rebuilt, collision, report) -> tuple:
    records = {k.kernel_key: k for k in prog.kernels}
    names = {mod.module_hash: mod.module_name for mod in prog.modules}
    chosen, missing = {}, []
    for _, op in m.walk_ops(prog.ops):
        if not isinstance(op, m.KernelLaunch) or (op.module_hash, op.kernel_key) in chosen:
            continue
        rec = records.get(op.kernel_key)
        if collision == "producer" and rec is not None:
            want = names.get(rec.module_hash)  # Warp 1.13 ran the recorded kernel of this key
        else:
            want = names.get(op.module_hash)
        rk = _pick_rebuilt(rebuilt, op.kernel_key, want)
        if rk is None:
            if op.kernel_key not in missing:
                missing.append(op.kernel_key)
            continue
        if rec is not None and rec.block_dim != rk.block_dim:
            raise WrpError(f"kernel {op.kernel_key!r} was recorded with block_dim {rec.block_dim} but the rebuilt "
                           f"kernel has {rk.block_dim}", hint="Pass the module with the kernel's original options.")
        chosen[(op.module_hash, op.kernel_key)] = rk
    if missing:
        raise WrpError(
            f"this capture is {describe_format(3)}: its kernel objects use Warp 1.13's launch ABI "
            f"(launch_bounds_t without a template argument), which Warp {producer_version} cannot call, so "
            f"they are never kept.  Kernel(s) {', '.join(repr(k) for k in missing)} must be rebuilt by the "
            "installed Warp from their Python source, matched by kernel key and block dim",
            hint="Pass the module(s) that define them: wrp upgrade IN OUT --kernels my_kernels.py")

    def leaf(op):
        if isinstance(op, m.KernelLaunch):
            return encode_legacy_args(op, chosen[(op.module_hash, op.kernel_key)])
        return op

    ops = _map_ops(prog.ops, leaf)
    modules, kernels, seen_m, seen_k = [], [], set(), set()
    collided = {pair for pair, rk in chosen.items() if (records.get(pair[1]) is not None
                                                          and records[pair[1]].module_hash != pair[0])}
    for pair, rk in chosen.items():
        if rk.module_hash not in seen_m:
            seen_m.add(rk.module_hash)
            modules.append(m.Module(rk.module_hash, rk.module_name, rk.binary_filename, 0))
            report.module_sources[rk.binary_filename] = None
        if (rk.module_hash, rk.kernel_key) in seen_k:
            continue
        seen_k.add((rk.module_hash, rk.kernel_key))
        kernels.append(m.Kernel(rk.kernel_key, rk.module_hash, rk.forward_name, rk.backward_name, 0, 0, 1))
        route = "rebuilt"
        detail = f"compiled by Warp {producer_version} from module {rk.module_name}"
        if pair in collided or any(p in collided for p, r in chosen.items() if r is rk):
            route = f"rebuilt, collision:{collision}"
        report.kernels.append(KernelRoute(rk.kernel_key, rk.module_hash, rk.binary_filename, route, detail))
    if collided:
        report.notes.append(
            "format 3 keys kernels by kernel key alone: Warp 1.13 ran the recorded kernel for launches of the "
            "same key from another module; " + (
                "kept (collision: producer)" if collision == "producer"
                else "each launch now runs its own module's kernel (collision: intent)"))
    report.notes.append("format 3 kernel objects were dropped (Warp 1.13 launch ABI); arguments were re-encoded "
                        "as bindings, relocations and value blobs laid out for the rebuilt kernels")
    return _assemble(prog, producer_version, modules, kernels, ops), report
