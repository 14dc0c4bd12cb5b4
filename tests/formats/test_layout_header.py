"""native/src/wrp1_layouts.h is generated from wrpkit/formats/wrp1_layout.py, the one place where the WRP1
formats differ: the committed header must be what tools/gen_layout.py writes now, and what it says must be
what the Python layouts say (checked by compiling the header and printing its tables)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys

import pytest
from proc_helpers import ROOT

HEADER = ROOT / "native" / "src" / "wrp1_layouts.h"
sys.path.insert(0, str(ROOT / "tools"))

import gen_layout  # noqa: E402
from wrpkit.formats.wrp1_layout import CURRENT_FORMAT, LAYOUTS, LEGACY_ARG_RECORD  # noqa: E402
from wrpkit.apic_types import OpType  # noqa: E402


def test_committed_header_matches_the_python_layouts():
    assert HEADER.read_text() == gen_layout.render(), (
        "native/src/wrp1_layouts.h drifted from wrpkit/formats/wrp1_layout.py: run python tools/gen_layout.py")


def test_check_mode_fails_on_a_stale_header(tmp_path):
    fresh = tmp_path / "fresh.h"
    stale = tmp_path / "stale.h"
    cmd = [sys.executable, str(ROOT / "tools" / "gen_layout.py")]
    assert subprocess.run(cmd + ["--out", str(fresh)], capture_output=True).returncode == 0
    stale.write_text(fresh.read_text().replace("{76,", "{80,", 1))  # format 10's launch size, edited
    assert subprocess.run(cmd + ["--check", "--out", str(fresh)], capture_output=True).returncode == 0
    res = subprocess.run(cmd + ["--check", "--out", str(stale)], capture_output=True, text=True)
    assert res.returncode == 1 and "stale" in res.stderr


PRINTER = r"""
#include <cstdio>
#include "wrp1_layouts.h"
using namespace wrp;
static void f(const char* n, FieldAt a) { if (a.present()) std::printf(" %s=%d:%d:%d", n, a.offset, a.size, a.is_signed); }
int main() {
    for (const FormatLayout& l : kFormatLayouts) {
        const LaunchLayout& L = l.launch;
        std::printf("%u %s|%s|%d%d%d%d%d%d %u %u %u launch=%u", l.version, l.releases, l.loaded_by, l.producer_version,
                    l.module_extras, l.legacy_args, l.kernels_by_key, l.bsr_transpose_tail, l.bsr_nnz_region,
                    l.module_record_min_size, l.pointer_location_size, l.mesh_record_size, L.fixed_size);
        f("shape", L.shape); f("ndim", L.ndim); f("size", L.size); f("dim", L.dim); f("max_blocks", L.max_blocks);
        f("block_dim", L.block_dim); f("smem_bytes", L.smem_bytes); f("grid_stride", L.grid_stride);
        f("is_forward", L.is_forward); f("cluster_dim", L.cluster_dim); f("_pad1", L.pad1);
        f("kernel_key_len", L.kernel_key_len); f("module_hash_len", L.module_hash_len); f("num_params", L.num_params);
        f("_pad2", L.pad2); f("num_relocs", L.num_relocs); f("value_data_size", L.value_data_size);
        f("num_handle_offsets", L.num_handle_offsets);
        std::printf(" ops=");
        for (uint32_t t = 0; t < kNumOpTypes; t++) std::printf("%u,", l.op_size[t]);
        std::printf("\n");
    }
    std::printf("legacy %u %d %d %d %d\n", kLegacyArg.size, kLegacyArg.region_id.offset, kLegacyArg.shape.offset,
                kLegacyArg.element_size.offset, kLegacyArg.pad.offset);
    std::printf("current %u\n", kCurrentFormat);
}
"""


def _expected_line(v, layout) -> str:
    """The printer's line for one format, computed from the Python layout by struct.calcsize of prefixes."""
    fmt = layout.launch.struct.format
    codes = gen_layout._TOKEN.findall(fmt.lstrip("<"))
    fields = []
    for i, name in enumerate(layout.launch.names):
        off = 8 + struct.calcsize("<" + "".join(c + k for c, k in codes[:i]))
        count, code = codes[i]
        size = int(count or 1) if code == "s" else struct.calcsize("<" + code)
        fields.append((name, off, size, int(code in "bhilq")))
    order = ["shape", "ndim", "size", "dim", "max_blocks", "block_dim", "smem_bytes", "grid_stride", "is_forward",
             "cluster_dim", "_pad1", "kernel_key_len", "module_hash_len", "num_params", "_pad2", "num_relocs",
             "value_data_size", "num_handle_offsets"]
    by = {n: (o, s, sg) for n, o, s, sg in fields}
    assert set(by) <= set(order), set(by) - set(order)
    ops = [0] * (max(OpType) + 1)
    ops[OpType.KERNEL_LAUNCH] = layout.launch_fixed_size
    for t, rl in layout.ops.items():
        ops[t] = 8 + rl.size
    flags = "".join(str(int(x)) for x in (layout.producer_version, layout.module_extras, layout.legacy_args,
                                          layout.kernels_by_key, layout.bsr_transpose_tail, layout.bsr_nnz_region))
    extras = 3 * 4 + 2 + layout.recipe.size if layout.module_extras else 0
    return (f"{v} {layout.releases}|{layout.loaded_by}|{flags} {16 + extras} {layout.pointer_location.size} "
            f"{layout.mesh.size} launch={layout.launch_fixed_size}"
            + "".join(f" {n}={by[n][0]}:{by[n][1]}:{by[n][2]}" for n in order if n in by)
            + " ops=" + "".join(f"{n}," for n in ops))


