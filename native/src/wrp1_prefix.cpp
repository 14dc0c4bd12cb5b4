// wrp1_prefix.cpp -- see wrp1_prefix.h.
#include "wrp1_prefix.h"

#include <cstring>

#include "byte_reader.h"
#include "error.h"
#include "wrp1_model.h"

namespace wrp {

namespace {

struct SectionAt {
    uint64_t entry = 0;  // file offset of the table entry
    uint64_t offset = 0;
    uint64_t size = 0;
};

// The OPERATIONS entry of the table (validate_wrp1 placed it and bounded it).
SectionAt operations_section(const uint8_t* image, size_t size)
{
    if (size < kFileHeaderSize)
        fail(WRP_ERR_INTERNAL, "prefix of an image that was not validated");
    uint32_t num = load<uint32_t>(image + 12);
    for (uint32_t i = 0; i < num; i++) {
        uint64_t at = kSectionTableOffset + uint64_t(i) * kSectionEntrySize;
        if (at + kSectionEntrySize > size)
            break;
        if (load<uint32_t>(image + at) == kSectionOperations)
            return {at, load<uint64_t>(image + at + 8), load<uint64_t>(image + at + 16)};
    }
    fail(WRP_ERR_INTERNAL, "prefix of an image without an operations section");
}

}  // namespace

std::vector<uint8_t> prefix_image(const uint8_t* image, size_t size, const Wrp1Graph& graph, uint64_t count)
{
    if (count > graph.top_ops.size())
        fail(WRP_ERR_INTERNAL, "prefix of %llu ops asked of a graph of %zu", static_cast<unsigned long long>(count),
             graph.top_ops.size());
    SectionAt s = operations_section(image, size);
    uint64_t cut = count == graph.top_ops.size() ? s.offset + s.size : graph.top_op(count).offset;
    uint64_t dropped = s.offset + s.size - cut;
    std::vector<uint8_t> out;
    out.reserve(size - dropped);
    out.insert(out.end(), image, image + cut);
    out.insert(out.end(), image + s.offset + s.size, image + size);  // sections after OPERATIONS, if any
    uint32_t n = static_cast<uint32_t>(count);
    std::memcpy(out.data() + s.offset, &n, 4);
    uint64_t new_size = cut - s.offset;
    std::memcpy(out.data() + s.entry + 16, &new_size, 8);  // size
    std::memcpy(out.data() + s.entry + 24, &new_size, 8);  // uncompressed_size
    // A section placed after OPERATIONS (wrpkit's ANNOTATIONS) moves up by the bytes cut.
    uint32_t num = load<uint32_t>(image + 12);
    for (uint32_t i = 0; i < num; i++) {
        uint64_t at = kSectionTableOffset + uint64_t(i) * kSectionEntrySize;
        uint64_t off = load<uint64_t>(image + at + 8);
        if (off > s.offset) {
            uint64_t moved = off - dropped;
            std::memcpy(out.data() + at + 8, &moved, 8);
        }
    }
    return out;
}

}  // namespace wrp
