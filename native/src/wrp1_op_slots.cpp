// wrp1_op_slots.cpp -- see wrp1_op_slots.h.
#include "wrp1_op_slots.h"

#include <cstring>

#include "byte_reader.h"
#include "error.h"
#include "op_slot.h"

namespace wrp {

namespace {

// MEMTILE: the op header, the fixed record, then the kOpSlotSize bytes it writes once.
constexpr uint32_t kSlotOpSize = op_record::kMemtile.record_size + kOpSlotSize;

void put32(std::vector<uint8_t>& out, uint64_t at, uint32_t v) { std::memcpy(out.data() + at, &v, 4); }
void put64(std::vector<uint8_t>& out, uint64_t at, uint64_t v) { std::memcpy(out.data() + at, &v, 8); }

void append(std::vector<uint8_t>& out, const uint8_t* from, uint64_t n) { out.insert(out.end(), from, from + n); }

template <typename T>
void append_value(std::vector<uint8_t>& out, T v)
{
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
}

struct Slotter {
    const uint8_t* image;
    uint32_t region_id;
    int64_t seq = 0;

    // The MEMTILE that writes the slot record of the op at `path` (top-level op `top`).
    void slot_op(std::vector<uint8_t>& out, uint64_t top, const std::string& path)
    {
        uint64_t at = out.size();
        out.resize(at + kSlotOpSize, 0);
        put32(out, at, kOpMemtile);
        put32(out, at + 4, kSlotOpSize);
        put32(out, at + op_record::kMemtile.region_id.offset, region_id);
        put32(out, at + op_record::kMemtile.srcsize.offset, static_cast<uint32_t>(kOpSlotSize));
        put64(out, at + op_record::kMemtile.offset.offset, kOpSlotAt);
        put64(out, at + op_record::kMemtile.count.offset, 1);
        uint64_t rec = at + op_record::kMemtile.record_size;
        put64(out, rec + kOpSlotSeqAt, static_cast<uint64_t>(seq++));
        put64(out, rec + kOpSlotIndexAt, top);
        put64(out, rec + kOpSlotIterationAt, ~uint64_t(0));  // -1: a constant record cannot count iterations
        std::memcpy(out.data() + rec + kOpSlotPathAt, path.data(), path.size() < kOpSlotPathBytes ? path.size()
                                                                                                   : kOpSlotPathBytes - 1);
    }

    // `count` ops from file offset `at` (validated), each after its slot op; returns the bytes read.
    uint64_t stream(std::vector<uint8_t>& out, uint64_t at, uint32_t count, const std::string& prefix, bool else_branch,
                    int64_t top)
    {
        uint64_t start = at;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t type = load<uint32_t>(image + at);
            uint32_t size = load<uint32_t>(image + at + 4);
            uint64_t index = top >= 0 ? static_cast<uint64_t>(top) : i;
            std::string path = prefix.empty() ? std::to_string(i)
                                              : prefix + "." + (else_branch ? "e" : "") + std::to_string(i);
            slot_op(out, index, path);
            if (type == kOpIf || type == kOpWhile) {
                const auto& f = op_record::kIf;
                uint64_t head = out.size();
                append(out, image + at, f.record_size);
                uint32_t a_count = load<uint32_t>(image + at + f.branch_a_op_count.offset);
                uint32_t b_count = load<uint32_t>(image + at + f.branch_b_op_count.offset);
                uint64_t a_at = at + f.record_size;
                uint64_t a_size = load<uint32_t>(image + at + f.branch_a_size.offset);
                uint64_t before = out.size();
                stream(out, a_at, a_count, path, false, static_cast<int64_t>(index));
                uint64_t new_a = out.size() - before;
                before = out.size();
                stream(out, a_at + a_size, b_count, path, true, static_cast<int64_t>(index));
                uint64_t new_b = out.size() - before;
                uint64_t total = out.size() - head;
                if (total > UINT32_MAX)
                    fail(WRP_ERR_INCOMPATIBLE, "op %s is too large to hold op slots (%llu bytes)", path.c_str(),
                         static_cast<unsigned long long>(total));
                put32(out, head + 4, static_cast<uint32_t>(total));
                put32(out, head + f.branch_a_size.offset, static_cast<uint32_t>(new_a));
                put32(out, head + f.branch_a_op_count.offset, a_count * 2);
                put32(out, head + f.branch_b_size.offset, static_cast<uint32_t>(new_b));
                put32(out, head + f.branch_b_op_count.offset, b_count * 2);
            } else {
                append(out, image + at, size);
            }
            at += size;
        }
        return at - start;
    }
};

}  // namespace

