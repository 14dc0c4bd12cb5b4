"""Generate native/src/wrp1_layouts.h (wrp-replay's per-format tables) from wrpkit/formats/wrp1_layout.py.

It also holds the op types (the C++ enum and their names) from the op table, and every op record's
field offsets and region references; tools/gen_op_writer.py writes the bundle reader's op records.

Run after every change to wrp1_layout.py:  python tools/gen_layout.py
The Python module is the single place where the WRP1 formats differ (one
FormatLayout per format); the C++ validator, the .wrpk reader and wrp-replay
read the same facts from the header this writes, so the two validators cannot
drift apart.  tests/formats/test_layout_header.py fails if the committed header
differs from what this script writes now.  Never edit the header by hand.

Usage:
    python tools/gen_layout.py                 # rewrite native/src/wrp1_layouts.h
    python tools/gen_layout.py --check         # exit 1 if it is stale
    python tools/gen_layout.py --out FILE      # write elsewhere
"""

from __future__ import annotations

import argparse
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "native" / "src" / "wrp1_layouts.h"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wrpkit.formats import wrp1_layout as L  # noqa: E402
from wrpkit.model import OpType  # noqa: E402

#: Fields of the launch record's fixed part, in the order of the C++ struct.
LAUNCH_FIELDS = ["shape", "ndim", "size", "dim", "max_blocks", "block_dim", "smem_bytes", "grid_stride",
                 "is_forward", "cluster_dim", "_pad1", "kernel_key_len", "module_hash_len", "num_params", "_pad2",
                 "num_relocs", "value_data_size", "num_handle_offsets"]
LEGACY_ARG_FIELDS = ["is_array", "ndim", "param_index", "region_id", "byte_offset", "shape", "strides",
                     "element_size", "_pad"]
_TOKEN = re.compile(r"(\d*)([a-zA-Z?])")


def field_offsets(rec: L.RecordLayout, base: int = 0) -> dict:
    """``{name: (offset, size of one element, count, signed)}`` of a record's fields, from ``base``."""
    tokens = _TOKEN.findall(rec.struct.format.lstrip("<=>!@"))
    assert len(tokens) == len(rec.names), (rec.name, tokens, rec.names)
    out = {}
    pos = base
    for name, (count, code) in zip(rec.names, tokens):
        n = int(count or 1)
        if code == "s":
            size, n, signed = n, 1, False
        else:
            size, signed = struct.calcsize("<" + code), code in "bhilqd"
        out[name] = (pos, size, n, signed)
        pos += size * n
    assert pos - base == rec.size, rec.name
    # the offsets Python reads records with (RecordLayout.offsets) are the ones written here
    assert {n: v[0] - base for n, v in out.items()} == rec.offsets, rec.name
    return out


def _cname(name: str) -> str:
    return name.lstrip("_")


def _field(offsets: dict, name: str) -> str:
    if name not in offsets:
        return "{-1, 0, false}"
    off, size, _, signed = offsets[name]
    return f"{{{off}, {size}, {'true' if signed else 'false'}}}"


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _module_record_min(layout: L.FormatLayout) -> int:
    n = 3 * 4 + 4  # module_hash, module_name, binary_filename (empty), target_arch
    if layout.module_extras:
        n += 3 * 4 + 2 + layout.recipe.size  # three more strings, kind, fallback reason, recipe
    return n


def _record_name(t) -> str:
    from wrpkit.model import OP_CLASSES  # noqa: PLC0415

    return OP_CLASSES[t].__name__


def op_records() -> list:
    """C++ tables of every fixed op record: each field's offset from the start of the op (its 8-byte
    header included), size and sign, and the record's size.  Op records are the same in every format
    that has them (wrp1_layout.py's formats differ only in which op types they list)."""
    lines = ["// Every fixed op record (after the 8-byte op header), as wrpkit/model.py's op table and",
             "// wrp1_layout.py declare it: field offsets count from the start of the op, and record_size",
             "// is the op header plus the fixed record (a variable part follows MEMCPY_H2D, MEMTILE,",
             "// IF/WHILE and BSR_TRANSPOSE).  The same in every format that has the op type.  pad* are",
             "// reserved bytes.",
             "namespace op_record {", ""]
    done = {}
    for t, rl in sorted(L.LAYOUT_18.ops.items()):
        if id(rl) in done:
            lines += [f"// {t.name} shares {done[id(rl)].name}'s record.",
                      f"constexpr auto k{_record_name(t)} = k{_record_name(done[id(rl)])};", ""]
            continue
        done[id(rl)] = t
        name = _record_name(t)
        off = field_offsets(rl, 8)
        fields = [_cname(f) for f in rl.names]
        lines += [f"struct {name} {{  // {t.name}",
                  "    uint32_t record_size;  // op header + fixed record",
                  "    FieldAt " + ", ".join(fields) + ";",
                  "};",
                  f"constexpr {name} k{name} = {{{8 + rl.size},",
                  "    " + ", ".join(_field(off, f) for f in rl.names) + "};", ""]
    lines += ["}  // namespace op_record", ""]
    lines += _region_references()
    lines += _argument_records()
    return lines


