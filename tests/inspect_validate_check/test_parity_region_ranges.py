"""The two validators bound every region reference of the op table the same way.

For each op type and each of its region references (``REGIONS`` in wrpkit/ops.py) found in the
real captures of tests/programs.py, two variants move that reference's offset: one so that its byte
range (as the op table forms it) ends exactly at its region's end, and one a byte further.  wrp
validate (Python) and wrp-replay --list (C++) must both refuse the second, naming the reference, and
give the same verdict on the first."""

from __future__ import annotations

import subprocess

import pytest

import parity_cases as pc
import replay_cases as rc
from wrpkit import model as m
from wrpkit.formats import wrp1


def _references(captures) -> list:
    """``[(capture, op index in walk order, op type name, RegionRef, region id, region size)]``: the first
    occurrence of each (op type, reference, of vectors or not) whose range is non-empty and movable (it
    has an offset field)."""
    seen, out = set(), []
    for path in captures.values():
        prog = wrp1.decode_wrp1(path.read_bytes())
        sizes = {r.region_id: r.size for r in prog.regions}
        for i, (_, op) in enumerate(m.walk_ops(prog.ops)):
            for ref in type(op).REGIONS or ():
                # vectors apart: a rule's lanes term shows only where an element has more than one
                key = (op.op_type, ref.role, getattr(op, "type_len", 1) > 1)
                rid = getattr(op, ref.region)
                if key in seen or ref.offset is None or rid not in sizes:
                    continue
                nbytes = ref.nbytes(op)
                if nbytes <= 0 or nbytes > sizes[rid]:
                    continue
                seen.add(key)
                out.append((path, i, op.op_type.name, ref, rid, sizes[rid]))
    return out


def _moved(ref, index: int, size: int, past: int):
    """An edit that moves the reference so that its range ends ``past`` bytes after the region's end
    (a range's length may depend on the offset: SEGMENTED_SORT's inferred segment ends)."""
    def edit(prog):
        op = [o for _, o in m.walk_ops(prog.ops)][index]
        for _ in range(4):
            offset = size - ref.nbytes(op) + past
            if getattr(op, ref.offset) == offset:
                break
            setattr(op, ref.offset, max(offset, 0))
    return edit


def _native(replayer, path) -> subprocess.CompletedProcess:
    return subprocess.run([str(replayer), str(path), "--list"], capture_output=True, text=True, timeout=120)


def test_both_validators_bound_every_region_reference_alike(captures, replayer, tmp_path):
    refs = _references(captures)
    kinds = {r[2] for r in refs}
    # The programs cover the copies, sets, conditionals, sorts, scans, encodes, reductions and BSR ops.
    assert len(refs) >= 30 and {"MEMCPY_D2D", "MEMSET", "SCAN", "RADIX_SORT", "REDUCTION", "BSR_TRANSPOSE"} <= kinds, sorted(kinds)
    fitted = 0
    for n, (src, index, kind, ref, rid, size) in enumerate(refs):
        label = f"{kind}.{ref.role}"
        fit = rc.rewrite_capture(src, tmp_path / f"fit{n}", _moved(ref, index, size, 0))
        res = _native(replayer, fit)
        py_code, py_out = pc.python_validate(fit)
        assert (res.returncode == 0) == (py_code == 0), (label, res.returncode, res.stderr, py_out)
        fits = res.returncode == 0
        fitted += fits

        # 8 bytes past the end keeps the offset's alignment, so where the exact fit is valid the only
        # thing wrong with this variant is its range.
        past = rc.rewrite_capture(src, tmp_path / f"past{n}", _moved(ref, index, size, 8))
        res = _native(replayer, past)
        py_code, py_out = pc.python_validate(past)
        assert res.returncode == 3, (label, res.returncode, res.stderr)
        assert py_code == 3, (label, py_out)
        if fits:
            assert f"{ref.region} {rid}: bytes" in res.stderr and "exceed" in res.stderr, (label, res.stderr)
            assert f"outside region {rid} of {size} bytes" in py_out, (label, py_out)
    assert fitted >= len(refs) // 2, (fitted, len(refs))
