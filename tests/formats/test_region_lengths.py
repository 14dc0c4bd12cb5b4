"""Region references' byte lengths are data: one table (wrpkit/ops.py REGIONS), two evaluators.

Python evaluates each reference's ``Length`` over the model op; C++ evaluates the generated tree
(native/src/wrp1_layouts.h ``op_regions``) over the record's bytes with native/src/region_lengths.h.
Here a small C++ program built against those headers prints, for every non-launch op of real captures
and of 12 copies of each whose length fields are set to random values (huge, zero, negative), each
reference's length or why it has none; Python must say the same, byte for byte.  A rule changed on
one side only fails it (``test_a_changed_rule_is_caught``)."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from header_printer import needs_cxx
from wrpkit import model as m
from wrpkit.formats import wrp1
from wrpkit.formats.wrp1_layout import LAYOUT_18
from proc_helpers import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import gen_layout  # noqa: E402

#: Reads ``version`` then ``at`` lines on stdin; prints one line per reference of the op at ``at``.
EVALUATOR = r"""
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>
#include "region_lengths.h"
using namespace wrp;
int main(int argc, char** argv) {
    std::ifstream f(argv[1], std::ios::binary);
    std::vector<uint8_t> img((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    unsigned version = 0;
    unsigned long long at = 0;
    std::cin >> version;
    const FormatLayout* layout = find_format_layout(version);
    while (std::cin >> at) {
        const uint8_t* p = img.data() + at;
        uint32_t type, total;
        std::memcpy(&type, p, 4);
        std::memcpy(&total, p + 4, 4);
        RecordLengths lengths(p, total, layout->op_size[type]);
        const OpRegionRefs& refs = op_regions::kOpRegionRefs[type];
        for (uint16_t i = refs.first; i < refs.first + refs.count; i++) {
            RegionLength n = lengths.length(op_regions::kRegionRefs[i]);
            const char* status[] = {"ok", "negative", "overflow"};
            std::printf("%llu %s %s %llu\n", at, op_regions::kRegionRefs[i].role, status[n.status],
                        static_cast<unsigned long long>(n.bytes));
        }
    }
}
"""


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler")
    work = tmp_path_factory.mktemp("lengths")
    src, exe = work / "eval.cpp", work / "eval"
    src.write_text(EVALUATOR)
    subprocess.run(["c++", "-std=c++17", "-O1", "-I", str(ROOT / "native" / "src"), str(src), "-o", str(exe)],
                   check=True)
    return exe


def _cxx(exe, path: Path, prog) -> list:
    ats = [op.at for _, op in m.walk_ops(prog.ops) if not isinstance(op, m.KernelLaunch)]
    stdin = f"{prog.format_version}\n" + "".join(f"{a}\n" for a in ats)
    out = subprocess.run([str(exe), str(path)], input=stdin, capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.splitlines()


def _python(prog) -> list:
    rows = []
    for _, op in m.walk_ops(prog.ops):
        if isinstance(op, m.KernelLaunch):
            continue
        for ref in type(op).REGIONS:
            try:
                rows.append(f"{op.at} {ref.role} ok {ref.nbytes(op)}")
            except m.LengthError as e:
                rows.append(f"{op.at} {ref.role} {'negative' if 'negative' in str(e) else 'overflow'} 0")
    return rows


def _length_fields(term) -> set:
    """The record fields a length term reads (the fields worth setting to hostile values)."""
    out = set()
    if isinstance(term, (m.Field, m.ScalarSize, m.IfEq)):
        out.add(term.name)
    if isinstance(term, m.Adjacent):
        out.update(term.fields())
    for child in term.children():
        out |= _length_fields(child)
    return out


def _field_range(op_type, name) -> tuple:
    """``(lo, hi)`` of a record field, from its struct code in the WRP1 layout."""
    rl = LAYOUT_18.ops[op_type]
    code = dict(zip(rl.names, (c for _, c in gen_layout._TOKEN.findall(rl.struct.format.lstrip("<")))))[name]
    if code == "?":
        return 0, 1
    bits = 8 * struct.calcsize("<" + code)
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if code.islower() else (0, (1 << bits) - 1)


def _hostile_value(rng, lo, hi):
    return rng.choice([lo, hi, 0, 1, 2, 4, rng.randint(lo, hi), rng.randint(0, min(hi, 1 << 20)),
                       hi // 2 + 1, max(lo, -1)])


def _scramble(prog, rng) -> None:
    for _, op in m.walk_ops(prog.ops):
        if isinstance(op, m.KernelLaunch):
            continue
        names = set()
        for ref in type(op).REGIONS:
            names |= _length_fields(ref.length)
        for name in sorted(names):
            if rng.random() < 0.7:
                setattr(op, name, _hostile_value(rng, *_field_range(op.op_type, name)))
        if isinstance(op, m.BsrTranspose) and op.padded_tail and rng.random() < 0.5:
            op.padded_tail = tuple(op.padded_tail[:-1]) + (rng.randint(-(1 << 31), (1 << 31) - 1),)


def _with_ops(captures) -> list:
    out = []
    for name, path in sorted(captures.items()):
        prog = wrp1.decode_wrp1(path.read_bytes())
        if any(not isinstance(op, m.KernelLaunch) for _, op in m.walk_ops(prog.ops)):
            out.append(path)
    return out


@needs_cxx
def test_cxx_and_python_lengths_agree_on_real_captures(captures, evaluator):
    kinds = set()
    for path in _with_ops(captures):
        prog = wrp1.decode_wrp1(path.read_bytes())
        assert _cxx(evaluator, path, prog) == _python(prog), path.name
        kinds |= {op.op_type for _, op in m.walk_ops(prog.ops)}
    assert {m.OpType.SCAN, m.OpType.SEGMENTED_SORT, m.OpType.REDUCTION, m.OpType.BSR_TRANSPOSE} <= kinds


@needs_cxx
def test_cxx_and_python_lengths_agree_on_hostile_fields(captures, evaluator, tmp_path):
    """Random, extreme and negative counts, strides and dtypes: the same length, or the same refusal
    (a negative operand, an overflow past 64 bits), in both."""
    rng = random.Random(20)
    statuses = set()
    for n, src in enumerate(_with_ops(captures)):
        for k in range(12):
            prog = wrp1.decode_wrp1(src.read_bytes())
            _scramble(prog, rng)
            path = tmp_path / f"s{n}_{k}.wrp"
            path.write_bytes(wrp1.encode_wrp1(prog))
            prog = wrp1.decode_wrp1(path.read_bytes())
            rows = _python(prog)
            assert _cxx(evaluator, path, prog) == rows, (src.name, k)
            statuses |= {r.split()[2] for r in rows}
    assert statuses == {"ok", "negative", "overflow"}, statuses


@needs_cxx
def test_a_changed_rule_is_caught(captures, evaluator, monkeypatch):
    """Changing one reference's rule in Python only (RADIX_SORT's keys without their scratch half,
    ``count * key size`` instead of ``2 * count * key size``) breaks agreement."""
    ref = m.RadixSort.REGIONS[0]
    assert ref.role == "keys"
    changed = ref._replace(length=m.Field("count") * m.ScalarSize("dtype"))
    monkeypatch.setattr(m.RadixSort, "REGIONS", (changed,) + m.RadixSort.REGIONS[1:])
    for path in _with_ops(captures):
        prog = wrp1.decode_wrp1(path.read_bytes())
        if any(isinstance(op, m.RadixSort) and op.count for _, op in m.walk_ops(prog.ops)):
            assert _cxx(evaluator, path, prog) != _python(prog)
            return
    pytest.fail("no capture has a RADIX_SORT")


def test_every_reference_has_a_length_of_the_vocabulary():
    """Each byte length is data of the closed vocabulary; the only op type outside it is listed, with why."""

    def terms(t):
        yield t
        for c in t.children():
            yield from terms(c)

    for t, cls in m.OP_CLASSES.items():
        if t in m.LENGTHS_ELSEWHERE:
            assert cls.ARGUMENT_REGIONS and not cls.REGIONS, t.name
            continue
        fields = set(m.op_fields(cls))
        record = set(LAYOUT_18.ops[t].content)
        for ref in cls.REGIONS:
            for term in terms(ref.length):
                assert type(term) in m.LENGTH_KINDS, (t.name, ref.role, term)
                if isinstance(term, (m.Field, m.ScalarSize, m.IfEq)):
                    assert term.name in fields and term.name in record, (t.name, ref.role, term)
                if isinstance(term, m.Len):
                    assert term.model_field in fields and term.record_field in record, (t.name, term)
                if isinstance(term, m.Adjacent):
                    assert set(term.fields()) <= fields, (t.name, term)
    assert set(m.LENGTHS_ELSEWHERE) == {m.OpType.KERNEL_LAUNCH}


def test_lengths_use_checked_64_bit_arithmetic():
    op = m.Memtile(region_id=1, offset=0, count=(1 << 62), value=b"\0" * 8)
    with pytest.raises(m.LengthError, match="overflows 64 bits"):
        m.Memtile.REGIONS[0].nbytes(op)
    op.count = 3
    assert m.Memtile.REGIONS[0].nbytes(op) == 24
    scan = m.Scan(dst_region_id=1, src_region_id=2, dst_offset=0, src_offset=0, length=0, in_stride=-4,
                  out_stride=-4, type_len=3, dtype=5, inclusive=False)
    assert [r.nbytes(scan) for r in m.Scan.REGIONS] == [0, 0]  # length 0 reads no stride
    scan.length = 2
    with pytest.raises(m.LengthError, match="in_stride is negative"):
        m.Scan.REGIONS[0].nbytes(scan)
