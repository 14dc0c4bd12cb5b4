"""A captured program as JSON: readable, editable, lossless.

:func:`program_to_json` turns a :class:`~wrpkit.model.Program` (and its
module files) into plain JSON data; :func:`program_from_json` turns such data
back, strictly.  ``.wrp`` -> JSON -> ``.wrp`` and ``.wrpk`` -> JSON ->
``.wrpk`` are byte-identical.

The shape follows ``schema/wrp.fbs``: every object's keys are the schema's
field names, in schema order.  In addition:

* the top level carries ``"wrpkit_json": 1`` (the version of this form);
* an operation is ``{"op": "KERNEL_LAUNCH", ...its fields}``; IF and WHILE
  bodies are nested lists of operations;
* enumerations are written as names (``"device_type": "CPU"``,
  ``"kind": "DATA_PTR"``, ``"dtype": "FLOAT32"``); a value without a name is
  written as its number, and either is accepted on input;
* wrpkit's annotations (the typed signature of the bindings, kernel
  signatures, module digests) are readable, editable fields
  (:mod:`wrpkit.formats.annotations_json`); only annotations that would not
  encode back to the same bytes stay ``{"base64": ...}``;
* bytes are ``{"base64": "..."}``: region data, launch value data, MEMTILE
  values, MEMCPY_H2D data, and, so that a ``.json`` is
  self-contained, each module's ``"binary"`` (and ``"source"``, when the
  module has an exported ``.cu``).

Input is checked strictly: an unknown or missing key, a value of the wrong
type or out of its field's range raises :class:`~wrpkit.errors.WrpFormatError`
naming the JSON path, e.g. ``ops[3].params[1].value_size: expected an integer``.
Optional keys are only: a region's ``data`` (present exactly when
``has_initial_data``), a module's ``binary`` and ``source``, the
program's ``annotations``, a launch's ``legacy_args`` and
``handle_offsets`` (format 3 only; written only when non-empty), and
``launch_extents_exceeded``: the paths (``"ops[3]"``) of the launches that
already ran more threads than any of their arrays holds when the file was
exported (see :mod:`wrpkit.formats.launch_arrays`), so that converting the JSON back can
tell such a launch from one an edit made.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Mapping, Optional

from .. import model as m
from ..errors import WrpFormatError
from ..apic_types import OpType
from .wrpk.tables import MAX_DEPTH, OP_TABLES, TABLES

JSON_VERSION = 1

_RANGES = {"u8": (0, 0xFF), "u16": (0, 0xFFFF), "u32": (0, 0xFFFFFFFF), "i32": (-(1 << 31), (1 << 31) - 1),
           "u64": (0, (1 << 64) - 1), "i64": (-(1 << 63), (1 << 63) - 1)}

_SCALAR_TYPE_NAMES = {0: "INVALID", **{e.value: e.name for e in m.ApicScalarType}}
_ENUMS = {
    ("Program", "device_type"): {e.value: e.name for e in m.DeviceType},
    ("Module", "binary_kind"): {e.value: e.name for e in m.CudaBinaryKind},
    ("Module", "fallback_reason"): {e.value: e.name for e in m.CudaFallbackReason},
    ("recipe", "arch_suffix"): {0: "NONE", 1: "A", 2: "F"},
    ("Relocation", "kind"): {0: "INVALID", **{e.value: e.name for e in m.RelocKind}},
    ("Scan", "dtype"): _SCALAR_TYPE_NAMES,
    ("SegmentedSort", "dtype"): _SCALAR_TYPE_NAMES,
    ("RadixSort", "dtype"): _SCALAR_TYPE_NAMES,
    ("Reduction", "dtype"): _SCALAR_TYPE_NAMES,
    ("Reduction", "kind"): {0: "INVALID", 1: "SUM", 2: "INNER"},
}
_ENUM_VALUES = {k: {name: v for v, name in names.items()} for k, names in _ENUMS.items()}

_PARAM_FIELDS = [("param_index", "u16"), ("num_relocs", "u16"), ("value_offset", "u32"), ("value_size", "u32"),
                 ("value_align", "u32")]
_RELOC_FIELDS = [("value_byte_offset", "u32"), ("region_id", "i32"), ("region_offset", "u64"), ("kind", "u8")]
_LEGACY_FIELDS = [("is_array", "u8"), ("ndim", "u8"), ("param_index", "u16"), ("region_id", "i32"),
                  ("byte_offset", "u64"), ("element_size", "u32")]
#: Launch keys written only when non-empty (format 3's argument descriptors),
#: so that JSON of formats 10 and later is unchanged; optional on input.
_LAUNCH_OPTIONAL = ("legacy_args", "handle_offsets")
_RECIPE_FIELDS = [(f, "u8") for f in ("debug", "optimization_level", "verify_fp", "fast_math", "fuse_fp",
                                      "lineinfo", "arch_suffix")]
_OP_BY_NAME = {t.name: t for t in OP_TABLES if t != OpType.MEMCPY_D2H}


# ---------------------------------------------------------------------------
# Model -> JSON
# ---------------------------------------------------------------------------

def _b64(data) -> dict:
    return {"base64": base64.b64encode(data).decode("ascii")}


def _enum_out(table: str, field: str, v: int):
    names = _ENUMS.get((table, field))
    if names is not None:
        return names.get(int(v), int(v))
    return v


def _scalar_out(table: str, field: str, kind: str, v):
    if kind == "bool":
        return bool(v)
    if kind == "f64":
        return float(v)
    return _enum_out(table, field, v)


def _op_out(op) -> dict:
    t = op.op_type
    table = OP_TABLES[t]
    out = {"op": OpType(t).name}
    for name, kind, _ in TABLES[table]:
        v = getattr(op, name)
        if name in _LAUNCH_OPTIONAL and not v:
            continue
        if kind == "ops":
            out[name] = [_op_out(o) for o in v]
        elif kind == "bytes":
            out[name] = _b64(v)
        elif kind in ("u32v", "i32v"):
            out[name] = [int(x) for x in v]
        elif kind == "params":
            out[name] = [dict(zip(m.LaunchParam._fields, map(int, p))) for p in v]
        elif kind == "relocs":
            out[name] = [{"value_byte_offset": r[0], "region_id": r[1], "region_offset": r[2],
                          "kind": _enum_out("Relocation", "kind", r[3])} for r in v]
        elif kind == "legacy":
            out[name] = [{**dict(zip(m.LegacyArg._fields, (int(a.is_array), a.ndim, a.param_index, a.region_id,
                                                             a.byte_offset))),
                          "shape": list(a.shape), "strides": list(a.strides), "element_size": a.element_size}
                         for a in v]
        elif kind == "str":
            out[name] = v
        else:
            out[name] = _scalar_out(table, name, kind, v)
    return out


def _plain(table: str, obj) -> dict:
    return {name: (getattr(obj, name) if kind == "str" else _scalar_out(table, name, kind, getattr(obj, name)))
            for name, kind, _ in TABLES[table]}


def program_to_json(program: m.Program, modules: Optional[Mapping] = None) -> dict:
    """The whole program as JSON data (dicts, lists, strings, numbers).

    Args:
        program: The program.
        modules: ``{file name: bytes-like}`` of the module binaries (and
            ``.cu`` sources) to embed, e.g. ``Capture.module_files()``; a
            module whose file is not in it is written without ``binary``.
            None embeds none.

    Returns:
        A dict ready for :func:`json.dumps`.
    """
    out = {"wrpkit_json": JSON_VERSION}
    for name, kind, _ in TABLES["Program"][:4]:
        out[name] = _scalar_out("Program", name, kind, getattr(program, name)) if kind != "str" else \
            getattr(program, name)
    mods = []
    for mod in program.modules:
        d = {}
        for name, kind, _ in TABLES["Module"]:
            if kind == "recipe":
                d[name] = {f: _enum_out("recipe", f, getattr(mod.recipe, f)) for f, _ in _RECIPE_FIELDS}
            elif kind == "blob":
                fname = mod.binary_filename if name == "binary" else mod.source_filename
                if modules is not None and fname and fname in modules:
                    d[name] = _b64(modules[fname])
            elif kind == "str":
                d[name] = getattr(mod, name)
            else:
                d[name] = _scalar_out("Module", name, kind, getattr(mod, name))
        mods.append(d)
    out["modules"] = mods
    out["kernels"] = [_plain("Kernel", k) for k in program.kernels]
    out["bindings"] = [_plain("Binding", b) for b in program.bindings]
    out["meshes"] = [_plain("Mesh", me) for me in program.meshes]
    out["pointer_locations"] = [_plain("PointerLocation", p) for p in program.pointer_locations]
    regions = []
    for r in program.regions:
        d = {"region_id": r.region_id, "element_size": r.element_size, "size": r.size,
             "has_initial_data": bool(r.has_initial_data)}
        if r.has_initial_data:
            if r.data is None:
                raise WrpFormatError(f"region {r.region_id} is marked as having initial data but carries none")
            d["data"] = _b64(r.data)
        regions.append(d)
    out["regions"] = regions
    out["ops"] = [_op_out(op) for op in program.ops]
    if program.annotations:
        from .annotations_json import annotations_to_json  # noqa: PLC0415

        readable = annotations_to_json(program.annotations)
        out["annotations"] = readable if readable is not None else _b64(program.annotations)
    from .launch_arrays import exceeded_launches  # noqa: PLC0415

    exceeded = [w for w, _, _ in exceeded_launches(program.ops)]
    if exceeded:
        out["launch_extents_exceeded"] = exceeded
    return out


def dumps(program: m.Program, modules: Optional[Mapping] = None, *, indent: Optional[int] = 1) -> str:
    """:func:`program_to_json` as JSON text."""
    return json.dumps(program_to_json(program, modules), indent=indent, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------
# JSON -> model
# ---------------------------------------------------------------------------

def _err(path: str, message: str):
    raise WrpFormatError(message, field=path or "$")


def _typename(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _obj(d, path: str, required, optional=()) -> dict:
    if not isinstance(d, dict):
        _err(path, f"expected an object, found {_typename(d)}")
    for k in d:
        if k not in required and k not in optional:
            _err(f"{path}.{k}" if path else k, "unknown key")
    for k in required:
        if k not in d:
            _err(f"{path}.{k}" if path else k, "missing key")
    return d


def _list(v, path: str) -> list:
    if not isinstance(v, list):
        _err(path, f"expected a list, found {_typename(v)}")
    return v


def _int(v, path: str, kind: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        _err(path, f"expected an integer, found {_typename(v)}")
    lo, hi = _RANGES[kind]
    if not lo <= v <= hi:
        _err(path, f"expected an integer in [{lo}, {hi}], found {v}")
    return v


def _scalar_in(v, path: str, table: str, field: str, kind: str):
    if kind == "bool":
        if not isinstance(v, bool):
            _err(path, f"expected true or false, found {_typename(v)}")
        return v
    if kind == "f64":
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            _err(path, f"expected a number, found {_typename(v)}")
        return float(v)
    values = _ENUM_VALUES.get((table, field))
    if values is not None and isinstance(v, str):
        if v not in values:
            _err(path, f"unknown name {v!r}; expected one of {', '.join(values)} or an integer")
        return values[v]
    if values is not None and not isinstance(v, int):
        _err(path, f"expected a name ({', '.join(values)}) or an integer, found {_typename(v)}")
    return _int(v, path, kind)


def _str(v, path: str) -> str:
    if not isinstance(v, str):
        _err(path, f"expected a string, found {_typename(v)}")
    return v


def _bytes(v, path: str) -> bytes:
    _obj(v, path, ("base64",))
    s = _str(v["base64"], path + ".base64")
    try:
        return base64.b64decode(s.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as e:
        _err(path + ".base64", f"invalid base64 ({e})")


def _struct_list(v, path: str, fields, enum_table: str, make) -> list:
    out = []
    names = [f for f, _ in fields]
    for j, d in enumerate(_list(v, path)):
        p = f"{path}[{j}]"
        _obj(d, p, names)
        out.append(make(*(_scalar_in(d[f], f"{p}.{f}", enum_table, f, k) for f, k in fields)))
    return out


def _legacy_arg_in(d, path: str) -> m.LegacyArg:
    names = [f for f, _ in _LEGACY_FIELDS]
    _obj(d, path, names + ["shape", "strides"])
    v = {f: _int(d[f], f"{path}.{f}", k) for f, k in _LEGACY_FIELDS}
    if v["is_array"] > 1:
        _err(path + ".is_array", "expected 0 or 1")
    for f in ("shape", "strides"):
        xs = _list(d[f], f"{path}.{f}")
        if len(xs) != 4:
            _err(f"{path}.{f}", f"expected 4 entries, found {len(xs)}")
        v[f] = tuple(_int(x, f"{path}.{f}[{j}]", "i64") for j, x in enumerate(xs))
    return m.LegacyArg(v["is_array"], v["ndim"], v["param_index"], v["region_id"], v["byte_offset"], v["shape"],
                       v["strides"], v["element_size"])


def _op_in(d, path: str, depth: int):
    if depth > MAX_DEPTH:
        _err(path, f"IF/WHILE bodies are nested deeper than {MAX_DEPTH} levels")
    if not isinstance(d, dict):
        _err(path, f"expected an object, found {_typename(d)}")
    if "op" not in d:
        _err(path + ".op", "missing key")
    name = d["op"]
    t = _OP_BY_NAME.get(name) if isinstance(name, str) else None
    if t is None:
        _err(path + ".op", f"unknown op {name!r}; expected one of {', '.join(_OP_BY_NAME)}")
    table = OP_TABLES[t]
    spec = TABLES[table]
    optional = _LAUNCH_OPTIONAL if t == OpType.KERNEL_LAUNCH else ()
    _obj(d, path, ["op"] + [f for f, _, _ in spec if f not in optional], optional)
    vals = {}
    for name, kind, _ in spec:
        if name not in d:
            vals[name] = []
            continue
        v = d[name]
        p = f"{path}.{name}"
        if kind == "ops":
            vals[name] = [_op_in(o, f"{p}[{j}]", depth + 1) for j, o in enumerate(_list(v, p))]
        elif kind == "bytes":
            vals[name] = _bytes(v, p)
        elif kind in ("u32v", "i32v"):
            vals[name] = tuple(_int(x, f"{p}[{j}]", kind[:3]) for j, x in enumerate(_list(v, p)))
        elif kind == "params":
            vals[name] = _struct_list(v, p, _PARAM_FIELDS, "LaunchParam", m.LaunchParam)
        elif kind == "relocs":
            vals[name] = _struct_list(v, p, _RELOC_FIELDS, "Relocation", m.Relocation)
        elif kind == "legacy":
            vals[name] = [_legacy_arg_in(a, f"{p}[{j}]") for j, a in enumerate(_list(v, p))]
        elif kind == "str":
            vals[name] = _str(v, p)
        else:
            vals[name] = _scalar_in(v, p, table, name, kind)
    if t == OpType.KERNEL_LAUNCH:
        if len(vals["shape"]) != 4:
            _err(path + ".shape", f"expected 4 entries, found {len(vals['shape'])}")
        if vals["is_forward"] and vals["adjoint_params"]:
            _err(path + ".adjoint_params", "a forward launch has no adjoint params")
        if not vals["is_forward"] and len(vals["adjoint_params"]) != len(vals["params"]):
            _err(path + ".adjoint_params", "an adjoint launch needs one adjoint param per param")
        vals["handle_offsets"] = list(vals["handle_offsets"])
        if vals["legacy_args"] and (vals["params"] or vals["relocations"] or vals["value_data"]):
            _err(path + ".legacy_args", "a launch with format-3 argument descriptors has no params, relocations "
                                        "or value data")
    if t == OpType.MEMTILE and not vals["value"]:
        _err(path + ".value", "MEMTILE value must not be empty")
    return m.OP_CLASSES[t](**vals)


def _plain_in(d, path: str, table: str, cls):
    spec = TABLES[table]
    _obj(d, path, [f for f, _, _ in spec])
    args = []
    for name, kind, _ in spec:
        p = f"{path}.{name}"
        args.append(_str(d[name], p) if kind == "str" else _scalar_in(d[name], p, table, name, kind))
    return cls(*args)


def program_from_json(data, meta: Optional[dict] = None) -> tuple:
    """Build a program from JSON data written by :func:`program_to_json`.

    ``meta``, when given, receives ``"launch_extents_exceeded"``: the list
    the file carries (empty when it has none).

    Returns:
        ``(program, modules)``: the :class:`~wrpkit.model.Program` (module
        binaries also set as ``Module.binary``/``Module.source``) and
        ``{file name: bytes}`` of the embedded module files.

    Raises:
        WrpFormatError: The data does not have the expected shape; the message
            names the JSON path.
    """
    prog_fields = [f for f, _, _ in TABLES["Program"]]
    _obj(data, "", ["wrpkit_json"] + prog_fields[:-1], optional=("annotations", "launch_extents_exceeded"))
    exceeded = [_str(v, f"launch_extents_exceeded[{i}]")
                for i, v in enumerate(_list(data.get("launch_extents_exceeded", []), "launch_extents_exceeded"))]
    if meta is not None:
        meta["launch_extents_exceeded"] = exceeded
    if data["wrpkit_json"] != JSON_VERSION or isinstance(data["wrpkit_json"], bool):
        _err("wrpkit_json", f"unsupported version {data['wrpkit_json']!r}; this wrpkit reads {JSON_VERSION}")
    head = {}
    for name, kind, _ in TABLES["Program"][:4]:
        head[name] = _str(data[name], name) if kind == "str" else _scalar_in(data[name], name, "Program", name,
                                                                              kind)
    prog = m.Program(**head)
    modules = {}
    mod_fields = [f for f, _, _ in TABLES["Module"]]
    for i, d in enumerate(_list(data["modules"], "modules")):
        path = f"modules[{i}]"
        _obj(d, path, mod_fields[:-2], optional=("binary", "source"))
        args = {}
        for name, kind, _ in TABLES["Module"][:-2]:
            p = f"{path}.{name}"
            if kind == "recipe":
                _obj(d[name], p, [f for f, _ in _RECIPE_FIELDS])
                args[name] = m.CudaCompileRecipe(*(_scalar_in(d[name][f], f"{p}.{f}", "recipe", f, k)
                                                   for f, k in _RECIPE_FIELDS))
            elif kind == "str":
                args[name] = _str(d[name], p)
            else:
                args[name] = _scalar_in(d[name], p, "Module", name, kind)
        mod = m.Module(**args)
        if "binary" in d:
            mod.binary = modules[mod.binary_filename] = _bytes(d["binary"], path + ".binary")
        if "source" in d:
            if not mod.source_filename:
                _err(path + ".source", "a module without a source_filename has no source")
            mod.source = modules[mod.source_filename] = _bytes(d["source"], path + ".source")
        prog.modules.append(mod)
    for key, table, cls in (("kernels", "Kernel", m.Kernel), ("bindings", "Binding", m.Binding),
                            ("meshes", "Mesh", m.Mesh), ("pointer_locations", "PointerLocation",
                                                         m.PointerLocation)):
        getattr(prog, key).extend(_plain_in(d, f"{key}[{i}]", table, cls)
                                  for i, d in enumerate(_list(data[key], key)))
    last = 0
    for i, d in enumerate(_list(data["regions"], "regions")):
        path = f"regions[{i}]"
        _obj(d, path, ["region_id", "element_size", "size", "has_initial_data"], optional=("data",))
        r = m.Region(_int(d["region_id"], path + ".region_id", "u32"),
                     _int(d["element_size"], path + ".element_size", "u32"),
                     _int(d["size"], path + ".size", "u64"),
                     _scalar_in(d["has_initial_data"], path + ".has_initial_data", "Region", "", "bool"))
        if r.region_id <= last:
            _err(path + ".region_id", f"region id {r.region_id} is not above the previous id {last} (ids must be "
                                      f"unique, ascending and >= 1)")
        last = r.region_id
        if r.has_initial_data != ("data" in d):
            _err(path + ".data", "present exactly when has_initial_data is true" if r.has_initial_data
                 else "a region without initial data has no data key")
        if r.has_initial_data:
            r.data = _bytes(d["data"], path + ".data")
            if len(r.data) != r.size:
                _err(path + ".data", f"holds {len(r.data)} bytes but the region's size is {r.size}")
        prog.regions.append(r)
    prog.ops = [_op_in(o, f"ops[{j}]", 0) for j, o in enumerate(_list(data["ops"], "ops"))]
    if "annotations" in data:
        a = data["annotations"]
        if isinstance(a, dict) and "base64" not in a:
            from .annotations_json import annotations_from_json  # noqa: PLC0415

            prog.annotations = annotations_from_json(a, "annotations")
        else:
            prog.annotations = _bytes(a, "annotations")
    from .wrp1_limits import check_strings  # noqa: PLC0415

    check_strings(prog)  # the rules a .wrp's strings meet, so an edit is refused on the way in
    return prog, modules


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise WrpFormatError(f"duplicate key {k!r} in a JSON object")
        out[k] = v
    return out


def loads(text, meta: Optional[dict] = None) -> tuple:
    """Parse JSON text (str or bytes) written by :func:`dumps`; returns ``(program, modules)``.

    ``meta``: see :func:`program_from_json`.

    Raises:
        WrpFormatError: Not JSON (with line and column), a duplicate key, or
            not the expected shape (see :func:`program_from_json`).
    """
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise WrpFormatError(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
                             offset=e.pos) from None
    except UnicodeDecodeError as e:
        raise WrpFormatError(f"not valid UTF-8 text ({e.reason})", offset=e.start) from None
    except RecursionError:
        raise WrpFormatError("JSON is nested too deeply") from None
    return program_from_json(data, meta)


__all__ = ["JSON_VERSION", "program_to_json", "program_from_json", "dumps", "loads"]