#: C++ names of the op table's byte-length terms (wrpkit/model.py LENGTH_KINDS), in enum order.
_LENGTH_KINDS = ("Fixed", "Field", "RawField", "ScalarSize", "Sum", "Product", "Max", "Strided", "IfEq", "Adjacent",
                 "TailLast")


class _LengthNodes:
    """The byte-length terms of every region reference, flattened into one node array (children
    before their parent; a reference points at its root)."""

    def __init__(self):
        self.rows = []

    def _add(self, kind: str, comment: str, field: str = "{-1, 0, false}", name: str = "", value: int = 0,
             args=()) -> int:
        args = list(args) + [0] * (4 - len(args))
        self.rows.append(f"    {{LengthKind::k{kind}, {field}, {_c_string(name)}, {value}u, "
                         f"{{{', '.join(map(str, args))}}}}},  // {len(self.rows)}: {comment}")
        return len(self.rows) - 1

    def add(self, term, offsets: dict) -> int:
        """Append ``term`` (a wrpkit.model.Length) and its children; return its node index."""
        from wrpkit import model as m  # noqa: PLC0415

        def field(name):
            assert name in offsets, f"length term names {name!r}, which the record lacks"
            return _field(offsets, name)

        if isinstance(term, m.Fixed):
            return self._add("Fixed", str(term.n), value=term.n)
        if isinstance(term, m.Field):
            return self._add("Field", term.name, field(term.name), term.name)
        if isinstance(term, m.Len):  # the record field that says the variable part's length
            return self._add("Field", f"{term.record_field} (len {term.model_field})", field(term.record_field),
                             term.record_field)
        if isinstance(term, m.ScalarSize):
            return self._add("ScalarSize", f"size of APICType {term.name}", field(term.name), term.name)
        if isinstance(term, (m.Sum, m.Product, m.Max)):
            a, b = self.add(term.a, offsets), self.add(term.b, offsets)
            return self._add(type(term).__name__, f"{type(term).__name__}({a}, {b})", args=(a, b))
        if isinstance(term, m.Strided):
            args = [self.add(t, offsets) for t in term.children()]
            return self._add("Strided", "Strided(count, stride, lanes, scalar)", args=args)
        if isinstance(term, m.IfEq):
            a, b = self.add(term.then, offsets), self.add(term.otherwise, offsets)
            return self._add("IfEq", f"{term.name} == {int(term.value)} ? {a} : {b}", field(term.name), term.name,
                             int(term.value), (a, b))
        if isinstance(term, m.Adjacent):
            args = [self._add("RawField", f, field(f), f) for f in term.fields()]
            return self._add("Adjacent", f"{term.second} {term.gap} bytes after {term.first}", value=term.gap,
                             args=args)
        if isinstance(term, m.TailLast):
            other = self.add(term.otherwise, offsets)
            return self._add("TailLast", f"last int32 of {term.model_field}, else {other}", args=(other,))
        raise TypeError(f"{term!r} is not a term of the byte-length vocabulary (wrpkit.model.LENGTH_KINDS)")


