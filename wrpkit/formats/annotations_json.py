"""wrpkit's annotations (signature, kernel signatures, module digests, call sites) as readable JSON.

In a ``.json`` capture the annotations are written as fields a person can
read and edit (binding names, dtypes, shapes, strides, roles; digests in
hex), not as an opaque FlatBuffer.  Reading them back encodes them with
:func:`wrpkit.formats.annotations.encode_annotations`.  The readable form is
written only when encoding it gives back the very bytes the file carried, so
``.wrp -> .json -> .wrp`` stays byte-identical; otherwise (annotations
written by another producer) the bytes are kept as ``{"base64": ...}``.
"""

from __future__ import annotations

from typing import Optional

from .. import records
from . import annotations as ann
from ..errors import WrpError, WrpFormatError


def _dtype_out(dt: ann.DataType) -> dict:
    out = {"name": dt.name, "scalar": ann.ScalarKind(dt.scalar).name if _is_kind(dt.scalar) else int(dt.scalar),
           "shape": list(dt.shape), "size": dt.size}
    if dt.fields:
        out["fields"] = [{"name": f.name, "offset": f.offset, "type": _dtype_out(f.type)} for f in dt.fields]
    return out


def _is_kind(v) -> bool:
    try:
        ann.ScalarKind(v)
        return True
    except ValueError:
        return False


def _argument_out(x: ann.KernelArgument) -> dict:
    # Every field of the dataclass, so that fields appended to the schema are carried too.
    out = {}
    for f in records.fields(x):
        v = getattr(x, f.name)
        out[f.name] = (_dtype_out(v) if v is not None else None) if f.name == "dtype" else int(v) \
            if isinstance(v, int) and not isinstance(v, bool) else v
    return out


def annotations_to_json(raw) -> Optional[dict]:
    """The readable form of annotation bytes, or None when it would not encode back to them.

    Raises:
        Nothing: malformed annotations give None (they are then kept as bytes).
    """
    try:
        a = ann.decode_annotations(raw)
    except WrpError:
        return None
    out = {
        "producer": a.producer,
        "signature": [{"name": s.name, "dtype": _dtype_out(s.dtype), "shape": list(s.shape),
                       "strides": list(s.strides), "byte_offset": s.byte_offset, "is_input": s.is_input,
                       "is_output": s.is_output} for s in a.signature],
        "kernel_signatures": [{"kernel_key": k.kernel_key, "module_hash": k.module_hash,
                               "arguments": [_argument_out(x) for x in k.arguments],
                               **({"source_file": k.source_file, "source_line": k.source_line}
                                  if k.source_file or k.source_line else {})}
                              for k in a.kernel_signatures],
        "module_digests": [{"binary_filename": d.binary_filename, "sha256": bytes(d.sha256).hex(), "size": d.size}
                           for d in a.module_digests],
    }
    # Written only when present, so that the JSON of older captures is unchanged.
    if a.call_sites:
        out["call_sites"] = [{"op_path": list(c.op_path), "frames": _frames_out(c.frames)} for c in a.call_sites]
    if a.source_root:
        out["source_root"] = a.source_root
    if a.unrecorded_calls:
        out["unrecorded_calls"] = [{"call": u.call, "frames": _frames_out(u.frames)} for u in a.unrecorded_calls]
    try:
        if annotations_from_json(out, "annotations") != bytes(raw):
            return None
    except WrpError:
        return None
    return out


def _err(path: str, message: str):
    raise WrpFormatError(f"{path}: {message}", field=path)


