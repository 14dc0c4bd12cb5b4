// region_lengths.h -- how many bytes each region reference of an op spans, from the op table.
//
// wrpkit/model.py declares every reference's byte length as data (a tree of Length terms:
// Fixed, Field, Strided, ...); tools/gen_layout.py writes those trees into wrp1_layouts.h
// (op_regions::kLengthNodes).  This one function evaluates any of them over an op record's
// bytes, with checked 64-bit arithmetic, exactly as Length.evaluate does over the model, so no
// op type has a hand-written byte count here.  tests/formats/test_region_lengths.py holds it to the
// Python evaluation record by record, and tests/inspect_validate_check/test_parity_region_ranges.py on real captures.
#pragma once

#include <cstdint>
#include <cstring>

#include "checked_math.h"
#include "wrp1_layouts.h"

namespace wrp {

// Byte size of an APICType (int32 1, uint32 2, int64 3, uint64 4, float32 5, float64 6); 0: unknown.
inline uint64_t apic_type_size(uint64_t type)
{
    switch (type) {
    case 1: case 2: case 5: return 4;
    case 3: case 4: case 6: return 8;
    default: return 0;
    }
}

struct RegionLength {
    enum Status : uint8_t { kOk, kNegative, kOverflow } status = kOk;
    uint64_t bytes = 0;
    const char* field = "";  // kNegative: the field that is negative
    int64_t value = 0;       // and its value
};

// The references and lengths of one op record: `op` points at its 8-byte header, `total` is its
// total_size and `fixed_size` the format's fixed record size for its type (what follows is its
// variable part: a tail that TailLast reads).  The record must hold `fixed_size` bytes.
class RecordLengths {
public:
    RecordLengths(const uint8_t* op, uint32_t total, uint32_t fixed_size)
        : p_(op)
        , total_(total)
        , fixed_(fixed_size)
    {
    }

    // The bytes `ref` spans from its offset (status kOk), or why they cannot be formed.
    RegionLength length(const RegionRefAt& ref) const
    {
        RegionLength out;
        out.bytes = eval(ref.length, out);
        if (out.status != RegionLength::kOk)
            out.bytes = 0;
        return out;
    }

private:
    // A field's value, sign-extended where the field is signed.
    __int128 raw(FieldAt f) const
    {
        const uint8_t* at = p_ + f.offset;
        switch (f.size) {
        case 1: { uint8_t v; std::memcpy(&v, at, 1); return f.is_signed ? __int128(int8_t(v)) : __int128(v); }
        case 2: { uint16_t v; std::memcpy(&v, at, 2); return f.is_signed ? __int128(int16_t(v)) : __int128(v); }
        case 4: { uint32_t v; std::memcpy(&v, at, 4); return f.is_signed ? __int128(int32_t(v)) : __int128(v); }
        default: { uint64_t v; std::memcpy(&v, at, 8); return f.is_signed ? __int128(int64_t(v)) : __int128(v); }
        }
    }

    uint64_t eval(uint16_t index, RegionLength& out) const
    {
        if (out.status != RegionLength::kOk)
            return 0;
        const LengthNode& n = op_regions::kLengthNodes[index];
        uint64_t a = 0, b = 0, r = 0;
        switch (n.kind) {
        case LengthKind::kFixed:
            return n.value;
        case LengthKind::kField: {
            __int128 v = raw(n.field);
            if (v < 0) {
                out.status = RegionLength::kNegative;
                out.field = n.name;
                out.value = int64_t(v);
                return 0;
            }
            return uint64_t(v);
        }
        case LengthKind::kRawField:  // only Adjacent reads these, through raw()
            return uint64_t(raw(n.field));
        case LengthKind::kScalarSize:
            return apic_type_size(uint64_t(raw(n.field)));
        case LengthKind::kSum:
            a = eval(n.arg[0], out), b = eval(n.arg[1], out);
            return add_ok(a, b, &r) ? r : overflow(out);
        case LengthKind::kProduct:
            a = eval(n.arg[0], out), b = eval(n.arg[1], out);
            return mul_ok(a, b, &r) ? r : overflow(out);
        case LengthKind::kMax:
            a = eval(n.arg[0], out), b = eval(n.arg[1], out);
            return a > b ? a : b;
        case LengthKind::kStrided: {
            uint64_t count = eval(n.arg[0], out);
            if (count == 0)  // the other terms are not read: a scan of length 0 may record any stride
                return 0;
            uint64_t stride = eval(n.arg[1], out), lanes = eval(n.arg[2], out), scalar = eval(n.arg[3], out);
            uint64_t span, element;
            if (!mul_ok(count - 1, stride, &span) || !mul_ok(lanes, scalar, &element) || !add_ok(span, element, &r))
                return overflow(out);
            return r;
        }
        case LengthKind::kIfEq:
            return eval(raw(n.field) == __int128(n.value) ? n.arg[0] : n.arg[1], out);
        case LengthKind::kAdjacent: {
            const LengthNode* f = op_regions::kLengthNodes;
            __int128 ra = raw(f[n.arg[0]].field), oa = raw(f[n.arg[1]].field), rb = raw(f[n.arg[2]].field),
                     ob = raw(f[n.arg[3]].field);
            return ra == rb && ob - oa == __int128(n.value) ? 1 : 0;
        }
        case LengthKind::kTailLast: {
            if (total_ >= fixed_ + 4) {
                int32_t last;
                std::memcpy(&last, p_ + total_ - 4, 4);
                return last > 0 ? uint64_t(last) : 0;
            }
            return eval(n.arg[0], out);
        }
        }
        return 0;
    }

    static uint64_t overflow(RegionLength& out)
    {
        out.status = RegionLength::kOverflow;
        return 0;
    }

    const uint8_t* p_;
    uint32_t total_, fixed_;
};

}  // namespace wrp