def _region_references() -> list:
    """Every region reference of the op table (wrpkit/model.py REGIONS), per op type: the role, its
    region-id and offset fields, whether region -1 means absent, and its byte length as a tree of
    terms (model.py's ``Length`` vocabulary) that region_lengths.h evaluates."""
    from wrpkit.model import LENGTH_KINDS, OP_CLASSES, OpType  # noqa: PLC0415

    # Len is written as the record field that says the length; RawField only serves Adjacent.
    assert {k.__name__ for k in LENGTH_KINDS} - {"Len"} == set(_LENGTH_KINDS) - {"RawField"}, \
        "wrpkit.model.LENGTH_KINDS changed: teach gen_layout.py and region_lengths.h the new term"
    nodes, refs, named, spans = _LengthNodes(), [], [], ["{0, 0}"] * (max(OpType) + 1)
    for t, rl in sorted(L.LAYOUT_18.ops.items()):
        cls = OP_CLASSES[t]
        off = field_offsets(rl, 8)
        first = len(refs)
        for ref in cls.REGIONS or ():
            root = nodes.add(ref.length, off)
            named.append(f"inline constexpr const RegionRefAt& k{cls.__name__}_{ref.role} = kRegionRefs[{len(refs)}];")
            refs.append(f"    {{{_c_string(ref.role)}, {_field(off, ref.region)}, {_field(off, ref.offset or '')}, "
                        f"{'true' if ref.optional else 'false'}, {root}}},  // {len(refs)}: {t.name}")
        spans[int(t)] = f"{{{first}, {len(refs) - first}}}"
    lines = ["// The byte length of a region reference, as data: a tree of the terms of wrpkit/model.py's",
             "// Length vocabulary (LENGTH_KINDS), children first.  region_lengths.h evaluates a tree with",
             "// checked 64-bit arithmetic over the op's record bytes, as Length.evaluate does over the model.",
             "enum class LengthKind : uint8_t {",
             "    " + ", ".join(f"k{k}" for k in _LENGTH_KINDS) + ",",
             "};",
             "struct LengthNode {",
             "    LengthKind kind;",
             "    FieldAt field;     // Field, RawField (no sign check), ScalarSize, IfEq: the record field",
             "    const char* name;  // that field's name (for messages)",
             "    uint64_t value;    // Fixed: the constant; IfEq: the value compared; Adjacent: the gap",
             "    uint16_t arg[4];   // the child nodes (Sum/Product/Max: 2, Strided: 4, IfEq: then, else,",
             "                       // Adjacent: region a, offset a, region b, offset b, TailLast: else)",
             "};",
             "",
             "// Each op record's region references, as wrpkit/model.py's op table (REGIONS) declares them:",
             "// role, the region-id field, the offset field (offset -1: none, the range starts at 0),",
             "// whether region -1 means the reference is absent, and the root of its byte-length tree.",
             "struct RegionRefAt {",
             "    const char* role;",
             "    FieldAt region_id, offset;",
             "    bool optional;",
             "    uint16_t length;  // index into op_regions::kLengthNodes",
             "};",
             "// The references of one op type: kRegionRefs[first, first + count).",
             "struct OpRegionRefs {",
             "    uint16_t first, count;",
             "};",
             "namespace op_regions {",
             "",
             "constexpr LengthNode kLengthNodes[] = {"] + nodes.rows + [
             "};",
             "",
             "constexpr RegionRefAt kRegionRefs[] = {"] + refs + [
             "};",
             "",
             "// Indexed by op type; {0, 0}: none (KERNEL_LAUNCH takes its regions from its arguments).",
             "constexpr OpRegionRefs kOpRegionRefs[kNumOpTypes] = {" + ", ".join(spans) + "};",
             ""] + named + ["", "}  // namespace op_regions", ""]
    return lines


def _argument_records() -> list:
    """The launch parameter record (formats 10+; its fields are the model's LaunchParam), the
    relocation record and the two array descriptors, each field's offset from the record's start."""
    from wrpkit.model import LaunchParam  # noqa: PLC0415

    params = {L.LAYOUTS[v].launch_param.format for v in L.LAYOUTS if not L.LAYOUTS[v].legacy_args}
    assert len(params) == 1, "the launch parameter record differs between formats"
    codes = _TOKEN.findall(params.pop().lstrip("<"))
    assert len(codes) == len(LaunchParam._fields)
    param = L.RecordLayout("launch_param", [(n, c + k) for n, (c, k) in zip(LaunchParam._fields, codes)])
    out = ["// APICLaunchParamRecord (formats 10+, the model's LaunchParam), APICLaunchPtrLocation, and",
           "// the array_t / indexedarray_t descriptors inside a launch argument's value bytes (formats",
           "// 10+; wrp1_layout.py ARRAY_RECORD): field offsets from the start of each record.", ""]
    records = ((param, "LaunchParamRecord"), (L.LAYOUT_18.reloc, "RelocationRecord"),
               (L.ARRAY_RECORD, "ArrayRecord"), (L.INDEXED_ARRAY_RECORD, "IndexedArrayRecord"))
    for rl, cname in records:
        off = field_offsets(rl)
        out += [f"struct {cname} {{",
                "    uint32_t record_size;",
                "    FieldAt " + ", ".join(_cname(f) for f in rl.names) + ";",
                "};",
                f"constexpr {cname} k{cname} = {{{rl.size},",
                "    " + ", ".join(_field(off, f) for f in rl.names) + "};", ""]
    return out


