// wrp1_ops.cpp -- validation of the OPERATIONS section of a WRP1 file.
//
// Every record's total_size must equal exactly what its fields describe, all
// pad bytes must be zero, and (with semantic checks) every region range an op
// touches at replay must lie inside its region.  The byte counts are the ones
// Warp 1.19.0's CPU replayer (apic_cpu_replay_stream) passes to its resolver, as
// wrpkit/model.py's op table declares them (REGIONS: a Length per reference),
// evaluated by region_lengths.h from the generated table with overflow-checked
// arithmetic, so Warp's own bounds checks can never be the first line of defence.
// No op type's byte count is written out here.
//
// Limits that static checks cannot lift: kernels, sorts and the BSR builders
// index memory with values that exist only at run time (array contents,
// segment offsets, triplet coordinates), and op sizes such as a BSR row count
// must agree with what later kernels assume; a hostile file can still make
// those go out of bounds inside Warp.
//
// The op stream, region ranges and every op type but kernel launches are here; launches and their
// arguments are wrp1_ops_launch.cpp's; the validator's class is wrp1_ops.h.

#include "wrp1_ops.h"

namespace wrp {
namespace ops {

void OpsValidator::stream(uint64_t begin, uint64_t end, uint32_t count, const std::string& path, uint32_t depth)
{
    uint64_t pos = begin;
    for (uint32_t i = 0; i < count; i++) {
        std::string op_path = path + "[" + std::to_string(i) + "]";
        if (end - pos < 8)
            fail_invalid_at(op_path, pos, "truncated op header: 8 bytes needed, %llu left (op count %u)",
                            static_cast<unsigned long long>(end - pos), count);
        Op op{op_path, "", pos, image_ + pos, load<uint32_t>(image_ + pos), load<uint32_t>(image_ + pos + 4)};
        op.label = op_path + " (" + op_name(op.type) + ")";
        if (op.total < 8 || op.total > end - pos)
            op.fail("total_size %u is outside 8..%llu (the bytes left in this stream)", op.total,
                    static_cast<unsigned long long>(end - pos));
        if (++g_.total_ops > kMaxTotalOps)
            op.fail("more than %llu operations in the file", static_cast<unsigned long long>(kMaxTotalOps));
        size_t at = g_.all_ops.size();  // before the ops nested in it: file order
        g_.all_ops.push_back(TopLevelOp{pos, op.total, op.type, {}, {}});
        validate(op, depth);
        if (op.type == kOpKernelLaunch) {  // launch_kernel saw them
            g_.all_ops[at].kernel_key = std::move(launched_key_);
            g_.all_ops[at].module_hash = std::move(launched_hash_);
        }
        if (depth == 0)
            g_.top_ops.push_back(at);
        pos += op.total;
    }
    if (pos != end)
        fail_invalid_at(path, pos, "%llu trailing bytes after the last of its %u ops",
                        static_cast<unsigned long long>(end - pos), count);
}

void OpsValidator::validate(const Op& op, uint32_t depth)
{
    if (op.type >= kNumOpTypes || layout_.op_size[op.type] == 0)
        absent(op);
    switch (op.type) {
    case kOpKernelLaunch: return launch(op);
    case kOpMemcpyH2D: return memcpy_h2d(op);
    case kOpMemcpyD2D:
    case kOpMemset:
        exact(op);
        return ranges(op);
    case kOpAlloc:
        exact(op);
        op.require_zero(rec::kAlloc.pad, "_pad");
        return ranges(op);
    case kOpIf:
    case kOpWhile: return conditional(op, depth);
    case kOpScan: return scan(op);
    case kOpMemtile: return memtile(op);
    case kOpSegmentedSort: return segmented_sort(op);
    case kOpRadixSort: return radix_sort(op);
    case kOpRunlengthEncode: return runlength_encode(op);
    case kOpBsrFromTriplets: return bsr_from_triplets(op);
    case kOpBsrTranspose: return bsr_transpose(op);
    case kOpReduction: return reduction(op);
    case kOpBvhRefit:
    case kOpBvhRebuild:
        op.fail("op type %u records a process-local wp.Bvh pointer; such graphs cannot be replayed from a file",
                op.type);
    case kOpHashGridUpdate:
        op.fail("op type 19 records a process-local wp.HashGrid pointer; such graphs cannot be replayed from a file");
    default:
        absent(op);
    }
}

void OpsValidator::absent(const Op& op) const
{
    if (op.type == kOpMemcpyD2H)
        op.fail("op type 3 (MEMCPY_D2H) is reserved; Warp's loader rejects it");
    const FormatLayout* current = find_format_layout(kCurrentFormat);
    if (op.type < kNumOpTypes && current->op_size[op.type] != 0)
        op.fail("op type %u is %s, which format %u does not have (%s)", op.type, op_name(op.type), layout_.version,
                describe_format(layout_.version).c_str());
    op.fail("unknown op type %u", op.type);
}

void OpsValidator::exact(const Op& op) const
{
    uint64_t expected = layout_.op_size[op.type];
    if (op.total != expected)
        op.fail("total_size %u, but a %s record is exactly %llu bytes", op.total, op_name(op.type),
                static_cast<unsigned long long>(expected));
}

void OpsValidator::ranges(const Op& op)
{
    const OpRegionRefs& refs = reg::kOpRegionRefs[op.type];
    RecordLengths lengths(op.p, op.total, layout_.op_size[op.type]);
    for (uint16_t i = refs.first; i < refs.first + refs.count; i++) {
        const RegionRefAt& ref = reg::kRegionRefs[i];
        RegionLength n = lengths.length(ref);
        if (n.status == RegionLength::kNegative)
            op.fail("%s: %s %lld is negative", ref.role, n.field, static_cast<long long>(n.value));
        if (n.status == RegionLength::kOverflow)
            op.fail("%s: its byte length overflows 64 bits", ref.role);
        range(op, std::strcmp(ref.role, "region") == 0 ? "" : ref.role, op.field<int32_t>(ref.region_id),
              ref.offset.present() ? op.field<uint64_t>(ref.offset) : 0, n.bytes, ref.optional);
    }
}

void OpsValidator::range(const Op& op, const char* field, int32_t region_id, uint64_t offset, uint64_t length, bool optional)
{
    touch(region_id);
    std::string name = std::string(field) + (*field ? "_region_id" : "region_id");
    if (optional && region_id == -1)
        return;
    if (region_id < 1)
        op.fail("%s %d is not a region id", name.c_str(), region_id);
    if (!semantic_)
        return;
    const RegionRecord* r = g_.find_region(region_id);
    if (!r)
        op.fail("%s %d does not exist", name.c_str(), region_id);
    if (!range_fits(offset, length, r->size))
        op.fail("%s %d: bytes [%llu, %llu + %llu) exceed the region's %llu bytes", name.c_str(), region_id,
                static_cast<unsigned long long>(offset), static_cast<unsigned long long>(offset),
                static_cast<unsigned long long>(length), static_cast<unsigned long long>(r->size));
}

uint64_t OpsValidator::mul(const Op& op, uint64_t a, uint64_t b, const char* what)
{
    uint64_t out;
    if (!mul_ok(a, b, &out))
        op.fail("%s overflows 64 bits", what);
    return out;
}

// --------------------------------------------------------------- others

void OpsValidator::memcpy_h2d(const Op& op)
{
    uint32_t fixed = layout_.op_size[op.type];
    if (op.total < fixed || op.field<uint64_t>(rec::kMemcpyH2D.size) != op.total - fixed)
        op.fail("total_size %u does not equal %u + its %llu inline bytes", op.total, fixed,
                static_cast<unsigned long long>(op.total < fixed ? 0 : op.field<uint64_t>(rec::kMemcpyH2D.size)));
    op.require_zero(rec::kMemcpyH2D.pad, "_pad");
    if (g_.device == Device::Cpu)
        op.fail("MEMCPY_H2D is not replayed by Warp's CPU runtime (it would be skipped silently); Warp 1.19 never "
                "records it");
    ranges(op);
}

void OpsValidator::conditional(const Op& op, uint32_t depth)
{
    uint32_t head = layout_.op_size[op.type];
    if (op.total < head)
        op.fail("total_size %u is smaller than the %u-byte conditional record", op.total, head);
    op.require_zero(rec::kIf.pad, "_pad");
    uint32_t a = op.field<uint32_t>(rec::kIf.branch_a_size),
        a_count = op.field<uint32_t>(rec::kIf.branch_a_op_count);
    uint32_t b = op.field<uint32_t>(rec::kIf.branch_b_size),
        b_count = op.field<uint32_t>(rec::kIf.branch_b_op_count);
    if (uint64_t(head) + a + b != op.total)
        op.fail("total_size %u differs from %u + branch sizes %u + %u", op.total, head, a, b);
    if ((a == 0) != (a_count == 0) || (b == 0) != (b_count == 0))
        op.fail("branch sizes (%u, %u) and op counts (%u, %u) disagree", a, b, a_count, b_count);
    if (a_count > a / 8 || b_count > b / 8)
        op.fail("branch op counts (%u, %u) cannot fit in %u and %u bytes", a_count, b_count, a, b);
    if (op.type == kOpWhile && b != 0)
        op.fail("a WHILE record has an empty second branch, found %u bytes", b);
    if (depth + 1 > kMaxNestingDepth)
        op.fail("conditionals nest deeper than %u levels", kMaxNestingDepth);
    ranges(op);  // the condition (IF and WHILE share the record)
    uint64_t body = op.at + head;
    if (op.type == kOpWhile) {
        // A body that touches no byte of the condition's region can never
        // end the loop: Warp's CPU replay would spin until its 2^24
        // iteration guard (wrpkit's validate has the same rule).
        int32_t cond = op.field<int32_t>(rec::kIf.cond_region_id);
        while_touched_.emplace_back();
        stream(body, body + a, a_count, op.path + ".body", depth + 1);
        bool touched = while_touched_.back().count(cond) != 0;
        while_touched_.pop_back();
        if (semantic_ && !touched)
            op.fail("WHILE body never touches its condition region %d, so the loop could not end", cond);
    } else {
        stream(body, body + a, a_count, op.path + ".then", depth + 1);
        stream(body + a, body + a + b, b_count, op.path + ".else", depth + 1);
    }
}

void OpsValidator::scan(const Op& op)
{
    exact(op);
    op.require_zero(rec::kScan.pad, "_pad");
    uint32_t length = op.field<uint32_t>(rec::kScan.length);
    int32_t in_stride = op.field<int32_t>(rec::kScan.in_stride),
        out_stride = op.field<int32_t>(rec::kScan.out_stride), type_len = op.field<int32_t>(rec::kScan.type_len);
    uint8_t dtype = op.p[rec::kScan.dtype.offset], inclusive = op.p[rec::kScan.inclusive.offset];
    if (dtype != 1 && dtype != 3 && dtype != 5 && dtype != 6)
        op.fail("scan dtype %u is not int32 (1), int64 (3), float32 (5) or float64 (6)", dtype);
    if (inclusive > 1)
        op.fail("inclusive must be 0 or 1, found %u", inclusive);
    if (length > INT_MAX)
        op.fail("length %u exceeds INT_MAX", length);
    if (length > 0 && (in_stride < 0 || out_stride < 0 || type_len <= 0))
        op.fail("strides (%d, %d) must be >= 0 and type_len %d > 0", in_stride, out_stride, type_len);
    ranges(op);
}

void OpsValidator::memtile(const Op& op)
{
    uint32_t fixed = layout_.op_size[op.type];
    uint32_t srcsize = op.total >= fixed ? op.field<uint32_t>(rec::kMemtile.srcsize) : 0;
    if (op.total < fixed || srcsize == 0 || uint64_t(srcsize) + fixed != op.total)
        op.fail("total_size %u does not equal %u + a nonzero value size (%u)", op.total, fixed, srcsize);
    ranges(op);
}

void OpsValidator::segmented_sort(const Op& op)
{
    exact(op);
    op.require_zero(rec::kSegmentedSort.pad, "_pad");
    uint32_t count = op.field<uint32_t>(rec::kSegmentedSort.count),
        segments = op.field<uint32_t>(rec::kSegmentedSort.num_segments);
    uint8_t dtype = op.p[rec::kSegmentedSort.dtype.offset];
    if (dtype != 1 && dtype != 5)
        op.fail("segmented-sort key dtype %u is not int32 (1) or float32 (5)", dtype);
    if (count > INT_MAX / 2 || segments > INT_MAX - 1)
        op.fail("count %u or segment count %u is too large", count, segments);
    // As at replay, ends inferred from starts alias the start array one int32 later: the op
    // table's Adjacent term adds that int32 to the starts.
    ranges(op);
}

void OpsValidator::radix_sort(const Op& op)
{
    exact(op);
    op.require_zero(rec::kRadixSort.pad, "_pad");
    uint32_t count = op.field<uint32_t>(rec::kRadixSort.count);
    int32_t begin_bit = op.field<int32_t>(rec::kRadixSort.begin_bit),
        end_bit = op.field<int32_t>(rec::kRadixSort.end_bit),
        value_size = op.field<int32_t>(rec::kRadixSort.value_size);
    uint8_t dtype = op.p[rec::kRadixSort.dtype.offset];
    uint64_t key_size = apic_type_size(dtype);
    if (key_size == 0)
        op.fail("radix-sort key dtype %u is not one of 1..6", dtype);
    if (value_size != 4 && value_size != 8)
        op.fail("value_size %d is neither 4 nor 8", value_size);
    if (begin_bit < 0 || end_bit < begin_bit || uint64_t(end_bit) > key_size * 8)
        op.fail("bit range [%d, %d) is invalid for %llu-byte keys", begin_bit, end_bit,
                static_cast<unsigned long long>(key_size));
    if (count > INT_MAX)
        op.fail("count %u exceeds INT_MAX", count);
    ranges(op);
}

void OpsValidator::runlength_encode(const Op& op)
{
    exact(op);
    op.require_zero(rec::kRunlengthEncode.pad, "_pad");
    uint32_t count = op.field<uint32_t>(rec::kRunlengthEncode.value_count);
    if (count > INT_MAX)
        op.fail("value_count %u exceeds INT_MAX", count);
    ranges(op);
}

void OpsValidator::bsr_from_triplets(const Op& op)
{
    exact(op);
    op.require_zero(rec::kBsrFromTriplets.pad, "_pad");
    int32_t block_size = op.field<int32_t>(rec::kBsrFromTriplets.block_size),
        scalar_size = op.field<int32_t>(rec::kBsrFromTriplets.scalar_size_in_bytes);
    int32_t rows = op.field<int32_t>(rec::kBsrFromTriplets.row_count),
        cols = op.field<int32_t>(rec::kBsrFromTriplets.col_count),
        nnz = op.field<int32_t>(rec::kBsrFromTriplets.nnz_upper_bound);
    if (block_size < 0 || scalar_size < 0 || rows < 0 || cols < 0 || nnz < 0)
        op.fail("negative block size, scalar size, row, column or nnz count");
    if (op.p[rec::kBsrFromTriplets.masked_topology.offset] > 1)
        op.fail("masked_topology must be 0 or 1, found %u", op.p[rec::kBsrFromTriplets.masked_topology.offset]);
    // Formats 13-15 may name the region the replay writes the count into (an optional reference
    // of the table); from 16 on Warp writes -1/0 there and ignores it.
    if (!layout_.bsr_nnz_region
        && (op.field<int32_t>(reg::kBsrFromTriplets_bsr_nnz.region_id) != -1
            || op.field<uint64_t>(reg::kBsrFromTriplets_bsr_nnz.offset) != 0))
        op.fail("legacy bsr_nnz region must be -1 with offset 0");
    ranges(op);
}

void OpsValidator::bsr_transpose(const Op& op)
{
    uint32_t fixed = layout_.op_size[op.type];
    if (op.total < fixed)
        op.fail("total_size %u is smaller than the %u-byte record", op.total, fixed);
    if (!layout_.bsr_transpose_tail && op.total != fixed)
        op.fail("BSR_TRANSPOSE has no tail in format %u, found %u bytes", layout_.version, op.total - fixed);
    int32_t rows = op.field<int32_t>(rec::kBsrTranspose.row_count),
        cols = op.field<int32_t>(rec::kBsrTranspose.col_count),
        nnz = op.field<int32_t>(rec::kBsrTranspose.nnz_upper_bound);
    if (rows < 0 || cols < 0 || nnz < 0)
        op.fail("negative row, column or nnz count");
    // From format 14 a padded destination (transposed row counts given) carries its capacity
    // offsets; in format 13 it carries none (Warp 1.15-1.18 read them from the live offsets), so
    // its columns are bounded by nnz_upper_bound, as an unpadded one's.
    bool has_tail = op.field<int32_t>(reg::kBsrTranspose_transposed_row_counts.region_id) >= 0 && layout_.bsr_transpose_tail;
    uint64_t colp1 = (uint64_t(cols) + 1) * 4;
    uint64_t expected = fixed + (has_tail ? colp1 : 0);
    if (op.total != expected)
        op.fail("total_size %u, expected %llu (%u%s)", op.total, static_cast<unsigned long long>(expected), fixed,
                has_tail ? " + the (col_count + 1) int32 capacity offsets of a padded destination" : "");
    if (has_tail) {
        // Replay copies this tail into the destination offsets, and its last entry sizes the
        // destination columns (the op table's TailLast term).
        int32_t prev = 0;
        for (int32_t c = 0; c <= cols; c++) {
            int32_t v = op.get<int32_t>(fixed + 4 * uint32_t(c));
            if (v < prev)
                fail_invalid_at(op.label, op.at + fixed + 4 * uint64_t(c), "capacity offsets must ascend from 0");
            prev = v;
        }
    }
    ranges(op);
}

void OpsValidator::reduction(const Op& op)
{
    exact(op);
    op.require_zero(rec::kReduction.pad, "_pad");
    // The region references' fields, as the op table names them.
    int32_t b_id = op.field<int32_t>(reg::kReduction_input_b.region_id);
    uint32_t count = op.field<uint32_t>(rec::kReduction.count);
    uint64_t a_off = op.field<uint64_t>(reg::kReduction_input_a.offset),
        b_off = op.field<uint64_t>(reg::kReduction_input_b.offset),
        out_off = op.field<uint64_t>(reg::kReduction_output.offset);
    int32_t a_stride = op.field<int32_t>(rec::kReduction.input_a_stride),
        b_stride = op.field<int32_t>(rec::kReduction.input_b_stride),
        type_len = op.field<int32_t>(rec::kReduction.type_len);
    uint8_t kind = op.p[rec::kReduction.kind.offset], dtype = op.p[rec::kReduction.dtype.offset];
    bool sum = kind == 1, inner = kind == 2;
    if (!sum && !inner)
        op.fail("reduction kind %u is neither SUM (1) nor INNER (2)", kind);
    if (dtype != 5 && dtype != 6)
        op.fail("reduction dtype %u is neither float32 (5) nor float64 (6)", dtype);
    if (count == 0 || count > INT_MAX || type_len <= 0 || a_stride < 0)
        op.fail("count %u, type_len %d or stride %d out of range", count, type_len, a_stride);
    if (sum && (b_id != -1 || b_off != 0 || b_stride != 0))
        op.fail("a SUM has no second input (region -1, offset 0, stride 0)");
    if (inner && b_stride < 0)
        op.fail("second input stride %d is negative", b_stride);
    if (inner && b_id == -1)  // optional in the table only for a SUM
        op.fail("an INNER reduction needs its second input; input_b_region_id is -1");
    uint64_t scalar = apic_type_size(dtype);
    if (a_off % scalar || out_off % scalar || uint64_t(a_stride) % scalar
        || (inner && (b_off % scalar || uint64_t(b_stride) % scalar)))
        op.fail("offsets and strides must be multiples of the %llu-byte scalar", static_cast<unsigned long long>(scalar));
    ranges(op);  // a SUM's input_b is region -1: an absent optional reference
}

void OpsValidator::touch(int32_t region_id)
{
    for (std::unordered_set<int32_t>& regions : while_touched_)
        regions.insert(region_id);
}

}  // namespace ops


void validate_operations(const uint8_t* image, uint64_t begin, uint64_t end, Wrp1Graph& graph, bool semantic)
{
    ByteReader r(image, begin, end, "operations");
    uint64_t at = r.pos();
    uint32_t count = r.read<uint32_t>("op_count");
    if (count > r.remaining() / 8)
        fail_invalid_at("operations.op_count", at, "%u ops cannot fit in the %llu bytes that follow", count,
                        static_cast<unsigned long long>(r.remaining()));
    graph.top_ops.reserve(count);  // bounded: count <= remaining / 8
    ops::OpsValidator(image, graph, semantic).stream(r.pos(), end, count, "ops", 0);
}

}  // namespace wrp
