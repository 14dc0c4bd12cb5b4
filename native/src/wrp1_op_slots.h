// wrp1_op_slots.h -- a copy of a validated WRP1 image that writes an op slot before every op.
//
// Warp replays a graph in one native call, so a process that dies in it cannot
// say which op was running.  The copy made here has one more region (the op
// slot region, bound as kOpSlotBinding, the record at its end) and, before every op at
// every depth (inside IF and WHILE bodies too), a MEMTILE that writes that op's
// slot record (op_slot.h: start order, top-level index, path).  A crash handler
// (wrp_guard_op_slot) then copies the slot out as the process dies; the slot
// names the op with no second run.  wrpkit/op_slots.py says the same in Python.
//
// Only the current format's graphs on the CPU are slotted: Warp loads no other
// format, and a CUDA graph's slot would live in device memory, out of a crash
// handler's reach.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wrp1_model.h"

namespace wrp {

// Why `graph` cannot be slotted ("" if it can).
std::string op_slots_unsupported(const Wrp1Graph& graph);

// The slotted copy of `image` (which validate_wrp1() turned into `graph`): the header, METADATA
// with the slot's binding appended, MEMORY with the slot's region appended (id: the last id + 1,
// no initial data), and OPERATIONS with a MEMTILE before each op; wrpkit's ANNOTATIONS section is
// left out (Warp never reads it, and its op indices would no longer hold).  The copy is itself a
// valid file.  Fails with WRP_ERR_INCOMPATIBLE where op_slots_unsupported() says why.
std::vector<uint8_t> op_slot_image(const uint8_t* image, size_t size, const Wrp1Graph& graph);

}  // namespace wrp