def test_compiled_header_says_what_the_python_layouts_say(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    src = tmp_path / "p.cpp"
    src.write_text(PRINTER)
    exe = tmp_path / "p"
    subprocess.run([cxx, "-std=c++17", "-I", str(HEADER.parent), str(src), "-o", str(exe)], check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[:-2] == [_expected_line(v, LAYOUTS[v]) for v in sorted(LAYOUTS)]
    la = LEGACY_ARG_RECORD
    assert lines[-2] == f"legacy {la.size} 4 16 80 84" and la.size == 88
    assert lines[-1] == f"current {CURRENT_FORMAT}"


def test_compiled_op_records_say_what_the_op_table_and_layouts_say(tmp_path):
    """Every op record's field offsets and size in wrp1_layouts.h (read by wrp1_ops.cpp and
    wrpk_reader.cpp instead of literals) are the Python layout's, and every region reference of the
    op table (wrpkit.model REGIONS) is a field the C++ can read."""
    from wrpkit.ops import OP_CLASSES  # noqa: PLC0415

    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    body, want = [], []
    for t, rl in sorted(LAYOUTS[CURRENT_FORMAT].ops.items()):
        name = OP_CLASSES[t].__name__
        codes = gen_layout._TOKEN.findall(rl.struct.format.lstrip("<"))
        body.append(f'std::printf("{t.name} %u", op_record::k{name}.record_size);')
        line = f"{t.name} {8 + rl.size}"
        for i, f in enumerate(rl.names):
            off = 8 + struct.calcsize("<" + "".join(c + k for c, k in codes[:i]))
            count, code = codes[i]
            size = int(count or 1) if code == "s" else struct.calcsize("<" + code)
            c = f.lstrip("_")
            body.append(f'std::printf(" {c}=%d:%d", op_record::k{name}.{c}.offset, op_record::k{name}.{c}.size);')
            line += f" {c}={off}:{size}"
        body.append('std::printf("\\n");')
        want.append(line)
        for ref in OP_CLASSES[t].REGIONS:
            for fld in (ref.region, ref.offset):
                assert fld is None or fld in rl.names, (t.name, fld)
    from wrpkit.formats.wrp1_layout import LAYOUT_18  # noqa: PLC0415
    from wrpkit.ops import LaunchParam  # noqa: PLC0415

    codes = gen_layout._TOKEN.findall(LAYOUT_18.launch_param.format.lstrip("<"))
    for cname, names, cs, size in (("LaunchParamRecord", LaunchParam._fields, codes, LAYOUT_18.launch_param.size),
                                   ("RelocationRecord", LAYOUT_18.reloc.names,
                                    gen_layout._TOKEN.findall(LAYOUT_18.reloc.struct.format.lstrip("<")),
                                    LAYOUT_18.reloc.size)):
        body.append(f'std::printf("{cname} %u", k{cname}.record_size);')
        line = f"{cname} {size}"
        for i, f in enumerate(names):
            off = struct.calcsize("<" + "".join(c + k for c, k in cs[:i]))
            c = f.lstrip("_")
            body.append(f'std::printf(" {c}=%d", k{cname}.{c}.offset);')
            line += f" {c}={off}"
        body.append('std::printf("\\n");')
        want.append(line)
    src = tmp_path / "ops.cpp"
    src.write_text('#include <cstdio>\n#include "wrp1_layouts.h"\nusing namespace wrp;\nint main() {\n'
                   + "\n".join(body) + "\n}\n")
    exe = tmp_path / "ops"
    subprocess.run([cxx, "-std=c++17", "-I", str(HEADER.parent), str(src), "-o", str(exe)], check=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines() == want


def test_the_cxx_op_readers_read_no_literal_offsets():
    """wrp1_ops*.cpp reads op record fields through op_record:: (no op.get<T>(24)) and the argument
    records through kLaunchParamRecord/kRelocationRecord, and wrpk_reader.cpp
    sizes each op record with op_record::...record_size (no head(t, 64, ...))."""
    import re  # noqa: PLC0415

    # wrp1_ops.cpp and the files split from it (wrp1_ops.h, wrp1_ops_launch.cpp)
    ops = "\n".join(p.read_text() for p in sorted((ROOT / "native" / "src").glob("wrp1_ops*")))
    assert "launch_head" in ops and "rec::kScan" in ops
    assert not re.findall(r"op\.get<\w+>\(\d+\)|op\.p\[\d+\]", ops)
    # launch parameter and relocation records: through kLaunchParamRecord / kRelocationRecord
    assert not re.findall(r"\b(po|ro|rel) \+ \d+\b", ops)
    reader = (ROOT / "native" / "src" / "wrpk_reader.cpp").read_text()
    assert not re.findall(r"head\(t, \d+", reader)
