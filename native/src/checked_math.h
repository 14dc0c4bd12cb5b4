// checked_math.h -- overflow-checked unsigned arithmetic for sizes and offsets
// read from untrusted files.  Every span computed from file fields goes
// through these, so a hostile value can never wrap around a bounds check.
#pragma once

#include <cstdint>

namespace wrp {

inline bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// True when [offset, offset + length) lies inside [0, limit).
inline bool range_fits(uint64_t offset, uint64_t length, uint64_t limit)
{
    return offset <= limit && length <= limit - offset;
}

inline bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Byte offsets, relative to element 0, of the lowest and highest element of a
// strided view (negative strides reach below element 0).  128-bit, so four
// dimensions of 32-bit extents and strides cannot overflow.
struct StridedReach {
    __int128 lo = 0;
    __int128 hi = 0;

    // Add a dimension of `extent` >= 1 elements, `stride` bytes apart.
    void add(int64_t extent, int64_t stride)
    {
        __int128 span = __int128(stride) * (extent - 1);
        (span < 0 ? lo : hi) += span;
    }
};

}  // namespace wrp
