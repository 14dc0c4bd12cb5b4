"""Generate native/src/wrpk_op_writer.h (wrp-replay's FlatBuffers-table-to-WRP1-record writer) from the op table.

Run after every change to the op table or the record layouts:  python tools/gen_op_writer.py
A .wrpk bundle holds each op as a table of schema/wrp.fbs; wrp-replay rebuilds the
WRP1 record of each (native/src/wrpk_reader.cpp, ManifestDecoder).  What that
takes is data already: the op types and their model classes (wrpkit/model.py
OpType, OP_CLASSES, whose fields are the schema table's), each record's fields
and pads in file order (wrpkit/formats/wrp1_layout.py), the record fields that
say a variable part's length (the op table's ``Len`` terms), the variable parts
themselves (the schema's vector kinds, wrpkit/formats/wrpk/schema_tables.py)
and the booleans (wrp1_layout.BOOL_FIELDS).  This writes one ``case`` per op
type, field by field; only the launch (whose record differs between formats)
and the nested bodies of IF/WHILE are written by hand.
tests/formats/test_op_table.py fails if the committed header differs from what this
script writes now.  Never edit the header by hand.

Usage:
    python tools/gen_op_writer.py              # rewrite native/src/wrpk_op_writer.h
    python tools/gen_op_writer.py --check      # exit 1 if it is stale
    python tools/gen_op_writer.py --out FILE   # write elsewhere
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_layout import _TOKEN, ROOT, _c_string, write_or_check  # noqa: E402
from wrpkit import model as m  # noqa: E402
from wrpkit.formats import wrp1_layout as L  # noqa: E402
from wrpkit.formats.wrpk.schema_tables import TABLES  # noqa: E402

HEADER = ROOT / "native" / "src" / "wrpk_op_writer.h"

#: C type of each struct code of wrp1_layout.py.
_CTYPES = {"b": "int8_t", "B": "uint8_t", "h": "int16_t", "H": "uint16_t", "i": "int32_t", "I": "uint32_t",
           "q": "int64_t", "Q": "uint64_t", "f": "float", "d": "double"}
#: Bytes of each scalar kind of schema_tables.py.
_KIND_SIZE = {"bool": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "i32": 4, "u32": 4, "f32": 4, "i64": 8, "u64": 8,
              "f64": 8}
#: Variable parts that follow a record: schema vector kind -> bytes per element.
_TAIL_KINDS = {"bytes": 1, "i32v": 4}
#: The record fields that IF/WHILE's nested bodies fill in (ManifestDecoder::bodies patches them).
_BODY_FIELDS = ("branch_a_size", "branch_a_op_count", "branch_b_size", "branch_b_op_count")


def _terms(length):
    yield length
    for child in length.children():
        yield from _terms(child)


def _len_fields(cls) -> dict:
    """``{record field: model field}``: the record fields that say a variable part's length."""
    out = {}
    for ref in cls.REGIONS or ():
        for term in _terms(ref.length):
            if isinstance(term, m.Len):
                out[term.record_field] = term.model_field
    return out


