"""What ``wrp inspect`` reports, as plain data with stable keys.

:func:`summarize` turns an opened capture into a JSON-ready ``dict``; the CLI
formats it as tables or prints it as JSON.  Nothing here imports Warp or
numpy, and nothing reads region or module contents (only their sizes), so
inspecting a large file touches only its records.
"""

from __future__ import annotations

from .. import model as m
from ..formats.container import Capture
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
    from ..formats.wrpk import read_header  # noqa: PLC0415

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


def op_record(op: m.Op) -> dict:
    """One op as a JSON-ready dict: ``{"op": NAME, "offset": byte, ...fields}``, nested bodies included."""
    d = {"op": op.op_type.name, "offset": op.at}
    for name in m.op_fields(type(op)):
        v = getattr(op, name)
        if name in ("then_ops", "else_ops", "body"):
            d[name] = [op_record(x) for x in v]
        elif name in ("params", "adjoint_params", "relocations"):
            d[name] = [dict(x._asdict()) for x in v]
        else:
            d[name] = _value(v)
    return d


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


def launch_access(op: m.KernelLaunch, signature=None) -> list:
    """``[(argument name, word, region id)]`` for each array argument of a launch that a relocation binds.

    ``word`` is ``"read"``, ``"write"``, ``"readwrite"`` or ``"unused"`` as
    recorded at capture (:func:`wrpkit.formats.annotations.argument_access`),
    or ``"touches"`` where the file does not say.

    Args:
        op: A kernel launch.
        signature: The kernel's :class:`~wrpkit.formats.annotations.KernelSignature`, or None.
    """
    args = signature.arguments if signature is not None else ()
    out = []
    for p, rels in op.param_relocations():
        for r in rels:
            if r.kind == m.RelocKind.DATA_PTR:
                a = launch_argument(args, p)
                out.append((a.name if a is not None else f"arg{p.param_index - 1}",
                            (a.access_word if a is not None else None) or "touches", r.region_id))
                break
    return out


def launch_argument(arguments, param):
    """The kernel argument a launch parameter passes (``param_index`` is 1-based: 0 is the launch bounds)."""
    i = param.param_index - 1
    return arguments[i] if 0 <= i < len(arguments) else None


def op_line(op: m.Op, signatures: dict | None = None, names: dict | None = None) -> str:
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
        kind = "" if op.is_forward else " backward"
        line = (f"{op.kernel_key}{kind} dim={shape_text(op.shape[:max(op.ndim, 1)])} threads={op.size} "
                f"args={len(op.params)} relocs={len(op.relocations)} value_bytes={len(op.value_data)}")
        if signatures is not None or names is not None:
            acc = launch_access(op, (signatures or {}).get((op.module_hash, op.kernel_key)))
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


def iter_op_lines(ops, depth: int = 0, path: str = "", signatures: dict | None = None, names: dict | None = None):
    """Yield ``(depth, index_path, name, line)`` for every op, nested bodies indented.

    With ``signatures`` and ``names`` (see :func:`op_line`) launches list their
    array access and the binding each argument points to.
    """
    for i, op in enumerate(ops):
        ip = f"{path}{i}"
        yield depth, ip, op.op_type.name, op_line(op, signatures, names)
        if isinstance(op, m.If):
            if op.then_ops:
                yield depth + 1, "", "then:", ""
                yield from iter_op_lines(op.then_ops, depth + 2, ip + ".", signatures, names)
            if op.else_ops:
                yield depth + 1, "", "else:", ""
                yield from iter_op_lines(op.else_ops, depth + 2, ip + ".e", signatures, names)
        elif isinstance(op, m.While):
            yield from iter_op_lines(op.body, depth + 1, ip + ".", signatures, names)


def kernel_signatures(prog: m.Program) -> dict:
    """``{(module_hash, kernel_key): KernelSignature}`` from the annotations; empty without them."""
    from ..formats.annotations import read_annotations  # noqa: PLC0415

    a = read_annotations(prog)
    return {} if a is None else {(k.module_hash, k.kernel_key): k for k in a.kernel_signatures}


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


def summarize(cap: Capture, *, with_ops: bool = False, signature: dict | None = None) -> dict:
    """Summarize a capture for ``wrp inspect``.

    Args:
        cap: An opened capture.
        with_ops: Include every op (``"ops"``), nested bodies included.
        signature: Optional ``{binding name: {"dtype": ..., "shape": [...]}}``
            to merge into the binding rows.

    Returns:
        A dict with stable keys: ``file``, ``container``, ``file_size``,
        ``format_version``, ``warp_version``, ``device``, ``target_arch``,
        ``sections``, ``op_counts``, ``op_total``, ``top_level_ops``,
        ``max_depth``, ``kernels``, ``bindings``, ``regions``, ``modules``,
        ``meshes``, ``pointer_locations`` and, with ``with_ops``, ``ops``.
        ``bindings`` has one row per name with its roles, ``"input"`` and
        ``"output"`` (true, false, or null where a stock file does not tell).
    """
    p = cap.program
    regions = p.region_map()
    mod_by_hash = {mod.module_hash: mod for mod in p.modules}
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
    roles = m.binding_roles([b.name for b in p.bindings])
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
            "kernel_key": k.kernel_key, "module_hash": k.module_hash,
            "module_name": mod_by_hash[k.module_hash].module_name if k.module_hash in mod_by_hash else None,
            "forward_name": k.forward_name, "backward_name": k.backward_name, "block_dim": k.block_dim,
            "launches": launches.get((k.module_hash, k.kernel_key), 0),
        } for k in p.kernels], key=lambda k: (k["kernel_key"], k["module_hash"])),
        "bindings": bindings,
        "regions": [{"region_id": r.region_id, "size": r.size, "element_size": r.element_size,
                     "has_initial_data": r.has_initial_data} for r in p.regions],
        "modules": modules,
        "meshes": [{"num_points": me.num_points, "num_tris": me.num_tris, "points_region_id": me.points_region_id,
                    "indices_region_id": me.indices_region_id, "velocities_region_id": me.velocities_region_id}
                   for me in p.meshes],
        "pointer_locations": [{"region_id": pl.region_id, "offset": pl.offset, "stride": pl.stride,
                               "count": pl.count} for pl in p.pointer_locations],
        "annotations_bytes": len(p.annotations),
    }
    if with_ops:
        out["ops"] = [op_record(op) for op in p.ops]
    return out
