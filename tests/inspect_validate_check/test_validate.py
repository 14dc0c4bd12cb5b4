"""Validation rules beyond the byte layout, on real captures edited through the model."""

from __future__ import annotations

import struct

import pytest

import parity_cases as pc
import replay_cases as rc
from wrpkit import model as m
from wrpkit.formats.container import open_capture
from wrpkit.checks.validate import validate_capture, validate_program
from wrpkit.formats.wrp1 import decode_wrp1


def first_array_launch(prog):
    for _, op in m.walk_ops(prog.ops):
        if isinstance(op, m.KernelLaunch) and op.params and op.params[0].value_size == 56 and op.relocations:
            return op
    raise LookupError


def edited(path, edit):
    prog = decode_wrp1(path.read_bytes())
    edit(prog)
    return prog


def set_ndim(prog, ndim):
    op = first_array_launch(prog)
    blob = bytearray(op.value_data)
    struct.pack_into("<H", blob, op.params[0].value_offset + 48, ndim)
    op.value_data = bytes(blob)


def test_every_wrpkit_capture_passes_the_signature_checks():
    for name in ("views", "arrays_nd", "structs", "indexedarray", "tape", "bsr", "mesh"):
        with open_capture(rc.wrpkit_capture(name)) as cap:
            assert validate_capture(cap) == [], name


def test_signature_catches_an_array_ndim_the_kernel_does_not_declare():
    wrpkit_file = rc.wrpkit_capture("views")
    stock_file = rc.stock_capture("views")
    bad = [str(p) for p in validate_program(edited(wrpkit_file, lambda p: set_ndim(p, 2)))]
    assert any("the kernel declares 1" in p for p in bad), bad
    # Without a signature the same edit is structurally plausible: nothing to compare it with.
    assert not validate_program(edited(stock_file, lambda p: set_ndim(p, 2)))


def test_signature_catches_a_resized_argument():
    def grow(prog):
        op = first_array_launch(prog)
        p0 = op.params[0]
        op.params[0] = p0._replace(value_size=p0.value_size - 8)

    bad = [str(p) for p in validate_program(edited(rc.wrpkit_capture("views"), grow))]
    assert any("takes 56" in p for p in bad), bad


@pytest.mark.parametrize("field,value,needle", [
    ("region_offset", 1 << 40, "falls outside region"),
    ("region_id", 999, "does not exist"),
    ("kind", 9, "unknown relocation kind"),
])
def test_relocation_rules(field, value, needle):
    def edit(prog):
        op = first_array_launch(prog)
        op.relocations[0] = op.relocations[0]._replace(**{field: value})

    bad = [str(p) for p in validate_program(edited(rc.stock_capture("views"), edit))]
    assert any(needle in p for p in bad), bad


def test_a_name_saved_again_with_another_region_is_a_warning_resolved_as_warp_does():
    """Stock Warp loads it (the last record of a name wins), so it is never refused (issue 23, item 5)."""
    def edit(prog):
        prog.bindings.append(m.Binding(prog.bindings[0].name, prog.regions[-1].region_id))

    prog = edited(rc.stock_capture("views"), edit)
    found = validate_program(prog)
    assert not [p for p in found if p.severity == "error"], [str(p) for p in found]
    assert any("Warp uses the last" in str(p) for p in found if p.severity == "warning")
    assert prog.binding_map()[prog.bindings[0].name] == prog.regions[-1].region_id


def test_cpu_h2d_copy_is_refused():
    def edit(prog):
        prog.ops.append(m.MemcpyH2D(prog.regions[0].region_id, 0, b"\0" * 4))

    bad = [str(p) for p in validate_program(edited(rc.stock_capture("views"), edit))]
    assert any("MEMCPY_H2D" in p for p in bad), bad


def test_while_whose_body_cannot_change_its_condition_is_refused():
    def edit(prog):
        loop = next(op for _, op in m.walk_ops(prog.ops) if isinstance(op, m.While))
        others = [r.region_id for r in prog.regions if r.region_id != loop.cond_region_id]
        # Keep only body ops that never touch the condition region.
        loop.body = [m.Memset(others[0], 0, 0, 4)]

    src = rc.stock_capture("capture_while")
    assert not validate_program(decode_wrp1(src.read_bytes()))
    bad = [str(p) for p in validate_program(edited(src, edit))]
    assert any("never touches its condition" in p for p in bad), bad


# -- rule parity with the native validator (cases in tests/parity_cases.py) --------------------------


@pytest.mark.parametrize("case", pc.CASES, ids=pc.CASE_IDS)
def test_rule_parity_python(case, tmp_path):
    """``wrp validate`` gives the verdict wrp-replay gives (tests/native/test_native_wrpk.py checks that side)."""
    code, out = pc.python_validate(pc.base_capture(case))
    assert code == 0, out
    code, out = pc.python_validate(pc.build(case, tmp_path / "v"))
    if case.accept:
        assert code == 0, out
    else:
        assert code != 0 and case.py in out, (code, out)