std::string op_slots_unsupported(const Wrp1Graph& g)
{
    if (g.layout == nullptr || g.layout->version != kCurrentFormat)
        return "op slots are written into graphs of format " + std::to_string(kCurrentFormat) + " only";
    if (g.device != Device::Cpu)
        return "op slots are written on the CPU only (a CUDA graph's slot would be in device memory)";
    if (g.top_ops.empty())
        return "the graph has no ops";
    if (g.total_ops > UINT32_MAX / 2)
        return "the graph has too many ops to double";
    for (const BindingRecord& b : g.bindings)
        if (b.name == kOpSlotBinding)
            return std::string("the file already binds ") + kOpSlotBinding;
    return "";
}

std::vector<uint8_t> op_slot_image(const uint8_t* image, size_t size, const Wrp1Graph& g)
{
    std::string why = op_slots_unsupported(g);
    if (!why.empty())
        fail(WRP_ERR_INCOMPATIBLE, "%s", why.c_str());
    uint32_t region_id = g.regions.empty() ? 1 : g.regions.back().id + 1;
    if (region_id == 0)
        fail(WRP_ERR_INCOMPATIBLE, "no region id is left for the op slot");
    std::vector<uint8_t> out;
    out.reserve(size + g.total_ops * kSlotOpSize + 4096);
    // Header and a three-entry table (ANNOTATIONS left out); offsets and sizes are set below.
    append(out, image, kFileHeaderSize + 3 * kSectionEntrySize);
    put32(out, 12, 3);

    // METADATA: the slot's binding after the last binding.
    uint64_t meta = out.size();
    append(out, image + g.metadata_at, g.bindings_end - g.metadata_at);
    append_value<uint32_t>(out, static_cast<uint32_t>(std::strlen(kOpSlotBinding)));
    append(out, reinterpret_cast<const uint8_t*>(kOpSlotBinding), std::strlen(kOpSlotBinding));
    append_value<uint32_t>(out, region_id);
    append(out, image + g.bindings_end, g.metadata_at + g.metadata_size - g.bindings_end);
    put32(out, meta + (g.num_bindings_at - g.metadata_at), load<uint32_t>(image + g.num_bindings_at) + 1);

    // MEMORY: the slot's region after the last (the section holds nothing after it).
    uint64_t mem = out.size();
    append(out, image + g.memory_at, g.memory_size);
    put32(out, mem, load<uint32_t>(image + g.memory_at) + 1);
    append_value<uint32_t>(out, region_id);
    append_value<uint32_t>(out, 1);  // element_size
    append_value<uint64_t>(out, kOpSlotRegionBytes);
    out.resize(out.size() + 8, 0);  // has_initial_data 0, pad

    // OPERATIONS: each op after its slot op.
    uint64_t ops = out.size();
    uint32_t top = load<uint32_t>(image + g.operations_at);
    append_value<uint32_t>(out, top * 2);
    append(out, image + g.operations_at + 4, g.top_op(0).offset - (g.operations_at + 4));
    Slotter slotter{image, region_id};
    uint64_t read = slotter.stream(out, g.top_op(0).offset, top, "", false, -1);
    uint64_t ops_end = g.top_op(0).offset + read;
    append(out, image + ops_end, g.operations_at + g.operations_size - ops_end);

    uint64_t starts[3] = {meta, mem, ops};
    uint64_t ends[3] = {mem, ops, out.size()};
    for (int i = 0; i < 3; i++) {
        uint64_t entry = kSectionTableOffset + uint64_t(i) * kSectionEntrySize;
        put64(out, entry + 8, starts[i]);
        put64(out, entry + 16, ends[i] - starts[i]);
        put64(out, entry + 24, ends[i] - starts[i]);
    }
    (void)size;
    return out;
}

}  // namespace wrp
