"""The op slot: the one record that says which op a replay was running when it died.

A replay that crashes takes its process with it, so the op it was running
must be written down *before* the op runs, somewhere the parent can still read
after the child died.  Every route writes the same 128-byte record, :data:`SLOT`:

* the stepper of ``wrp trace``, ``wrp profile`` and ``wrp memcheck``
  (:mod:`wrpkit.debug.jobs`, in a wrpkit child) writes it from Python before each op it launches,
  straight into a shared memory file;
* a whole-graph replay, which Warp runs in one native call, is given a copy of
  the graph with a MEMTILE op before every op (``native/src/wrp1_op_slots.cpp``,
  the C API's ``op_slots`` option): each writes that op's record into the
  region of the binding :data:`BINDING`, and the child's crash handler
  (``wrp_guard_op_slot``) copies the region to a shared memory file as it dies.
  ``wrp-replay`` and the python engine's child use the same C code.

The parent reads the record back with :func:`read_slot` and words the crash
with :func:`wrpkit.run.contain.crash.crash_error`.  ``native/src/op_slot.h`` is
generated from this module (``tools/gen_op_slot.py``).

Nothing here imports Warp or numpy.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Optional

#: seq (the op's number, -1: none yet; the stepper counts ops as they start, a slotted graph numbers
#: them in file order), top-level index (-1: none),
#: innermost WHILE iteration (-1: unknown or none), path (``"3"``, ``"3.0"``, ``"3.e1"``; NUL-padded UTF-8).
SLOT = struct.Struct("<qqq104s")
#: Bytes of the path field.
PATH_BYTES = 104
#: Bytes of the slot's region in a slotted graph, and where in it the record lies: at the end of
#: a region large enough that malloc maps it on its own pages, apart from the graph's arrays, so
#: that a launch writing past an array (the commonest crash) runs off the end of its own memory
#: long before it could reach the record.
REGION_BYTES = 1 << 20
SLOT_AT = REGION_BYTES - SLOT.size
#: The binding whose region the MEMTILE ops of a slotted graph write.  Not a Python
#: identifier, so no capture_save can name a binding so.
BINDING = "wrpkit:op_slot"


class SlotRecord(NamedTuple):
    """One op slot as read back.

    Attributes:
        seq: The op's number (see :data:`SLOT`); -1 when no op had started.
        index: The top-level op (the IF or WHILE that holds a nested op).
        iteration: The innermost WHILE iteration, or None where unknown.
        path: The op's path as ``wrp inspect --ops`` writes it.
    """

    seq: int
    index: int
    iteration: Optional[int]
    path: str

    @property
    def ran(self) -> bool:
        """Whether an op had started (and not every op had run)."""
        return self.seq >= 0 and self.index >= 0

    @property
    def all_ran(self) -> bool:
        """Whether every op had run (:data:`ALL_RAN`)."""
        return self.seq == ALL_RAN


#: How a crash message says a whole replay's op was found (wrp-replay says the same: op_slot.h).
SECOND_RUN = "named by its op slot in a second run"
#: Where a crash came when every op of the second run ran (wrp-replay says the same: op_slot.h).
AFTER_LAST_OP = ("after its last op, as Warp released the graph's memory (which a launch past its arrays can "
                 "corrupt; both runs crashed there)")

#: The record of a slot no op has written yet.
EMPTY = SLOT.pack(-1, -1, -1, b"")
#: The seq a second run writes once every op ran: a crash after it came as Warp released the
#: graph's memory (a heap corrupted by a launch past its arrays fails there).
ALL_RAN = -2
#: Its record.
ALL_RAN_RECORD = SLOT.pack(ALL_RAN, -1, -1, b"")


def read_slot(data) -> SlotRecord:
    """The record in ``data`` (at least :data:`SLOT`.size bytes)."""
    seq, index, iteration, path = SLOT.unpack(bytes(data[:SLOT.size]))
    return SlotRecord(seq, index, iteration if iteration >= 0 else None,
                      path.rstrip(b"\0").decode("utf-8", "replace"))