def op_enum_name(t) -> str:
    """The C++ enumerator of an op type: ``kOp`` and its schema table's name (``kOpMemcpyH2D``), which
    is its model class's name (MEMCPY_D2H, which Warp reserves, has no class)."""
    from wrpkit.formats.wrpk.tables import OP_TABLES  # noqa: PLC0415
    from wrpkit.model import OP_CLASSES  # noqa: PLC0415

    cls = OP_CLASSES.get(t)
    assert cls is None or cls.__name__ == OP_TABLES[t], f"{t.name}: class {cls.__name__} is not {OP_TABLES[t]}"
    return "kOp" + OP_TABLES[t]


def op_types() -> list:
    """The op types (wrpkit/model.py OpType) as a C++ enum, and their names."""
    names = ["nullptr"] * (max(OpType) + 1)
    for t in OpType:
        names[int(t)] = _c_string(t.name)
    return ["// The op types: the op table's OpType (wrpkit.model; Warp's APIC_OP_* numbers) and their names.",
            "enum OpType : uint32_t {"] + [f"    {op_enum_name(t)} = {int(t)}," for t in OpType] + [
            "};",
            "constexpr const char* kOpNames[kNumOpTypes] = {"] + [
            "    " + ", ".join(names[i:i + 5]) + "," for i in range(0, len(names), 5)] + [
            "};",
            "",
            "// The name of an op type (\"MEMSET\"), or \"unknown\".",
            "constexpr const char* op_name(uint32_t op_type)",
            "{",
            "    return op_type < kNumOpTypes && kOpNames[op_type] ? kOpNames[op_type] : \"unknown\";",
            "}",
            ""]


