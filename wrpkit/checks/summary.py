"""What ``wrp inspect`` reports, as plain data with stable keys.

:func:`summarize` turns an opened capture into a JSON-ready ``dict``; the CLI
formats it as tables or prints it as JSON.  Nothing here imports Warp or
numpy, and nothing reads region or module contents (only their sizes), so
inspecting a large file touches only its records.
"""

from __future__ import annotations

from .. import model as m
from ..binding_roles import binding_roles
from ..formats.container import Capture
from .effects import argument_name, effects, kernel_names, kernel_signatures, launch_argument, launch_label
from ..formats.wrp1_layout import FILE_HEADER_SIZE, SECTION_ENTRY, SECTION_ENTRY_SIZE

_SECTION_NAMES = {1: "METADATA", 2: "MEMORY", 3: "OPERATIONS", 0x41505257: "ANNOTATIONS"}


def _sections(cap: Capture) -> list:
    buf = cap.mapped.buffer
    if cap.kind == "json":
        return [{"name": "JSON", "offset": 0, "size": cap.mapped.size}]
    if cap.kind == "wrp":
        n = int.from_bytes(buf[12:16], "little")
        out = [{"name": "HEADER", "offset": 0, "size": FILE_HEADER_SIZE},
               {"name": "SECTION_TABLE", "offset": FILE_HEADER_SIZE, "size": n * SECTION_ENTRY_SIZE}]
        for i in range(n):
            t, _, off, size, _ = SECTION_ENTRY.unpack_from(buf, FILE_HEADER_SIZE + i * SECTION_ENTRY_SIZE)
            out.append({"name": _SECTION_NAMES.get(t, str(t)), "offset": off, "size": size})
        return out
    from ..formats.wrpk.blobs import read_header  # noqa: PLC0415

    h = read_header(buf)
    return [{"name": "HEADER", "offset": 0, "size": h.manifest_offset},
            {"name": "MANIFEST", "offset": h.manifest_offset, "size": h.manifest_size},
            {"name": "BLOB_AREA", "offset": h.blob_area_offset, "size": h.blob_area_size}]


def _value(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v[:32])
        return {"length": len(v), "hex": b.hex() + ("..." if len(v) > 32 else "")}
    if isinstance(v, tuple) and v and hasattr(v, "_asdict"):
        return dict(v._asdict())
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    if isinstance(v, bool):
        return v
    return v


def op_record(op: m.Op, program: m.Program | None = None, signatures: dict | None = None,
              names: dict | None = None, sources=None, path: tuple = ()) -> dict:
    """One op as a JSON-ready dict: ``{"op": NAME, "offset": byte, ...fields}``, nested bodies included.

    With ``program``, each op also lists the byte ranges it ``reads`` and
    ``writes`` (:func:`wrpkit.checks.effects.effects`: ``{"region", "offset",
    "bytes", "name", "mode"}``) and each KERNEL_LAUNCH its ``args`` (see
    :func:`launch_args`).  With ``sources`` (a
    :class:`wrpkit.checks.sources.Sources`) and the op's ``path``, each op has
    its ``source``: where the program issued it (``{"file", "line",
    "function", "stack"}``), or None when the capture does not say.
    """
    d = {"op": op.op_type.name, "offset": op.at}
    if sources is not None:
        d["source"] = sources.op(path) if path else None
    for name in m.op_fields(type(op)):
        v = getattr(op, name)
        if name in ("then_ops", "else_ops", "body"):
            sub = path + (1 if name == "else_ops" else 0,)
            d[name] = [op_record(x, program, signatures, names, sources, sub + (i,) if path else ())
                       for i, x in enumerate(v)]
        elif name in ("params", "adjoint_params", "relocations"):
            d[name] = [dict(x._asdict()) for x in v]
        else:
            d[name] = _value(v)
    if program is not None:
        fx = effects(op, program, signatures)
        d["reads"] = [_access_row(a) for a in fx.reads]
        d["writes"] = [_access_row(a) for a in fx.writes]
        if isinstance(op, m.KernelLaunch):
            d["args"] = launch_args(op, program, signatures, names)
    return d


def _access_row(a) -> dict:
    return {"region": a.region_id, "offset": a.offset, "bytes": a.nbytes, "name": a.name, "mode": a.mode}