def _get(d, key: str, path: str, kind, default=...):
    if not isinstance(d, dict):
        _err(path, f"expected an object, got {type(d).__name__}")
    if key not in d:
        if default is not ...:
            return default
        _err(path, f"missing key {key!r}")
    v = d[key]
    ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
    if not ok:
        _err(f"{path}.{key}", f"expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
    return v


def _ints(d, key: str, path: str) -> tuple:
    v = _get(d, key, path, list)
    for i, x in enumerate(v):
        if not isinstance(x, int) or isinstance(x, bool):
            _err(f"{path}.{key}[{i}]", "expected an integer")
    return tuple(v)


def _dtype_in(d, path: str) -> ann.DataType:
    scalar = d.get("scalar", 0) if isinstance(d, dict) else 0
    if isinstance(scalar, str):
        try:
            scalar = ann.ScalarKind[scalar]
        except KeyError:
            _err(f"{path}.scalar", f"unknown scalar kind {scalar!r} (one of {', '.join(k.name for k in ann.ScalarKind)})")
    elif not isinstance(scalar, int) or isinstance(scalar, bool):
        _err(f"{path}.scalar", "expected a scalar kind name or number")
    fields = tuple(ann.StructField(_get(f, "name", f"{path}.fields[{i}]", str),
                                   _get(f, "offset", f"{path}.fields[{i}]", int),
                                   _dtype_in(_get(f, "type", f"{path}.fields[{i}]", dict), f"{path}.fields[{i}].type"))
                   for i, f in enumerate(_get(d, "fields", path, list, [])))
    return ann.DataType(_get(d, "name", path, str), scalar, _ints(d, "shape", path), _get(d, "size", path, int), fields)


def _frames_out(frames) -> list:
    """A ``[SourceFrame]`` vector as JSON."""
    return [{"file": f.file, "line": f.line, "function": f.function} for f in frames]


def _frames(d: dict, p: str) -> tuple:
    """The ``frames`` of a call site or an unrecorded call at JSON path ``p``, checked."""
    return tuple(ann.SourceFrame(_get(f, "file", f"{p}.frames[{j}]", str),
                                 _get(f, "line", f"{p}.frames[{j}]", int, 0),
                                 _get(f, "function", f"{p}.frames[{j}]", str, ""))
                 for j, f in enumerate(_get(d, "frames", p, list, [])))


def annotations_from_json(d, path: str = "annotations") -> bytes:
    """Encode the readable form (see :func:`annotations_to_json`) as annotation bytes.

    Raises:
        WrpFormatError: A key is missing or has the wrong type; names the JSON path.
    """
    sigs = []
    for i, s in enumerate(_get(d, "signature", path, list)):
        p = f"{path}.signature[{i}]"
        sigs.append(ann.ArraySignature(_get(s, "name", p, str), _dtype_in(_get(s, "dtype", p, dict), p + ".dtype"),
                                       _ints(s, "shape", p), _ints(s, "strides", p), _get(s, "byte_offset", p, int),
                                       _get(s, "is_input", p, bool), _get(s, "is_output", p, bool)))
    ksigs = []
    for i, k in enumerate(_get(d, "kernel_signatures", path, list)):
        p = f"{path}.kernel_signatures[{i}]"
        args = []
        for j, a in enumerate(_get(k, "arguments", p, list)):
            q = f"{p}.arguments[{j}]"
            kw = {}
            for f in records.fields(ann.KernelArgument):
                if f.name == "dtype":
                    dt = a.get("dtype") if isinstance(a, dict) else None
                    kw["dtype"] = _dtype_in(dt, q + ".dtype") if dt is not None else None
                elif f.name in ("name", "type"):
                    kw[f.name] = _get(a, f.name, q, str)
                else:
                    kw[f.name] = _get(a, f.name, q, int, f.default)
            args.append(ann.KernelArgument(**kw))
        ksigs.append(ann.KernelSignature(_get(k, "kernel_key", p, str), _get(k, "module_hash", p, str), tuple(args),
                                         _get(k, "source_file", p, str, ""), _get(k, "source_line", p, int, 0)))
    digests = []
    for i, g in enumerate(_get(d, "module_digests", path, list)):
        p = f"{path}.module_digests[{i}]"
        try:
            sha = bytes.fromhex(_get(g, "sha256", p, str))
        except ValueError:
            _err(p + ".sha256", "expected 64 hex digits")
        if len(sha) != 32:
            _err(p + ".sha256", "expected 64 hex digits")
        digests.append(ann.ModuleDigest(_get(g, "binary_filename", p, str), sha, _get(g, "size", p, int)))
    sites = []
    for i, c in enumerate(_get(d, "call_sites", path, list, [])):
        p = f"{path}.call_sites[{i}]"
        sites.append(ann.CallSite(_ints(c, "op_path", p), _frames(c, p)))
    unrecorded = []
    for i, u in enumerate(_get(d, "unrecorded_calls", path, list, [])):
        p = f"{path}.unrecorded_calls[{i}]"
        unrecorded.append(ann.UnrecordedCall(_get(u, "call", p, str), _frames(u, p)))
    a = ann.Annotations(_get(d, "producer", path, str), tuple(sigs), tuple(ksigs), tuple(digests), tuple(sites),
                        _get(d, "source_root", path, str, ""), tuple(unrecorded))
    try:
        return ann.encode_annotations(a)
    except (TypeError, ValueError, OverflowError) as e:
        _err(path, f"cannot be encoded ({type(e).__name__}: {e})")


__all__ = ["annotations_to_json", "annotations_from_json"]
