"""The op slot (wrpkit/op_slots.py): one record, written the same way by every route.

native/src/op_slot.h is generated from the Python module.  A slotted graph (the C
API's ``op_slots``, what names a crashing op on every whole-replay route) must
replay exactly as the file does, and leave in its slot the last op it started,
nested ones by their path.  Captures are made here with stock Warp.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import warp as wp
from header_printer import assert_generator_current
from proc_helpers import ROOT, native_or_skip
from wrpkit import op_slots
from wrpkit.errors import WrpError

wp.config.log_level = wp.LOG_WARNING
wp.init()

def test_committed_header_is_what_the_generator_writes_and_check_catches_drift(tmp_path):
    assert_generator_current(ROOT / "tools" / "gen_op_slot.py", ROOT / "native" / "src" / "op_slot.h",
                             ("wrpkit:op_slot", "op_slot"), tmp_path)


def test_slot_record_round_trips_and_says_when_no_op_ran():
    assert op_slots.SLOT.size == 128 and op_slots.SLOT_AT + op_slots.SLOT.size == op_slots.REGION_BYTES
    assert not op_slots.read_slot(op_slots.EMPTY).ran
    rec = op_slots.read_slot(op_slots.SLOT.pack(4, 1, -1, b"1.e0"))
    assert rec == (4, 1, None, "1.e0") and rec.ran


@wp.kernel
def k_scale(x: wp.array(dtype=wp.float32), s: float):
    i = wp.tid()
    x[i] = x[i] * s


@wp.kernel
def k_countdown(left: wp.array(dtype=wp.int32)):
    left[0] = left[0] - 1


@wp.kernel
def k_flag(x: wp.array(dtype=wp.float32), flag: wp.array(dtype=wp.int32)):
    flag[0] = wp.where(x[0] > 10.0, 1, 0)


def _save(tmp: Path) -> Path:
    """Stock Warp: ``x *= 2``, then WHILE left: [countdown, x *= 3, flag, IF flag: [x *= 0.5] ELSE [x *= 1]]."""
    x = wp.array(np.arange(1, 9, dtype=np.float32), device="cpu")
    left = wp.array([3], dtype=wp.int32, device="cpu")
    flag = wp.zeros(1, dtype=wp.int32, device="cpu")

    def body():
        wp.launch(k_countdown, dim=1, inputs=[left], device="cpu")
        wp.launch(k_scale, dim=8, inputs=[x, 3.0], device="cpu")
        wp.launch(k_flag, dim=1, inputs=[x, flag], device="cpu")
        wp.capture_if(flag, lambda: wp.launch(k_scale, dim=8, inputs=[x, 0.5], device="cpu"),
                      lambda: wp.launch(k_scale, dim=8, inputs=[x, 1.0], device="cpu"))

    wp.capture_begin(device="cpu", apic=True)
    try:
        wp.launch(k_scale, dim=8, inputs=[x, 2.0], device="cpu")
        wp.capture_while(left, body)
    finally:
        graph = wp.capture_end(device="cpu")
    path = tmp / "nested.wrp"
    wp.capture_save(graph, str(path), inputs={"x": x, "left": left}, outputs={"x": x, "flag": flag})
    return path


def _program(path: Path, op_slots: bool, **options):
    from wrpkit.run.replay import native_api

    mods = {p.name: p.read_bytes() for p in (path.parent / f"{path.stem}_modules").iterdir()}
    return native_api.NativeGraph(path.read_bytes(), mods, "cpu", op_slots=op_slots, **options)


def _slot_bytes(prog) -> bytes:
    import ctypes

    slot = prog.lib.wrp_program_op_slot(prog.handle)
    return bytes((ctypes.c_char * op_slots.SLOT.size).from_address(slot))


def test_a_slotted_graph_replays_as_the_file_and_its_slot_holds_the_last_op_started(tmp_path):
    native_or_skip("native")
    path = _save(tmp_path)
    x0 = np.arange(1, 9, dtype=np.float32)
    outs = []
    for slotted in (False, True):
        prog = _program(path, slotted)
        try:
            prog.set("x", x0)
            prog.set("left", np.array([3], np.int32))
            prog.run(1)
            outs.append({n: prog.get(n).copy() for n in ("x", "flag", "left")})
            if slotted:
                rec = op_slots.read_slot(_slot_bytes(prog))
            else:
                assert prog.lib.wrp_program_op_slot(prog.handle) is None
        finally:
            prog.close()
    for name in outs[0]:
        assert outs[0][name].tobytes() == outs[1][name].tobytes(), name
    # The eager answer: 2x, then three times 3x, halved whenever it passes 10.
    want = x0 * 2
    for _ in range(3):
        want = want * 3
        want = want * (0.5 if want[0] > 10 else 1.0)
    assert np.array_equal(outs[1]["x"].view(np.float32), want.astype(np.float32))
    # The last op started: the IF's branch in the last iteration (x[0] = 54 > 10: THEN, path 1.3.0).
    assert (rec.index, rec.path, rec.iteration) == (1, "1.3.0", None) and rec.seq > 0


def test_a_slotted_program_that_ran_nothing_holds_the_empty_record_and_a_prefix_is_not_slotted(tmp_path):
    """Before its first run the slot is wrpkit.op_slots.EMPTY (the library's record comes from the generated
    header); a prefix of the graph (op_limit) and op slots together are refused, and a prefix alone replays."""
    native_or_skip("native")
    path = _save(tmp_path)
    prog = _program(path, True)
    try:
        assert _slot_bytes(prog) == op_slots.EMPTY and not op_slots.read_slot(_slot_bytes(prog)).ran
    finally:
        prog.close()
    with pytest.raises(WrpError, match="op_slots and op_limit cannot be combined"):
        _program(path, True, op_limit=1)
    prefix = _program(path, False, op_limit=1)  # only the first op: x doubled, no WHILE
    try:
        x0 = np.arange(1, 9, dtype=np.float32)
        prefix.set("x", x0)
        prefix.set("left", np.array([3], np.int32))
        prefix.run(1)
        assert np.array_equal(prefix.get("x").view(np.float32), x0 * 2)
        assert prefix.get("left").view(np.int32)[0] == 3
    finally:
        prefix.close()


def test_guarding_a_program_without_slots_says_why(tmp_path):
    native_or_skip("native")
    prog = _program(_save(tmp_path), False)
    try:
        with pytest.raises(WrpError, match="not opened with op slots"):
            prog.guard_op_slot(os.memfd_create("slot"))
    finally:
        prog.close()
