"""Validation rules that apply only to captures of older Warp releases (formats 3, 10, 13 to 16).

:mod:`wrpkit.checks.validate` (metadata) and :mod:`wrpkit.checks.launch_checks`
(launches) call these for a program whose
``format_version`` is below 18; every rule is listed in
``schema/VALIDATION-RULES.md`` ("Older formats").  wrp-replay's C++
validator applies the same rules (native/src/wrp1_validator.cpp and
wrp1_ops.cpp, driven by the per-format tables of wrp1_layouts.h), then
refuses to replay such a file and points to ``wrp upgrade``.  Rules on fields
a format cannot hold only fire for a ``.wrpk``, whose manifest could carry
them; the WRP1 decoder never produces them.
"""

from __future__ import annotations

from .. import model as m
from ..formats.wrp1_encode import metadata_outside_format
from ..formats.wrp1_layout import LAYOUTS

#: Warp 1.13 refuses a scalar argument larger than this (capture.py, "Scalar parameter too large").
MAX_LEGACY_SCALAR = 64


def metadata_problems(prog: m.Program) -> list:
    """``[(where, message, severity)]`` for a legacy program's metadata."""
    layout = LAYOUTS.get(prog.format_version)
    out = []
    if layout is None or layout.producer_version:
        return out
    out += [(where, message, "error") for where, message in metadata_outside_format(prog, layout)]
    if layout.kernels_by_key:
        seen = {}
        for i, k in enumerate(prog.kernels):
            if k.kernel_key in seen:
                out.append((f"kernels[{i}]", f"kernel key {k.kernel_key!r} is recorded twice; Warp "
                                             f"{layout.releases} keys kernels by key alone and would keep only "
                                             "the last", "error"))
            seen[k.kernel_key] = i
    return out


def launch_kernel(prog: m.Program, kernels_by_key: dict, op: m.KernelLaunch):
    """The kernel record a legacy loader resolves a launch to when (hash, key) has none: by key alone."""
    layout = LAYOUTS.get(prog.format_version)
    if layout is None or not layout.kernels_by_key:
        return None
    return kernels_by_key.get(op.kernel_key)


def launch_problems(prog: m.Program, regions: dict, op: m.KernelLaunch) -> list:
    """``[message]`` for one launch's format-3 argument descriptors (Warp 1.13's rules, plus bounds)."""
    layout = LAYOUTS.get(prog.format_version)
    out = []
    if layout is not None and "grid_stride" not in layout.launch.names and (op.grid_stride != 0
                                                                            or op.cluster_dim != 1):
        out.append(f"format {prog.format_version} records no grid_stride or cluster_dim (only 0 and 1 fit), found "
                   f"{op.grid_stride} and {op.cluster_dim}")
    if layout is None or not layout.legacy_args:
        if op.legacy_args or op.handle_offsets:
            out.append(f"format {prog.format_version} has no format-3 argument descriptors")
        return out
    if not op.is_forward:
        out.append("format 3 cannot hold a backward launch (Warp 1.13 refuses adjoint launches in capture)")
    if op.params or op.relocations or len(op.value_data):
        out.append("a format-3 launch records argument descriptors, not bindings or value data")
    indices = sorted(a.param_index for a in op.legacy_args)
    if indices != list(range(1, len(indices) + 1)):
        out.append(f"argument indices {indices} are not 1..{len(indices)}, each once")
    for j, a in enumerate(op.legacy_args):
        w = f"legacy_args[{j}]"
        if a.is_array:
            if a.region_id == -1:
                if a.ndim or a.byte_offset or any(a.shape) or any(a.strides) or a.element_size:
                    out.append(f"{w}: a None array (region -1) must have all other fields zero")
                continue
            if not 1 <= a.ndim <= 4:
                out.append(f"{w}: array ndim {a.ndim} is outside 1..4")
                continue
            r = regions.get(a.region_id)
            if r is None:
                out.append(f"{w}: array refers to region {a.region_id}, which does not exist")
                continue
            if any(s < 0 for s in a.shape[:a.ndim]) or any(a.shape[a.ndim:]) or any(a.strides[a.ndim:]):
                out.append(f"{w}: array shape {a.shape[:a.ndim]} is negative or has entries past ndim")
                continue
            if not a.element_size:
                out.append(f"{w}: array element size is 0")
                continue
            # The highest byte any index reaches, as Warp's strided addressing computes it.
            if all(a.shape[:a.ndim]):
                lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape[:a.ndim], a.strides[:a.ndim]))
                hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape[:a.ndim], a.strides[:a.ndim]))
                if a.byte_offset + lo < 0 or a.byte_offset + hi + a.element_size > r.size:
                    out.append(f"{w}: array reaches bytes {a.byte_offset + lo}..{a.byte_offset + hi + a.element_size} "
                               f"of region {a.region_id}, which has {r.size}")
        else:
            if a.region_id != -1 or a.ndim or a.element_size:
                out.append(f"{w}: a scalar descriptor must have region -1, ndim 0 and element size 0")
            if not 1 <= a.byte_offset <= MAX_LEGACY_SCALAR:
                out.append(f"{w}: scalar size {a.byte_offset} is outside 1..{MAX_LEGACY_SCALAR}")
    return out
