"""The array descriptors the C++ validator reads inside a launch's argument bytes come from the Python
layout (wrpkit/formats/wrp1_layout.py ARRAY_RECORD / INDEXED_ARRAY_RECORD) through the generated
native/src/wrp1_layouts.h: compiled, the header gives the offsets and sizes Python's struct gives, and
those are the offsets of Warp's own ctypes array_t / indexedarray_t."""

from __future__ import annotations

import ctypes
import sys

from header_printer import needs_cxx, printed_lines
from wrpkit.formats.wrp1_layout import ARRAY_RECORD, INDEXED_ARRAY_RECORD
from proc_helpers import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import gen_layout  # noqa: E402

PRINTER = r"""
#include <cstdio>
#include "wrp1_layouts.h"
using namespace wrp;
static void f(const char* n, FieldAt a) { std::printf(" %s=%d:%d", n, a.offset, a.size); }
int main() {
    const ArrayRecord& a = kArrayRecord;
    std::printf("array_t %u", a.record_size);
    f("data", a.data); f("grad", a.grad); f("shape", a.shape); f("strides", a.strides); f("ndim", a.ndim);
    f("flags", a.flags); f("_pad", a.pad);
    const IndexedArrayRecord& i = kIndexedArrayRecord;
    std::printf("\nindexedarray_t %u", i.record_size);
    f("data", i.data); f("grad", i.grad); f("shape", i.shape); f("strides", i.strides); f("ndim", i.ndim);
    f("flags", i.flags); f("_pad", i.pad); f("indices", i.indices); f("index_shape", i.index_shape);
    std::printf("\n");
}
"""


def _python_rows() -> list:
    rows = []
    for rl in (ARRAY_RECORD, INDEXED_ARRAY_RECORD):
        offs = gen_layout.field_offsets(rl)
        rows.append(f"{rl.name} {rl.size}" + "".join(f" {n}={offs[n][0]}:{offs[n][1]}" for n in rl.names))
    return rows


@needs_cxx
def test_compiled_array_descriptors_match_python(tmp_path):
    assert printed_lines(PRINTER, ROOT / "native" / "src", tmp_path) == _python_rows()


def test_array_descriptors_are_warps_ctypes_layout():
    """The offsets are those of the installed Warp's array_t and indexedarray_t (what capture packs)."""
    import warp._src.types as wt

    for rl, ctype in ((ARRAY_RECORD, wt.array_t), (INDEXED_ARRAY_RECORD, wt.indexedarray_t)):
        assert rl.size == ctypes.sizeof(ctype), rl.name
    offs = gen_layout.field_offsets(ARRAY_RECORD)
    for name in ("data", "grad", "shape", "strides", "ndim"):
        assert offs[name][0] == getattr(wt.array_t, name).offset, name
    ioffs = gen_layout.field_offsets(INDEXED_ARRAY_RECORD)
    assert wt.indexedarray_t.data.offset == 0 and ioffs["data"][0] == 0
    assert ioffs["indices"][0] == wt.indexedarray_t.indices.offset
    assert ioffs["index_shape"][0] == wt.indexedarray_t.shape.offset


def test_python_reads_the_descriptors_at_the_layout_offsets():
    """Python reads array descriptors at the offsets the layout declares (the ones the header is
    generated from), and no reader of launch arguments spells one as a literal."""
    import re

    from wrpkit.formats import launch_arrays as la

    assert (la._NDIM, la._SHAPE, la._STRIDES) == tuple(gen_layout.field_offsets(ARRAY_RECORD)[f][0]
                                                        for f in ("ndim", "shape", "strides"))
    assert (la.INDICES_OFFSET, la._INDEX_SHAPE) == tuple(gen_layout.field_offsets(INDEXED_ARRAY_RECORD)[f][0]
                                                         for f in ("indices", "index_shape"))
    literal = re.compile(r"(base|offset|\bo) \+ (16|32|48|56|88|104)\b|unpack_from\(\w+, \w+ \+ \d+\)")
    for rel in ("wrpkit/formats/launch_arrays.py", "wrpkit/checks/launch_checks.py", "wrpkit/checks/check.py",
                "wrpkit/checks/effects.py", "wrpkit/checks/region_types.py"):
        code = "\n".join(line for line in (ROOT / rel).read_text().splitlines()
                         if not line.lstrip().startswith(("#", '"', "``")))
        assert not literal.search(code), (rel, literal.search(code))


def _region_reference_printer() -> str:
    from wrpkit.ops import OP_CLASSES

    calls = "".join(f'    r("{cls.__name__}", op_regions::k{cls.__name__}_{ref.role});\n'
                    for t, cls in sorted(OP_CLASSES.items()) for ref in cls.REGIONS or ())
    return ('#include <cstdio>\n#include "wrp1_layouts.h"\nusing namespace wrp;\n'
            'static void r(const char* op, const RegionRefAt& x) { std::printf("%s %s %d %d %d\\n", op, x.role, '
            'x.region_id.offset, x.offset.offset, x.optional); }\nint main() {\n' + calls + "}\n")


@needs_cxx
def test_compiled_region_references_are_the_op_tables(tmp_path):
    """Every REGIONS entry of wrpkit/ops.py is in the header, at its record fields' offsets."""
    from wrpkit.formats import wrp1_layout as L
    from wrpkit.ops import OP_CLASSES

    want = []
    for t, cls in sorted(OP_CLASSES.items()):
        for ref in cls.REGIONS or ():
            offs = gen_layout.field_offsets(L.LAYOUT_18.ops[t], 8)
            off = offs[ref.offset][0] if ref.offset else -1
            want.append(f"{cls.__name__} {ref.role} {offs[ref.region][0]} {off} {int(ref.optional)}")
    assert len(want) >= 40
    assert printed_lines(_region_reference_printer(), ROOT / "native" / "src", tmp_path) == want