def render() -> str:
    """The text of the header."""
    num_ops = max(OpType) + 1
    lines = [
        "// wrp1_layouts.h -- GENERATED by tools/gen_layout.py from wrpkit/formats/wrp1_layout.py; DO NOT EDIT.",
        "//",
        "// Everything in the WRP1 byte layout that differs between APIC format versions, one",
        "// FormatLayout per format that a Warp release wrote (and 13, which Warp 1.15 to 1.18 load).",
        "// The C++ validator branches on these entries, never on version numbers, so that it applies",
        "// each format's own rules exactly as wrpkit's Python validator does.  Regenerate with",
        "// `python tools/gen_layout.py` after changing wrp1_layout.py (tests/formats/test_layout_header.py",
        "// fails on drift).",
        "#pragma once",
        "",
        "#include <cstddef>",
        "#include <cstdint>",
        "",
        "namespace wrp {",
        "",
        "// A field of a fixed record: byte offset from the start of the record (for launches, from",
        "// the start of the op, its 8-byte header included), the size of one element, and whether",
        "// it is signed.  Offset -1: the format has no such field.",
        "struct FieldAt {",
        "    int16_t offset;",
        "    uint8_t size;",
        "    bool is_signed;",
        "    constexpr bool present() const { return offset >= 0; }",
        "};",
        "",
        "// The fixed part of a KERNEL_LAUNCH record (APICLaunchRecord).  `shape` is 4 extents of",
        "// shape.size bytes each; pad1/pad2 are reserved bytes (size = their count) that must be 0.",
        "struct LaunchLayout {",
        "    uint32_t fixed_size;  // op header + fixed part: where the kernel key starts",
        "    FieldAt " + ", ".join(_cname(f) for f in LAUNCH_FIELDS[:8]) + ";",
        "    FieldAt " + ", ".join(_cname(f) for f in LAUNCH_FIELDS[8:]) + ";",
        "};",
        "",
        "// Format 3's argument descriptor (88-byte APICLaunchParamRecord); offsets from its start.",
        "struct LegacyArgLayout {",
        "    uint32_t size;",
        "    FieldAt " + ", ".join(_cname(f) for f in LEGACY_ARG_FIELDS) + ";",
        "};",
        "",
        f"constexpr uint32_t kNumOpTypes = {num_ops};  // op types 0..{num_ops - 1}",
        "",
    ] + op_types() + [
        "struct FormatLayout {",
        "    uint32_t version;",
        "    const char* releases;   // the Warp releases that write it (\"\" if none)",
        "    const char* loaded_by;  // the Warp releases whose capture_load accepts it",
        "    bool producer_version;    // metadata: str producer Warp version after the format version",
        "    bool module_extras;       // module records: digests, source, kind, fallback reason, recipe",
        "    bool legacy_args;         // launches: 88-byte argument descriptors + u32 handle offsets",
        "    bool kernels_by_key;      // Warp keys kernel records by kernel key alone",
        "    bool bsr_transpose_tail;  // BSR_TRANSPOSE may carry the int32 capacity tail",
        "    bool bsr_nnz_region;      // BSR_FROM_TRIPLETS may name a bsr_nnz region (-1 if absent)",
        "    uint32_t module_record_min_size;  // a module record with empty strings",
        "    uint32_t mesh_record_size;",
        "    uint32_t pointer_location_size;  // 20 (no count) or 28",
        "    uint32_t launch_param_size;      // APICLaunchParamRecord of formats 10+",
        "    uint32_t relocation_size;        // APICLaunchPtrLocation",
        "    LaunchLayout launch;",
        "    // Fixed record size of every op type, op header included; 0: not in this format.",
        "    // KERNEL_LAUNCH: launch.fixed_size; MEMCPY_H2D, MEMTILE, BSR_TRANSPOSE and IF/WHILE",
        "    // records are this size plus their variable part.",
        "    uint32_t op_size[kNumOpTypes];",
        "};",
        "",
        f"constexpr uint32_t kCurrentFormat = {L.CURRENT_FORMAT};  // what wrpkit upgrades to",
        "",
    ]
    la = L.LEGACY_ARG_RECORD
    lo = field_offsets(la)
    lines += ["constexpr LegacyArgLayout kLegacyArg = {",
              f"    {la.size}, " + ", ".join(_field(lo, f) for f in LEGACY_ARG_FIELDS) + "};", ""]
    lines += ["constexpr FormatLayout kFormatLayouts[] = {"]
    for v in sorted(L.LAYOUTS):
        layout = L.LAYOUTS[v]
        off = field_offsets(layout.launch, 8)
        ops = [0] * num_ops
        ops[OpType.KERNEL_LAUNCH] = layout.launch_fixed_size
        for t, rl in layout.ops.items():
            ops[int(t)] = 8 + rl.size
        b = lambda x: "true" if x else "false"  # noqa: E731
        lines += [
            f"    {{{v}, {_c_string(layout.releases)}, {_c_string(layout.loaded_by)},",
            f"     {b(layout.producer_version)}, {b(layout.module_extras)}, {b(layout.legacy_args)}, "
            f"{b(layout.kernels_by_key)}, {b(layout.bsr_transpose_tail)}, {b(layout.bsr_nnz_region)},",
            f"     {_module_record_min(layout)}, {layout.mesh.size}, {layout.pointer_location.size}, "
            f"{layout.launch_param.size}, {layout.reloc.size},",
            f"     {{{layout.launch_fixed_size},",
            "      " + ", ".join(_field(off, f) for f in LAUNCH_FIELDS[:8]) + ",",
            "      " + ", ".join(_field(off, f) for f in LAUNCH_FIELDS[8:]) + "},",
            "     {" + ", ".join(map(str, ops)) + "}},",
        ]
    lines += ["};", ""]
    lines += op_records()
    lines += ["// The layout of `version`, or nullptr for a format no Warp release wrote.",
              "constexpr const FormatLayout* find_format_layout(uint32_t version)",
              "{",
              "    for (const FormatLayout& l : kFormatLayouts)",
              "        if (l.version == version)",
              "            return &l;",
              "    return nullptr;",
              "}",
              "",
              "}  // namespace wrp", ""]
    return "\n".join(lines)


def write_or_check(render_text, default_out: Path, doc: str, regenerate: str) -> int:
    """The command line of a header generator: write ``render_text()`` to ``--out`` (default
    ``default_out``), or with ``--check`` exit 1 if the file differs (``regenerate``: what to run)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out, help="file to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if the file differs")
    a = ap.parse_args()
    text = render_text()
    if a.check:
        current = a.out.read_text() if a.out.is_file() else ""
        if current != text:
            print(f"{a.out} is stale: run {regenerate}", file=sys.stderr)
            return 1
        return 0
    a.out.write_text(text)
    print(a.out)
    return 0


def main() -> int:
    return write_or_check(render, HEADER, __doc__, "python tools/gen_layout.py")


if __name__ == "__main__":
    sys.exit(main())
