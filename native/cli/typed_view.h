// typed_view.h -- how a binding's bytes map to a NumPy array.
//
// With wrpkit's signature a binding is a typed array view (dtype, shape,
// byte strides, byte offset) into its region: inputs must have a matching
// scalar type, and outputs are written as that view.  Without one, a binding
// is just bytes (uint8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "npy_io.h"
#include "wrp_replay.h"

namespace wrpcli {

// The NumPy dtype of a binding's elements and the array shape of its view
// (view shape followed by the dtype's own shape); raw bytes without a signature.
NpyDtype binding_dtype(const wrp_binding_info& b);
std::vector<uint64_t> binding_shape(const wrp_binding_info& b);

// Human-readable dtype, e.g. "float32 (vec3f)" or "uint8 (raw bytes)".
std::string binding_dtype_name(const wrp_binding_info& b);

// Throws CliError(kExitUsage) when `in` cannot feed binding `b`.
void check_input_dtype(const wrp_binding_info& b, const NpyArray& in, const std::string& path);

// Throws CliError(kExitUsage) when `in`'s shape is not the binding's view shape
// (a typed binding takes exactly binding_shape(); an untyped one any shape).
void check_input_shape(const wrp_binding_info& b, const NpyArray& in, const std::string& what);

// Bytes an input for `b` holds: the view's for a typed binding, the region's otherwise.
uint64_t input_bytes(const wrp_binding_info& b);

// True when the view of `b` is its whole region, in C order from byte 0.
bool view_is_whole(const wrp_binding_info& b);

// Scatter C-ordered view bytes into the region (the inverse of gather_view).
void scatter_view(const wrp_binding_info& b, const std::vector<uint8_t>& view, std::vector<uint8_t>& region);
void scatter_view(const wrp_binding_info& b, const uint8_t* view, size_t view_size, std::vector<uint8_t>& region);

// Gather the view described by `b` from the region bytes into C order.
std::vector<uint8_t> gather_view(const wrp_binding_info& b, const std::vector<uint8_t>& region);
// The same from `region_size` bytes at `region` (Warp's memory in place) into `out`, which holds
// input_bytes(b) (the region's size for an untyped binding).
void gather_view_into(const wrp_binding_info& b, const uint8_t* region, size_t region_size, uint8_t* out);

}  // namespace wrpcli