def launch_args(op: m.KernelLaunch, program: m.Program, signatures: dict | None = None,
                names: dict | None = None) -> list:
    """One row per kernel argument of a launch, for ``wrp inspect --ops --json``.

    An array argument has a row per array it passes (a struct argument one
    per array field, named ``s.field``); a scalar argument one row.

    Args:
        op: The launch.
        program: Its program.
        signatures: ``{(module_hash, kernel_key): KernelSignature}`` (default: the file's).
        names: :func:`region_names` (default: computed).

    Returns:
        ``[{"name", "type", "access", "region", "binding"}]``: ``access`` is
        ``"read"``, ``"write"``, ``"readwrite"``, ``"unused"`` or ``"touches"``
        (the file does not say); a scalar is ``"read"`` (passed by value) with
        ``region`` and ``binding`` None; ``binding`` is the name binding the
        region (names joined by ``/``), None for an unbound array.
    """
    sigs = signatures if signatures is not None else kernel_signatures(program)
    fx = effects(op, program, sigs)
    sig = sigs.get((op.module_hash, op.kernel_key))
    args = sig.arguments if sig is not None else ()
    names = names if names is not None else region_names(program)
    by_param: dict = {}
    for a in fx.accesses:
        if a.part == "data":
            by_param.setdefault(a.param, []).append(a)
    rows = []
    for p in op.params:
        ka = launch_argument(args, p)
        name = argument_name(args, p.param_index)
        typ = ka.type if ka is not None else None
        accs = by_param.get(p.param_index)
        if accs:
            for a in accs:
                t = _field_type(ka.dtype, a.field) if a.field and ka is not None else None
                rows.append({"name": a.name, "type": t or typ, "access": a.mode, "region": a.region_id,
                             "binding": names.get(a.region_id)})
        elif p.num_relocs or (ka is not None and ka.ndim):
            # an array passed as None (null pointers), or a handle: no region is touched
            rows.append({"name": name, "type": typ, "access": "unused", "region": None, "binding": None})
        else:
            rows.append({"name": name, "type": typ, "access": "read", "region": None, "binding": None})
    return rows


def _field_type(dtype, path: str):
    """The type name of a (dotted) struct field."""
    for part in path.split("."):
        hit = next((f for f in dtype.fields if f.name == part), None) if dtype is not None else None
        if hit is None:
            return None
        dtype = hit.type
    return dtype.name if dtype is not None else None


def shape_text(shape) -> str:
    """A shape written one way everywhere (as numpy does): ``(1024,)``, ``(256, 3)``, ``()``."""
    return str(tuple(int(x) for x in shape))


def region_names(prog: m.Program) -> dict:
    """``{region_id: "name"}`` of the regions bindings name (names joined by ``/``)."""
    out: dict = {}
    for b in prog.resolved_bindings():
        names = out.setdefault(b.region_id, [])
        if b.name not in names:
            names.append(b.name)
    return {r: "/".join(n) for r, n in out.items()}


def launch_access(op: m.KernelLaunch, program: m.Program, signatures: dict | None = None) -> list:
    """``[(argument name, mode, region id)]`` for each array a launch passes (from :func:`effects`).

    ``mode`` is ``"read"``, ``"write"``, ``"readwrite"``, ``"unused"`` or
    ``"touches"`` where the file does not say.  A backward launch lists each array's gradient
    too (``x.grad``): what it writes are the gradients (:data:`~wrpkit.checks.effects.ADJOINT_MODES`).
    """
    return [(a.name if a.part == "data" else f"{a.name}.grad", a.mode, a.region_id)
            for a in effects(op, program, signatures).accesses if a.part == "data" or (a.part == "grad" and not op.is_forward)]


def op_line(op: m.Op, signatures: dict | None = None, names: dict | None = None,
            program: m.Program | None = None) -> str:
    """A one-line description of an op's key fields, for ``wrp inspect --ops``.

    Args:
        op: The op.
        signatures: ``{(module_hash, kernel_key): KernelSignature}`` from the
            annotations; with it a launch lists what it does to each array.
        names: :func:`region_names`; with it, each region an argument points
            to is followed by the binding that names it, ``x=read@r1(x)``.
    """
    t = op.op_type
    if t == m.OpType.KERNEL_LAUNCH:
        line = (f"{launch_label(op, program)} dim={shape_text(op.shape[:max(op.ndim, 1)])} threads={op.size} "
                f"args={len(op.params)} relocs={len(op.relocations)} value_bytes={len(op.value_data)}")
        if program is not None:
            acc = launch_access(op, program, signatures)
            if acc:
                names = names or {}
                line += " " + " ".join(f"{n}={w}@r{rid}" + (f"({names[rid]})" if rid in names else "")
                                       for n, w, rid in acc)
        return line
    if t in (m.OpType.IF, m.OpType.WHILE):
        body = (f"then={len(op.then_ops)} else={len(op.else_ops)}" if t == m.OpType.IF
                else f"body={len(op.body)}")
        return f"cond=region {op.cond_region_id}+{op.cond_offset} {body}"
    if t == m.OpType.MEMCPY_D2D:
        return f"{op.size} B region {op.src_region_id}+{op.src_offset} -> region {op.dst_region_id}+{op.dst_offset}"
    if t == m.OpType.MEMSET:
        return f"{op.size} B of {op.value:#04x} -> region {op.region_id}+{op.offset}"
    if t == m.OpType.MEMTILE:
        return f"{op.count} x {len(op.value)} B value {bytes(op.value[:16]).hex()} -> region {op.region_id}+{op.offset}"
    if t == m.OpType.MEMCPY_H2D:
        return f"{len(op.data)} B inline -> region {op.dst_region_id}+{op.dst_offset}"
    skip = {"at"}
    parts = []
    for name in m.op_fields(type(op)):
        if name in skip:
            continue
        v = getattr(op, name)
        if isinstance(v, (tuple, list)) and len(v) > 8:
            v = f"[{len(v)} items]"
        parts.append(f"{name}={v}")
    return " ".join(parts)