def _case(t: m.OpType) -> list:
    cls = m.OP_CLASSES[t]
    name = cls.__name__
    assert name in TABLES, f"{t.name}: schema/wrp.fbs has no table {name} (regenerate schema_tables.py)"
    kinds = {f: k for f, k, _ in TABLES[name]}
    model = m.op_fields(cls)
    assert model == list(kinds), f"{t.name}: the model's fields are not the schema table's"
    head = [f"    case kOp{name}: {{  // {t.name}"]
    if t not in L.LAYOUT_18.ops:  # its record differs between formats: written by hand
        assert cls.ARGUMENT_REGIONS, t.name
        return [f"    case kOp{name}: return launch(static_cast<const fbs::{name}*>(table), here);  // {t.name}"]
    rl = L.LAYOUT_18.ops[t]
    codes = dict(zip(rl.names, _TOKEN.findall(rl.struct.format.lstrip("<"))))
    lens = _len_fields(cls)
    tails = [f for f in model if f not in rl.names and kinds[f] in _TAIL_KINDS]
    bodies = [f for f in model if f not in rl.names and kinds[f] == "ops"]
    assert set(model) - set(rl.names) == set(tails) | set(bodies), t.name
    assert len(bodies) <= 2, t.name
    derived = [f for f in rl.content if f not in model]
    assert all(f in lens or (bodies and f in _BODY_FIELDS) for f in derived), (t.name, derived)
    body = [f"        auto* o = static_cast<const fbs::{name}*>(table);"]
    size = f"rec::k{name}.record_size"
    for f in tails:
        body.append(f"        uint32_t n_{f} = count_of(o->{f}());")
        per = _TAIL_KINDS[kinds[f]]
        size += f" + {per} * uint64_t(n_{f})" if per > 1 else f" + uint64_t(n_{f})"
        if L.NONEMPTY_PARTS.get(t) == f:
            body += [f"        if (n_{f} == 0)",
                     f"            bad(here.field({_c_string(f)}), o, {_c_string(f'{t.name} {f} must not be empty')});"]
    for f in rl.content:
        if f in L.BOOL_FIELDS:
            body.append(f"        check_bool(o, fbs::{name}::VT_{f.upper()}, 0, here, {_c_string(f)});")
    if bodies:
        body.append("        size_t start = w.size();  // bodies() patches the sizes once the bodies are written")
    body.append(f"        head(t, {size}, here, o);")
    for f in rl.names:
        count, code = codes[f]
        if code == "s":
            body.append(f"        w.zeros({int(count or 1)});  // {f}")
            continue
        assert not count, f"{t.name}.{f}: array fields are not written field by field"
        ctype = _CTYPES[code]
        if f in lens:
            body.append(f"        w.put<{ctype}>(n_{lens[f]});  // {f}: the length of {lens[f]}")
        elif f in _BODY_FIELDS and bodies:
            body.append(f"        w.put<{ctype}>(0);  // {f}: patched by bodies()")
        elif f in L.BOOL_FIELDS:
            body.append(f"        w.put<uint8_t>(raw_field<uint8_t>(o, fbs::{name}::VT_{f.upper()}, 0));")
        else:
            assert _KIND_SIZE[kinds[f]] == struct.calcsize("<" + code), \
                f"{t.name}.{f}: the schema's {kinds[f]} is not the record's {code}"
            body.append(f"        w.put<{ctype}>(static_cast<{ctype}>(o->{f}()));")
    for f in tails:
        per = _TAIL_KINDS[kinds[f]]
        body += [f"        if (n_{f})",
                 f"            w.raw(o->{f}()->Data(), {per} * size_t(n_{f}));" if per > 1 else
                 f"            w.raw(o->{f}()->Data(), n_{f});"]
    if bodies:
        a, b = (bodies + [None])[:2]
        body.append(f"        bodies(t, o, start, rec::k{name}, o->{a}(), {_c_string(a)}, "
                    + (f"o->{b}(), {_c_string(b)}" if b else "nullptr, nullptr") + ", here, depth);")
    return head + body + ["        return;", "    }"]


def render() -> str:
    """The text of the header."""
    lines = [
        "// wrpk_op_writer.h -- GENERATED by tools/gen_op_writer.py; DO NOT EDIT.",
        "// From the op table (wrpkit.model OP_CLASSES), wrpkit/formats/wrp1_layout.py and schema/wrp.fbs.",
        "//",
        "// The body of ManifestDecoder (native/src/wrpk_reader.cpp): op() writes the WRP1 record of one",
        "// op table of a .wrpk manifest, field by field in the record's order, pads as zeros, the record",
        "// fields that say a variable part's length from that part, the variable part after the record.",
        "// Included inside the class; it uses the class's Writer `ops_`, head(), check_bool(), bad(),",
        "// and the two ops written by hand: launch() and bodies() (IF/WHILE).  Regenerate with",
        "// `python tools/gen_op_writer.py` (tests/formats/test_op_table.py fails on drift).",
        "",
        "void op(uint8_t t, const void* table, const Path& here, uint32_t depth)",
        "{",
        "    Writer& w = ops_;",
        "    switch (t) {",
    ]
    for t in sorted(m.OP_CLASSES):
        lines += _case(t)
    lines += ["    default:",
              '        bad(here.field("op_type"), table, "op type %u is unknown", t);  // excluded by op_list()',
              "    }",
              "}",
              ""]
    return "\n".join(("    " + x if x and not x.startswith("//") else x) for x in lines)


def main() -> int:
    return write_or_check(render, HEADER, __doc__, "python tools/gen_op_writer.py")


if __name__ == "__main__":
    sys.exit(main())
