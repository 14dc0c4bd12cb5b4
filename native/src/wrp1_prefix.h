// wrp1_prefix.h -- the top-level ops of a validated WRP1 image, and an image
// that holds only the first N of them.
//
// wrp_options.op_limit: Warp is given only the first N top-level ops (a caller
// replaying part of a graph).  These helpers cut that prefix.  They run only on an image
// that validate_wrp1() accepted, so they re-check nothing but their own reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wrp1_model.h"

namespace wrp {

// A copy of the validated image whose OPERATIONS section holds only its first
// `count` top-level ops of `graph` (its validation; count <= graph.top_ops.size()); every other
// byte is the same, and an ANNOTATIONS section after OPERATIONS moves up with the cut.
std::vector<uint8_t> prefix_image(const uint8_t* image, size_t size, const Wrp1Graph& graph, uint64_t count);

}  // namespace wrp