def iter_op_lines(ops, depth: int = 0, path: str = "", signatures: dict | None = None, names: dict | None = None,
                  program: m.Program | None = None, sources=None):
    """Yield ``(depth, index_path, name, line)`` for every op, nested bodies indented.

    With ``signatures`` and ``names`` (see :func:`op_line`) launches list their
    array access and the binding each argument points to; with ``sources``
    (:class:`wrpkit.checks.sources.Sources`) each line ends with where the
    program issued the op, ``at sim.py:42 in step()``.
    """
    for i, op in enumerate(ops):
        ip = f"{path}{i}"
        line = op_line(op, signatures, names, program)
        if sources is not None and sources.has_call_sites:
            where = sources.op_where(ip)
            if where:
                line += f"  at {where}"
        yield depth, ip, op.op_type.name, line
        if isinstance(op, m.If):
            if op.then_ops:
                yield depth + 1, "", "then:", ""
                yield from iter_op_lines(op.then_ops, depth + 2, ip + ".", signatures, names, program, sources)
            if op.else_ops:
                yield depth + 1, "", "else:", ""
                yield from iter_op_lines(op.else_ops, depth + 2, ip + ".e", signatures, names, program, sources)
        elif isinstance(op, m.While):
            yield from iter_op_lines(op.body, depth + 1, ip + ".", signatures, names, program, sources)


def binding_signature_rows(prog: m.Program):
    """``{binding: {"dtype": name, "shape": [...]}}`` from wrpkit's annotations, or None."""
    if not prog.annotations:
        return None
    try:
        from ..formats.annotations import read_annotations  # noqa: PLC0415

        ann = read_annotations(prog)
    except ImportError:
        return None
    if ann is None:
        return None
    return {s.name: {"dtype": s.dtype.name if s.dtype is not None else None, "shape": list(s.shape),
                     "input": bool(s.is_input), "output": bool(s.is_output)}
            for s in ann.signature}


def _region_rows(p: m.Program) -> list:
    """One row per region, named and typed by :func:`wrpkit.checks.region_types.region_types`."""
    from .region_types import region_types  # noqa: PLC0415

    types = region_types(p)
    rows = []
    for r in p.regions:
        rt = types[r.region_id]
        rows.append({"region_id": r.region_id, "size": r.size, "element_size": r.element_size,
                     "has_initial_data": r.has_initial_data, "name": rt.name,
                     "dtype": rt.dtype.name if rt.dtype is not None else None,
                     "shape": list(rt.shape) if rt.dtype is not None and rt.shape is not None else None,
                     "type_source": rt.source, "conflicts": list(rt.conflicts)})
    return rows


def producer_text(p: m.Program) -> str:
    """Which Warp wrote the file: its recorded version, or for a format that records none the releases
    that write that format (``"1.16.0 or 1.17.0 (format 15 records no version)"``)."""
    if p.warp_version:
        return p.warp_version
    from ..formats.wrp1_layout import LAYOUTS  # noqa: PLC0415

    layout = LAYOUTS.get(p.format_version)
    releases = " or ".join(r.strip() for r in layout.releases.split(",")) if layout and layout.releases else ""
    return (f"{releases} (format {p.format_version} records no version)" if releases
            else f"unknown (format {p.format_version} records no version)")


