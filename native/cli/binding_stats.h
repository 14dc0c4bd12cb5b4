// binding_stats.h -- the summary `wrp replay` shows for an output binding, computed over the
// program's memory in place (wrp-replay --stats), so that a summary costs no copy of the data.
#pragma once

#include <cstdint>
#include <string>

#include "wrp_replay.h"

namespace wrpcli {

// One JSON object: shape, dtype, min, max, mean (over finite values), nan and inf counts, as
// wrpkit.checks.binding_stats.stats() computes them for the binding's typed view; a binding without
// a signature is {"dtype": "raw bytes", "raw": true} with no numbers, a struct {"dtype": "struct"}.
// `region` holds the binding's whole region (`b.size` bytes).
std::string binding_stats_json(const wrp_binding_info& b, const uint8_t* region);

}  // namespace wrpcli