def summarize(cap: Capture, *, with_ops: bool = False, signature: dict | None = None, sources=None) -> dict:
    """Summarize a capture for ``wrp inspect``.

    Args:
        cap: An opened capture.
        with_ops: Include every op (``"ops"``), nested bodies included.
        signature: Optional ``{binding name: {"dtype": ..., "shape": [...]}}``
            to merge into the binding rows.
        sources: A :class:`wrpkit.checks.sources.Sources` (by default the
            capture's own): each kernel row's ``source`` (``{"file", "line"}``
            of its ``def``) and, with ``with_ops``, each op's ``source``.

    Returns:
        A dict with stable keys: ``file``, ``container``, ``file_size``,
        ``format_version``, ``warp_version``, ``device``, ``target_arch``,
        ``sections``, ``op_counts``, ``op_total``, ``top_level_ops``,
        ``max_depth``, ``kernels``, ``bindings``, ``regions``, ``modules``,
        ``meshes``, ``pointer_locations``, ``source_root`` and, with ``with_ops``, ``ops``.
        ``bindings`` has one row per name with its roles, ``"input"`` and
        ``"output"`` (true, false, or null where a stock file does not tell).
    """
    p = cap.program
    if sources is None:
        from .sources import Sources  # noqa: PLC0415

        sources = Sources.of(p)
    regions = p.region_map()
    mod_by_hash = {mod.module_hash: mod for mod in p.modules}
    knames = kernel_names(p)
    # One pass over the stream gathers every count (it can hold millions of ops).
    # An explicit stack of op lists (order does not matter for counts) instead of
    # walk_ops: no generator step or nested_bodies call per op.
    max_depth = total = 0
    counts: dict = {}
    launches: dict = {}
    launch_cls, if_cls, while_cls = m.KernelLaunch, m.If, m.While
    stack = [(0, p.ops)]
    while stack:
        d, ops = stack.pop()
        if ops and d > max_depth:
            max_depth = d
        total += len(ops)
        for op in ops:
            cls = type(op)
            counts[cls] = counts.get(cls, 0) + 1
            if cls is launch_cls:
                key = (op.module_hash, op.kernel_key)
                launches[key] = launches.get(key, 0) + 1
            elif cls is if_cls:
                stack.append((d + 1, op.then_ops))
                stack.append((d + 1, op.else_ops))
            elif cls is while_cls:
                stack.append((d + 1, op.body))
    counts = {c.op_type: n for c, n in counts.items()}
    # One row per binding name: Warp writes a name given as input and output twice.
    roles = binding_roles([b.name for b in p.bindings])
    bindings = []
    for b in p.resolved_bindings():
        r = regions.get(b.region_id)
        is_in, is_out = roles[b.name]
        row = {"name": b.name, "region_id": b.region_id, "size": r.size if r else None,
               "input": is_in, "output": is_out}
        if signature and b.name in signature:
            row.update(signature[b.name])
        bindings.append(row)
    modules = []
    for mod in p.modules:
        state = cap.module_state(mod.binary_filename)
        size = None
        if state == "present":
            if cap.modules_dir is not None:
                size = (cap.modules_dir / mod.binary_filename).stat().st_size
            elif mod.binary is not None:
                size = len(mod.binary)
        modules.append({
            "module_name": mod.module_name, "module_hash": mod.module_hash,
            "binary_filename": mod.binary_filename, "target_arch": mod.target_arch,
            "binary_kind": m.CudaBinaryKind(mod.binary_kind).name if mod.binary_kind <= 2 else mod.binary_kind,
            "source_filename": mod.source_filename, "present": state == "present", "state": state, "size": size,
        })
    out = {
        "file": str(cap.path),
        "container": cap.kind,
        "file_size": cap.mapped.size,
        "format_version": p.format_version,
        "warp_version": p.warp_version,
        "producer": producer_text(p),
        "device": p.device,
        "target_arch": p.target_arch,
        "sections": _sections(cap),
        "op_counts": {m.OpType(k).name: counts[k] for k in sorted(counts)},
        "op_total": total,
        "top_level_ops": len(p.ops),
        "max_depth": max_depth,
        "kernels": sorted([{
            "kernel_key": k.kernel_key, "name": knames[(k.module_hash, k.kernel_key)], "module_hash": k.module_hash,
            "module_name": mod_by_hash[k.module_hash].module_name if k.module_hash in mod_by_hash else None,
            "forward_name": k.forward_name, "backward_name": k.backward_name, "block_dim": k.block_dim,
            "launches": launches.get((k.module_hash, k.kernel_key), 0),
            "source": sources.kernel(k.module_hash, k.kernel_key),
        } for k in p.kernels], key=lambda k: (k["kernel_key"], k["module_hash"])),
        "bindings": bindings,
        "regions": _region_rows(p),
        "modules": modules,
        "meshes": [{"num_points": me.num_points, "num_tris": me.num_tris, "points_region_id": me.points_region_id,
                    "indices_region_id": me.indices_region_id, "velocities_region_id": me.velocities_region_id}
                   for me in p.meshes],
        "pointer_locations": [{"region_id": pl.region_id, "offset": pl.offset, "stride": pl.stride,
                               "count": pl.count} for pl in p.pointer_locations],
        "annotations_bytes": len(p.annotations),
        "source_root": sources.root or None,
    }
    if with_ops:
        sigs = kernel_signatures(p)
        names = region_names(p)
        out["ops"] = [op_record(op, p, sigs, names, sources, (i,)) for i, op in enumerate(p.ops)]
    return out
