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
#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstring>
#include <string>
#include <set>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "byte_reader.h"
#include "checked_math.h"
#include "error.h"
#include "region_lengths.h"
#include "wrp1_validator.h"

namespace wrp {
namespace {

// Record sizes and field widths that are the same in every format; the code below reads those
// fields with these C++ types, so a change of wrp1_layout.py that breaks it fails the build.
namespace rec = op_record;  // every op record's field offsets (generated: wrp1_layouts.h)
namespace reg = op_regions;  // and its region references and their byte lengths (the op table's REGIONS)

constexpr uint32_t kParamRecord = kLaunchParamRecord.record_size;
constexpr uint32_t kRelocRecord = kRelocationRecord.record_size;
// A launch argument's array descriptors (generated from wrp1_layout.py ARRAY_RECORD).
constexpr const ArrayRecord& kArr = kArrayRecord;
constexpr const IndexedArrayRecord& kIdx = kIndexedArrayRecord;
constexpr uint32_t kRelocKind = kRelocationRecord.kind.offset;

constexpr bool layouts_fit_this_code()
{
    for (const FormatLayout& l : kFormatLayouts) {
        const LaunchLayout& L = l.launch;
        if (l.launch_param_size != kParamRecord || l.relocation_size != kRelocRecord
            || kLaunchParamRecord.record_size != kParamRecord || kRelocationRecord.record_size != kRelocRecord
            || L.shape.size != 4
            || L.ndim.size != 4 || L.size.size != 8 || L.dim.size != 8 || L.is_forward.size != 1
            || L.kernel_key_len.size != 2 || L.module_hash_len.size != 2 || L.num_params.size != 2
            || !L.pad1.present() || (L.num_relocs.present() && L.num_relocs.size != 4)
            || (L.value_data_size.present() && L.value_data_size.size != 4)
            || (l.legacy_args ? L.num_handle_offsets.size != 2 : !L.num_relocs.present() || !L.value_data_size.present()))
            return false;
    }
    return kLegacyArg.is_array.size == 1 && kLegacyArg.ndim.size == 1 && kLegacyArg.param_index.size == 2
        && kLegacyArg.region_id.size == 4 && kLegacyArg.byte_offset.size == 8 && kLegacyArg.shape.size == 8
        && kLegacyArg.strides.size == 8 && kLegacyArg.element_size.size == 4
        && kArrayRecord.shape.size == 4 && kArrayRecord.strides.size == 4 && kArrayRecord.ndim.size == 2
        && kIndexedArrayRecord.indices.size == 8 && kIndexedArrayRecord.index_shape.size == 4
        && kIndexedArrayRecord.shape.offset == kArrayRecord.shape.offset
        && kIndexedArrayRecord.indices.offset == kArrayRecord.record_size && kRelocationRecord.kind.size == 1;
}
static_assert(layouts_fit_this_code(), "wrp1_layouts.h changed a field width that wrp1_ops.cpp reads with a fixed type");

// Warp 1.13 refuses a scalar argument larger than this ("Scalar parameter too large for APIC capture").
constexpr uint32_t kMaxLegacyScalar = 64;

enum RelocKind : uint8_t { kRelocDataPtr = 1, kRelocHandle = 2, kRelocNull = 3 };

// One op being validated: its label ("ops[3].body[1] (MEMSET)") and location.
struct Op {
    std::string path;   // "ops[3].body[1]"
    std::string label;  // path + " (TYPE)"
    uint64_t at;        // file offset of the op header
    const uint8_t* p;   // image + at
    uint32_t type;
    uint32_t total;

    template <typename T> T get(uint32_t off) const { return load<T>(p + off); }
    // A field of the op's record, at the offset wrp1_layouts.h generates from wrpkit's op table.
    template <typename T> T field(FieldAt f) const { return get<T>(static_cast<uint32_t>(f.offset)); }

    [[noreturn]] void fail(const char* fmt, ...) const __attribute__((format(printf, 2, 3)))
    {
        va_list args;
        va_start(args, fmt);
        std::string what = vformat(fmt, args);
        va_end(args);
        fail_invalid_at(label, at, "%s", what.c_str());
    }

    void require_zero(uint32_t off, uint32_t n, const char* field) const
    {
        for (uint32_t i = 0; i < n; i++)
            if (p[off + i])
                fail_invalid_at(label, at + off + i, "pad byte %s+%u must be zero", field, i);
    }
    void require_zero(FieldAt pad, const char* field) const
    {
        require_zero(static_cast<uint32_t>(pad.offset), pad.size, field);
    }
};

class OpsValidator {
public:
    OpsValidator(const uint8_t* image, Wrp1Graph& g, bool semantic)
        : image_(image)
        , g_(g)
        , layout_(*g.layout)
        , semantic_(semantic)
    {
        for (const MeshRecord& m : g.meshes)
            mesh_ids_.insert(m.original_ptr);
    }

    // Validate `count` ops filling [begin, end) exactly.
    void stream(uint64_t begin, uint64_t end, uint32_t count, const std::string& path, uint32_t depth)
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
            validate(op, depth);
            if (depth == 0) {
                TopLevelOp top{pos, op.total, op.type, {}, {}};
                if (op.type == kOpKernelLaunch) {  // launch_kernel saw them
                    top.kernel_key = std::move(launched_key_);
                    top.module_hash = std::move(launched_hash_);
                }
                g_.top_ops.push_back(std::move(top));
            }
            pos += op.total;
        }
        if (pos != end)
            fail_invalid_at(path, pos, "%llu trailing bytes after the last of its %u ops",
                            static_cast<unsigned long long>(end - pos), count);
    }

private:
    void validate(const Op& op, uint32_t depth)
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

    // An op type this format does not have (wrpkit's decoder: "op type 9 is SCAN, which format 10
    // does not have").
    [[noreturn]] void absent(const Op& op) const
    {
        if (op.type == kOpMemcpyD2H)
            op.fail("op type 3 (MEMCPY_D2H) is reserved; Warp's loader rejects it");
        const FormatLayout* current = find_format_layout(kCurrentFormat);
        if (op.type < kNumOpTypes && current->op_size[op.type] != 0)
            op.fail("op type %u is %s, which format %u does not have (%s)", op.type, op_name(op.type), layout_.version,
                    describe_format(layout_.version).c_str());
        op.fail("unknown op type %u", op.type);
    }

    // Ops of one fixed size: the format's record size for the type.
    void exact(const Op& op) const
    {
        uint64_t expected = layout_.op_size[op.type];
        if (op.total != expected)
            op.fail("total_size %u, but a %s record is exactly %llu bytes", op.total, op_name(op.type),
                    static_cast<unsigned long long>(expected));
    }

    // Every region reference of the op's type in the op table (wrp1_layouts.h op_regions, generated
    // from wrpkit/model.py REGIONS): its fields, its byte length (region_lengths.h evaluates the
    // table's terms), its name in messages ("region_id" for a record's only region) and whether -1
    // means absent.  Called once the op's own fields are checked (counts, dtypes, its tail).
    void ranges(const Op& op)
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

    // The region bytes [offset, offset + length) the op touches must exist.
    // `optional` lets region id -1 mean "absent" (then nothing is touched).
    void range(const Op& op, const char* field, int32_t region_id, uint64_t offset, uint64_t length, bool optional = false)
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

    static uint64_t mul(const Op& op, uint64_t a, uint64_t b, const char* what)
    {
        uint64_t out;
        if (!mul_ok(a, b, &out))
            op.fail("%s overflows 64 bits", what);
        return out;
    }

    // ---------------------------------------------------------------- launch
    // The fields every format's launch record has, read at the format's own offsets
    // (wrp1_layouts.h: format 10 has no grid_stride/cluster_dim and format 3 describes
    // its arguments with 88-byte descriptors instead of bindings and a value blob).
    struct LaunchHead {
        bool is_forward;
        uint16_t key_len, hash_len, num_params;
    };

    LaunchHead launch_head(const Op& op)
    {
        const LaunchLayout& L = layout_.launch;
        if (op.total < L.fixed_size)
            op.fail("total_size %u is smaller than the %u-byte launch record", op.total, L.fixed_size);
        int32_t ndim = op.get<int32_t>(L.ndim.offset);
        uint64_t size = op.get<uint64_t>(L.size.offset);
        uint64_t dim = op.get<uint64_t>(L.dim.offset);
        uint8_t is_forward = op.p[L.is_forward.offset];
        op.require_zero(L.pad1.offset, L.pad1.size, "_pad1");
        if (L.pad2.present())
            op.require_zero(L.pad2.offset, L.pad2.size, "_pad2");
        if (is_forward > 1)
            op.fail("is_forward must be 0 or 1, found %u", is_forward);
        if (ndim < 1 || ndim > 4)
            op.fail("ndim %d is outside 1..4", ndim);
        if (size != dim)
            op.fail("size %llu differs from dim %llu (Warp writes them equal)", static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(dim));
        if (size > kMaxLaunchThreads)
            op.fail("launch of %llu threads exceeds the limit of 2^32", static_cast<unsigned long long>(size));
        // The generated entry point unravels thread i with `%`/`/` by each
        // shape extent: a zero extent would divide by zero, and a size that is
        // not a multiple of the shape would produce coordinates outside it.
        uint64_t prod = 1;
        for (int d = 0; d < 4; d++) {
            uint32_t extent = op.get<uint32_t>(L.shape.offset + 4 * d);
            // Formats that store int32 extents: Warp 1.18 refuses one above INT32_MAX (a negative one).
            if (L.shape.is_signed && int32_t(extent) < 0)
                op.fail("shape[%d] is negative (%d)", d, int32_t(extent));
            if (d >= ndim) {
                if (extent != 0)
                    op.fail("shape[%d] is %u but ndim is %d (unused extents must be 0)", d, extent, ndim);
                continue;
            }
            if (extent == 0 && size != 0)
                op.fail("shape[%d] is 0 in a launch of %llu threads", d, static_cast<unsigned long long>(size));
            prod = mul(op, prod, extent, "shape product");
        }
        if (size != 0 && size % prod != 0)
            op.fail("size %llu is not a multiple of the shape's %llu elements", static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(prod));
        LaunchHead h{is_forward == 1, op.get<uint16_t>(L.kernel_key_len.offset), op.get<uint16_t>(L.module_hash_len.offset),
                     op.get<uint16_t>(L.num_params.offset)};
        if (h.key_len == 0 || h.hash_len == 0)
            op.fail("kernel key length %u and module hash length %u must be nonzero", h.key_len, h.hash_len);
        return h;
    }

    // The kernel key and module hash after the fixed part (the caller has checked that they fit).
    std::string launch_key(const Op& op, const LaunchHead& h) const
    {
        return std::string(reinterpret_cast<const char*>(op.p + layout_.launch.fixed_size), h.key_len);
    }
    std::string launch_hash(const Op& op, const LaunchHead& h) const
    {
        return std::string(reinterpret_cast<const char*>(op.p + layout_.launch.fixed_size + h.key_len), h.hash_len);
    }

    // Check the launch's key and hash, and the kernel record the launch runs.
    void launch_kernel(const Op& op, const LaunchHead& h, const std::string& key, const std::string& hash)
    {
        launched_key_ = key;
        launched_hash_ = hash;
        if (key.find('\0') != std::string::npos || hash.find('\0') != std::string::npos)
            op.fail("kernel key or module hash contains a NUL byte");
        if (!is_utf8(key) || !is_utf8(hash))
            op.fail("kernel key or module hash is not valid UTF-8");
        if (!semantic_)
            return;
        // Formats 3 and 10: Warp keyed kernels by key alone, so a launch whose (module, key) has no
        // record runs the record of its key (wrpkit's validate warns; `wrp upgrade --collision` chooses).
        const KernelRecord* k = g_.find_kernel(hash, key);
        if (!k && layout_.kernels_by_key) {
            k = g_.launch_kernel(hash, key);
            if (k)  // the same warning, in the same words, as wrpkit's validate
                g_.warnings.push_back(op.path + ": kernel '" + key + "' of module " + hash.substr(0, 12) +
                                      " has no kernel record; Warp keyed kernels by key alone and runs module " +
                                      k->module_hash.substr(0, 12) + "'s kernel for it (`wrp upgrade --collision "
                                      "producer|intent` chooses)");
        }
        if (!k)
            op.fail("kernel %s of module %s is not in the kernel table", quoted(key).c_str(), quoted(hash).c_str());
        if (!h.is_forward && k->backward_name.empty())
            op.fail("backward launch of kernel %s, whose module was built without backward code", quoted(key).c_str());
        if (!h.is_forward && !is_c_identifier(k->backward_name))
            fail_invalid_at("metadata.kernels.backward_name", k->at, "backward symbol %s is not a C identifier",
                            quoted(k->backward_name).c_str());
        if (!h.is_forward)
            g_.kernels[size_t(k - g_.kernels.data())].backward_used = true;
    }

    void launch(const Op& op)
    {
        if (layout_.legacy_args)
            return legacy_launch(op);
        const LaunchLayout& L = layout_.launch;
        LaunchHead h = launch_head(op);
        uint32_t num_relocs = op.get<uint32_t>(L.num_relocs.offset);
        uint32_t value_size = op.get<uint32_t>(L.value_data_size.offset);
        uint32_t bindings = uint32_t(h.num_params) * (h.is_forward ? 1 : 2);
        uint64_t expected = uint64_t(L.fixed_size) + h.key_len + h.hash_len + uint64_t(bindings) * kParamRecord
            + uint64_t(num_relocs) * kRelocRecord + value_size;
        if (expected != op.total)
            op.fail("total_size %u, but its fields describe %llu bytes (%u + key %u + hash %u + %u param records + %u "
                    "relocations + %u value bytes)",
                    op.total, static_cast<unsigned long long>(expected), L.fixed_size, h.key_len, h.hash_len, bindings,
                    num_relocs, value_size);
        std::string key = launch_key(op, h), hash = launch_hash(op, h);
        launch_kernel(op, h, key, hash);

        uint32_t params_off = L.fixed_size + h.key_len + h.hash_len;
        uint32_t relocs_off = params_off + bindings * kParamRecord;
        uint32_t values_off = relocs_off + num_relocs * kRelocRecord;
        forward_params_ = h.num_params;
        launch_has_array_ = false;
        launch_max_elements_ = 0;
        uint64_t cursor = 0;
        uint64_t packed_end = 0;  // end of the previous argument's bytes
        for (uint32_t j = 0; j < bindings; j++) {
            uint32_t po = params_off + j * kParamRecord;
            uint16_t n = op.get<uint16_t>(po + kLaunchParamRecord.num_relocs.offset);
            uint32_t voff = op.get<uint32_t>(po + kLaunchParamRecord.value_offset.offset);
            uint32_t vsize = op.get<uint32_t>(po + kLaunchParamRecord.value_size.offset);
            uint32_t align = op.get<uint32_t>(po + kLaunchParamRecord.value_align.offset);
            if (!range_fits(voff, vsize, value_size))
                fail_invalid_at(op.label, op.at + po, "param %u: value bytes [%u, %u + %u) exceed the %u value bytes", j,
                                voff, voff, vsize, value_size);
            if (align != 0 && (!is_pow2(align) || align > 64))
                fail_invalid_at(op.label, op.at + po, "param %u: value_align %u is not a power of two up to 64", j, align);
            // Warp packs the arguments exactly like the C args struct the
            // replayer rebuilds (align, then append), forward then adjoint.
            // A record that disagrees would hand the kernel shifted fields.
            uint64_t a = align ? align : 8;  // the replayer's default, alignof(void*)
            uint64_t aligned = (packed_end + a - 1) & ~(a - 1);
            if (voff != aligned)
                fail_invalid_at(op.label, op.at + po, "param %u: value_offset %u, but packed with alignment %u it "
                                "starts at %llu", j, voff, align, static_cast<unsigned long long>(aligned));
            packed_end = uint64_t(voff) + vsize;
            if (cursor + n > num_relocs)
                fail_invalid_at(op.label, op.at + po, "param %u: its %u relocations run past the table of %u", j, n,
                                num_relocs);
            for (uint32_t r = 0; r < n; r++)
                relocation(op, relocs_off + uint32_t(cursor + r) * kRelocRecord, uint32_t(cursor + r), vsize);
            argument_pointers(op, j, values_off + voff, vsize, relocs_off + uint32_t(cursor) * kRelocRecord,
                              uint32_t(cursor), n);
            cursor += n;
        }
        if (packed_end != value_size)
            op.fail("arguments end at byte %llu of %u value bytes", static_cast<unsigned long long>(packed_end), value_size);
        if (cursor != num_relocs)
            op.fail("params own %llu relocations but num_relocs is %u", static_cast<unsigned long long>(cursor), num_relocs);
        if (semantic_) {
            against_signature(op, key, hash, h.num_params, params_off, relocs_off, values_off);
            raw_pointers(op, key, hash, h.num_params, params_off, relocs_off, values_off);
            extent_lint(op, key);
        }
    }

    // A launch whose threads exceed the elements of every array it is given: a lint, not an error
    // (a guarded kernel may do it on purpose).  The same rule and words as wrpkit's
    // formats/launch_arrays.exceeded_launches.
    void extent_lint(const Op& op, const std::string& key)
    {
        uint64_t size = op.get<uint64_t>(layout_.launch.size.offset);
        if (!launch_has_array_ || size <= launch_max_elements_)
            return;
        g_.warnings.push_back(op.path + ": launch of kernel '" + key + "' runs " + std::to_string(size) +
                              " threads but its largest array argument holds " + std::to_string(launch_max_elements_) +
                              " elements: unless the kernel guards its indices, threads read and write past the arrays");
    }

    // A format-3 launch (Warp 1.13): after key and hash, one 88-byte descriptor per argument
    // (is_array, ndim, param_index, region_id, byte_offset, shape[4], strides[4], element_size)
    // and u32 handle offsets.  Warp 1.13 rebuilt the args buffer from the descriptors itself.
    // The rules of wrpkit's checks/legacy.py (launch_problems).
    void legacy_launch(const Op& op)
    {
        const LaunchLayout& L = layout_.launch;
        const LegacyArgLayout& A = kLegacyArg;
        LaunchHead h = launch_head(op);
        uint16_t n_handles = op.get<uint16_t>(L.num_handle_offsets.offset);
        uint64_t expected = uint64_t(L.fixed_size) + h.key_len + h.hash_len + uint64_t(h.num_params) * A.size
            + 4 * uint64_t(n_handles);
        if (expected != op.total)
            op.fail("total_size %u, but its fields describe %llu bytes (%u + key %u + hash %u + %u argument descriptors "
                    "of %u + %u handle offsets of 4)", op.total, static_cast<unsigned long long>(expected), L.fixed_size,
                    h.key_len, h.hash_len, h.num_params, A.size, n_handles);
        std::string key = launch_key(op, h), hash = launch_hash(op, h);
        launch_kernel(op, h, key, hash);
        if (!h.is_forward)
            op.fail("format %u cannot hold a backward launch (Warp %s refuses adjoint launches in capture)",
                    layout_.version, layout_.releases);
        uint32_t args_off = L.fixed_size + h.key_len + h.hash_len;
        std::vector<bool> seen(h.num_params + 1u, false);
        for (uint32_t j = 0; j < h.num_params; j++) {
            uint32_t ao = args_off + j * A.size;
            uint64_t at = op.at + ao;
            op.require_zero(ao + A.pad.offset, A.pad.size, "legacy_args._pad");
            uint8_t is_array = op.p[ao + A.is_array.offset];
            uint8_t ndim = op.p[ao + A.ndim.offset];
            uint16_t index = op.get<uint16_t>(ao + A.param_index.offset);
            int32_t region_id = op.get<int32_t>(ao + A.region_id.offset);
            uint64_t byte_offset = op.get<uint64_t>(ao + A.byte_offset.offset);
            uint32_t element_size = op.get<uint32_t>(ao + A.element_size.offset);
            auto shape = [&](uint32_t d) { return op.get<int64_t>(ao + A.shape.offset + 8 * d); };
            auto stride = [&](uint32_t d) { return op.get<int64_t>(ao + A.strides.offset + 8 * d); };
            if (is_array > 1)
                fail_invalid_at(op.label, at, "argument %u: is_array must be 0 or 1, found %u", j, is_array);
            if (index < 1 || index > h.num_params || seen[index])
                fail_invalid_at(op.label, at + A.param_index.offset, "argument %u: param_index %u is not one of "
                                "1..%u, each once", j, index, h.num_params);
            seen[index] = true;
            if (!is_array) {
                if (region_id != -1 || ndim != 0 || element_size != 0)
                    fail_invalid_at(op.label, at, "argument %u: a scalar descriptor must have region -1, ndim 0 and "
                                    "element size 0", j);
                if (byte_offset < 1 || byte_offset > kMaxLegacyScalar)
                    fail_invalid_at(op.label, at + A.byte_offset.offset, "argument %u: scalar size %llu is outside "
                                    "1..%u", j, static_cast<unsigned long long>(byte_offset), kMaxLegacyScalar);
                continue;
            }
            if (region_id == -1) {
                bool zero = ndim == 0 && byte_offset == 0 && element_size == 0;
                for (uint32_t d = 0; d < 4; d++)
                    zero = zero && shape(d) == 0 && stride(d) == 0;
                if (!zero)
                    fail_invalid_at(op.label, at, "argument %u: a None array (region -1) must have all other fields "
                                    "zero", j);
                continue;
            }
            if (ndim < 1 || ndim > 4)
                fail_invalid_at(op.label, at + A.ndim.offset, "argument %u: array ndim %u is outside 1..4", j, ndim);
            bool empty = false;
            StridedReach reach;
            for (uint32_t d = 0; d < 4; d++) {
                if (d >= ndim ? (shape(d) != 0 || stride(d) != 0) : shape(d) < 0)
                    fail_invalid_at(op.label, at + A.shape.offset, "argument %u: array shape is negative or has "
                                    "entries past ndim %u", j, ndim);
                if (d < ndim) {
                    empty = empty || shape(d) == 0;
                    if (shape(d) > 0)
                        reach.add(shape(d), stride(d));
                }
            }
            if (element_size == 0)
                fail_invalid_at(op.label, at + A.element_size.offset, "argument %u: array element size is 0", j);
            touch(region_id);
            if (!semantic_)
                continue;
            const RegionRecord* r = g_.find_region(region_id);
            if (!r)
                fail_invalid_at(op.label, at + A.region_id.offset, "argument %u: array region %d does not exist", j,
                                region_id);
            // The bytes any index reaches, as Warp's strided addressing computes them.
            if (!empty && (__int128(byte_offset) + reach.lo < 0
                           || __int128(byte_offset) + reach.hi + element_size > __int128(r->size)))
                fail_invalid_at(op.label, at, "argument %u: array reaches bytes [%lld, %lld) of region %d, which has "
                                "%llu", j, static_cast<long long>(__int128(byte_offset) + reach.lo),
                                static_cast<long long>(__int128(byte_offset) + reach.hi + element_size), region_id,
                                static_cast<unsigned long long>(r->size));
        }
        if (semantic_)
            against_signature(op, key, hash, 0, args_off, args_off, args_off);  // format 3 has no bindings
    }

    // Param record j of a launch: (its offset in the op, relocation count, value offset, value size).
    static std::tuple<uint32_t, uint16_t, uint32_t, uint32_t> param_record(const Op& op, uint32_t params_off,
                                                                          uint32_t j)
    {
        uint32_t po = params_off + j * kParamRecord;
        return {po, op.get<uint16_t>(po + kLaunchParamRecord.num_relocs.offset), op.get<uint32_t>(po + kLaunchParamRecord.value_offset.offset), op.get<uint32_t>(po + kLaunchParamRecord.value_size.offset)};
    }

    // wrpkit's lint-pointer (checks/check.py lint_launches): an 8-aligned word in
    // [2^44, 2^47) outside every array descriptor and relocated slot of a forward
    // argument is where a 64-bit Linux process keeps heap and mmap pointers.
    void raw_pointers(const Op& op, const std::string& key, const std::string& hash, uint32_t num_params,
                      uint32_t params_off, uint32_t relocs_off, uint32_t values_off)
    {
        uint32_t cursor = 0;
        for (uint32_t j = 0; j < num_params; j++) {
            auto [po, n, voff, vsize] = param_record(op, params_off, j);
            (void)po;
            std::set<uint32_t> slots, covered;
            for (uint32_t r = 0; r < n; r++)
                slots.insert(op.get<uint32_t>(relocs_off + (cursor + r) * kRelocRecord));
            cursor += n;
            covered = slots;
            for (uint32_t o : slots)
                if (slots.count(o + 8)) {
                    uint32_t span = slots.count(o + kIdx.indices.offset) ? kIdx.record_size : kArr.record_size;
                    for (uint32_t b = o; b < o + span; b += 8)
                        covered.insert(b);
                }
            for (uint32_t off = 0; off + 8 <= vsize; off += 8) {
                if (covered.count(off))
                    continue;
                uint64_t v = op.get<uint64_t>(values_off + voff + off);
                // A non-PIE interpreter's brk heap lies low: there only a whole uint64 argument
                // that is 16-aligned and not round (an odd number below 256 times a power of two,
                // as sizes and strides are) counts (check.py _looks_like_a_process_pointer).
                bool high = v % 8 == 0 && v >= (uint64_t(1) << 44) && v < (uint64_t(1) << 47);
                bool low = vsize == 8 && off == 0 && v % 16 == 0 && v >= (uint64_t(1) << 24) &&
                    v < (uint64_t(1) << 44) && (v >> __builtin_ctzll(v)) >= 256;
                if (!high && !low)
                    continue;
                std::string seen = hash + "/" + key + "/" + std::to_string(j) + "/" + std::to_string(off);
                if (!raw_seen_.insert(seen).second)
                    continue;
                char text[96];
                std::snprintf(text, sizeof(text), "%#llx", static_cast<unsigned long long>(v));
                // Numbered from 0 as `wrp inspect --ops` numbers arguments, named where the file
                // records the kernel's signature (checks/check.py _argument_words).
                std::string argument = "argument " + std::to_string(j);
                auto sig = g_.kernel_signatures.find({hash, key});
                if (sig != g_.kernel_signatures.end() && j < sig->second.arguments.size() &&
                    sig->second.arguments[j].name != "arg" + std::to_string(j))
                    argument += " (" + sig->second.arguments[j].name + ")";
                g_.raw_pointers.push_back("kernel " + quoted(key) + " " + argument + " holds " +
                                          text + " at byte " + std::to_string(off) +
                                          " with no relocation: it looks like a live process pointer (a HashGrid, Bvh "
                                          "or Volume id passed as uint64?)");
            }
        }
    }

    // Files wrpkit wrote record each kernel's arguments (annotations): every
    // launch must pass that many arguments of those byte sizes, and each array
    // argument's descriptor must have the declared ndim and fit its region
    // with the real element size (not just one byte, as without a signature).
    // The rules of wrpkit's validator (checks/launch_checks.py, LaunchChecks._against_signature).
    void against_signature(const Op& op, const std::string& key, const std::string& hash, uint32_t num_params,
                           uint32_t params_off, uint32_t relocs_off, uint32_t values_off)
    {
        auto it = g_.kernel_signatures.find({hash, key});
        if (it == g_.kernel_signatures.end())
            return;
        const std::vector<KernelArgumentSignature>& args = it->second.arguments;
        if (args.size() != num_params)
            op.fail("launch passes %u arguments; kernel %s takes %zu (its recorded signature)", num_params,
                    quoted(key).c_str(), args.size());
        uint32_t cursor = 0;
        for (uint32_t j = 0; j < num_params; j++) {
            auto [po, n, voff, vsize] = param_record(op, params_off, j);
            uint32_t first = cursor;
            cursor += n;
            const KernelArgumentSignature& a = args[j];
            if (a.value_size != 0 && vsize != a.value_size)
                fail_invalid_at(op.label, op.at + po, "param %u: argument %s is %u bytes; its type %s takes %u", j,
                                quoted(a.name).c_str(), vsize, quoted(a.type).c_str(), a.value_size);
            if (a.ndim == 0 || !a.has_dtype || vsize < kArr.record_size || n == 0)
                continue;
            const uint8_t* rel = op.p + relocs_off + first * kRelocRecord;
            if (rel[kRelocKind] != kRelocDataPtr || load<uint32_t>(rel) != 0)
                continue;
            const uint8_t* desc = op.p + values_off + voff;
            uint16_t ndim = load<uint16_t>(desc + kArr.ndim.offset);
            if (ndim != a.ndim)
                fail_invalid_at(op.label, op.at + values_off + voff + kArr.ndim.offset,
                                "param %u: array argument %s has ndim %u; the kernel declares %u", j, quoted(a.name).c_str(),
                                ndim, a.ndim);
            if (ndim > 4)
                continue;
            StridedReach reach;
            bool skip = false;
            for (int d = 0; d < ndim; d++) {
                int32_t extent = load<int32_t>(desc + kArr.shape.offset + 4 * d);
                if (extent <= 0)
                    skip = true;  // empty, or negative (reported with the descriptor)
                else
                    reach.add(extent, load<int32_t>(desc + kArr.strides.offset + 4 * d));
            }
            const RegionRecord* region = g_.find_region(load<int32_t>(rel + kRelocationRecord.region_id.offset));
            uint64_t base = load<uint64_t>(rel + kRelocationRecord.region_offset.offset);
            if (skip || !region || base > region->size)
                continue;
            if (-reach.lo > __int128(base) || __int128(base) + reach.hi + a.dtype_size > __int128(region->size))
                fail_invalid_at(op.label, op.at + values_off + voff + kArr.shape.offset,
                                "param %u: array argument %s (%s, shape and strides at this offset) spans past the end "
                                "of region %u (%llu bytes) from offset %llu", j, quoted(a.name).c_str(),
                                printable(a.dtype_name).c_str(), region->id, static_cast<unsigned long long>(region->size),
                                static_cast<unsigned long long>(base));
        }
    }

    void relocation(const Op& op, uint32_t ro, uint32_t index, uint32_t blob_size)
    {
        uint32_t slot = op.get<uint32_t>(ro);
        int32_t region_id = op.get<int32_t>(ro + kRelocationRecord.region_id.offset);
        uint64_t region_offset = op.get<uint64_t>(ro + kRelocationRecord.region_offset.offset);
        uint8_t kind = op.p[ro + kRelocationRecord.kind.offset];
        uint64_t at = op.at + ro;
        op.require_zero(ro + kRelocationRecord.pad.offset, kRelocationRecord.pad.size, "relocation._pad");
        if (uint64_t(slot) + 8 > blob_size)
            fail_invalid_at(op.label, at, "relocation %u: slot at byte %u of its argument does not fit in its %u bytes",
                            index, slot, blob_size);
        switch (kind) {
        case kRelocDataPtr: {
            touch(region_id);
            if (!semantic_)
                return;
            const RegionRecord* r = g_.find_region(region_id);
            if (!r)
                fail_invalid_at(op.label, at, "relocation %u region_id %d does not exist", index, region_id);
            if (region_offset > r->size)
                fail_invalid_at(op.label, at, "relocation %u offset %llu is past the end of region %d (%llu bytes)", index,
                                static_cast<unsigned long long>(region_offset), region_id,
                                static_cast<unsigned long long>(r->size));
            return;
        }
        case kRelocHandle:
            if (region_id != -1)
                fail_invalid_at(op.label, at, "relocation %u: a HANDLE relocation has region_id -1, found %d", index,
                                region_id);
            // An unknown handle would be passed to the kernel unchanged: a
            // stale pointer from the capturing process.
            if (semantic_ && region_offset != 0 && !mesh_ids_.count(region_offset))
                fail_invalid_at(op.label, at, "relocation %u: handle 0x%llx is not a mesh recorded in the file", index,
                                static_cast<unsigned long long>(region_offset));
            return;
        case kRelocNull:
            if (region_id != -1 || region_offset != 0)
                fail_invalid_at(op.label, at, "relocation %u: a NULL relocation has region_id -1 and offset 0", index);
            return;
        default:
            fail_invalid_at(op.label, at, "relocation %u: unknown kind %u", index, kind);
        }
    }

    // The relocations of one argument follow the shape of its type, as
    // Warp's capture walks it (warp/_src/apic/capture.py): a wp.array is a
    // 56-byte array_t with DATA_PTR/NULL slots for data (+0) and grad (+8); a
    // wp.indexedarray is that array_t plus four index-array slots (+56..+80);
    // a wp.handle is one HANDLE slot; a struct is its fields in order.  So
    // DATA_PTR/NULL slots must come as those groups, in ascending order, and
    // each array_t's frozen shape and strides must address bytes inside the
    // regions its pointers are relocated to.
    void argument_pointers(const Op& op, uint32_t j, uint32_t blob_off, uint32_t blob_size, uint32_t relocs_off,
                           uint32_t first_reloc, uint32_t n)
    {
        auto slot = [&](uint32_t r) { return op.get<uint32_t>(relocs_off + r * kRelocRecord); };
        auto kind = [&](uint32_t r) { return op.p[relocs_off + r * kRelocRecord + kRelocKind]; };
        auto pointer = [&](uint32_t r) { return r < n && (kind(r) == kRelocDataPtr || kind(r) == kRelocNull); };
        uint64_t next_free = 0;
        for (uint32_t r = 0; r < n;) {
            uint64_t at = op.at + relocs_off + uint64_t(r) * kRelocRecord;
            uint32_t o = slot(r);
            if (o % 8 != 0 || o < next_free)
                fail_invalid_at(op.label, at, "param %u relocation %u: slot %u is not 8-byte aligned or not after the "
                                "previous pointer field (ends at %llu)", j, first_reloc + r, o,
                                static_cast<unsigned long long>(next_free));
            if (kind(r) == kRelocHandle) {
                next_free = uint64_t(o) + 8;
                r++;
                continue;
            }
            if (!pointer(r + 1) || slot(r + 1) != uint64_t(o) + 8)
                fail_invalid_at(op.label, at, "param %u relocation %u: an array's data pointer must be followed by its "
                                "grad pointer at slot %u", j, first_reloc + r, o + 8);
            bool indexed = true;
            for (uint32_t d = 0; d < 4; d++)
                indexed = indexed && pointer(r + 2 + d) && slot(r + 2 + d) == uint64_t(o) + kIdx.indices.offset + kIdx.indices.size * d;
            uint32_t group = indexed ? kIdx.record_size : kArr.record_size;
            if (uint64_t(o) + group > blob_size)
                fail_invalid_at(op.label, at, "param %u relocation %u: a %u-byte %s at byte %u does not fit in the %u-byte "
                                "argument", j, first_reloc + r, group, indexed ? "indexedarray" : "array", o, blob_size);
            if (semantic_)
                array_extent(op, j, blob_off + o, relocs_off + r * kRelocRecord, indexed, j < forward_params_);
            next_free = uint64_t(o) + group;
            r += indexed ? 6 : 2;
        }
    }

    // The elements the array at `a` presents, for the extent lint: the product of its first ndim
    // extents (an indexedarray: of its own shape at +88, ndim = how many of them are positive),
    // as launch_arrays.array_extents counts them.
    void count_elements(const uint8_t* a, bool indexed, uint16_t ndim)
    {
        const uint8_t* shape = a + (indexed ? kIdx.index_shape.offset : kArr.shape.offset);
        if (indexed) {
            ndim = 0;
            for (int d = 0; d < 4; d++)
                ndim += load<int32_t>(shape + 4 * d) > 0 ? 1 : 0;
        }
        if (ndim < 1 || ndim > 4)
            return;
        unsigned __int128 n = 1;
        for (int d = 0; d < ndim; d++) {
            int32_t extent = load<int32_t>(shape + 4 * d);
            if (extent < 0)
                return;
            n *= static_cast<uint64_t>(extent);
        }
        launch_has_array_ = true;
        uint64_t elements = n > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(n);
        launch_max_elements_ = std::max(launch_max_elements_, elements);
    }

    // `blob` is the file offset (within the op) of an array_t whose data and
    // grad relocations start at `reloc0`.  Element sizes are not in the file,
    // so the first byte of the last element is what is bounded.
    void array_extent(const Op& op, uint32_t j, uint32_t blob, uint32_t reloc0, bool indexed, bool forward)
    {
        const uint8_t* a = op.p + blob;
        bool has_data = op.p[reloc0 + kRelocKind] == kRelocDataPtr || op.p[reloc0 + kRelocRecord + kRelocKind] == kRelocDataPtr;
        uint16_t ndim = load<uint16_t>(a + kArr.ndim.offset);
        if (!has_data)
            return;  // a None array
        if (ndim < 1 || ndim > 4)
            fail_invalid_at(op.label, op.at + blob + kArr.ndim.offset, "param %u: array argument has ndim %u (1..4)", j, ndim);
        if (forward)
            count_elements(a, indexed, ndim);
        StridedReach reach;
        bool empty = false;
        for (int d = 0; d < ndim; d++) {
            int32_t extent = load<int32_t>(a + kArr.shape.offset + 4 * d);
            int64_t stride = load<int32_t>(a + kArr.strides.offset + 4 * d);
            if (extent < 0)
                fail_invalid_at(op.label, op.at + blob + kArr.shape.offset + 4 * d, "param %u: array shape[%d] is negative (%d)", j, d,
                                extent);
            empty = empty || extent == 0;
            if (extent > 0)
                reach.add(extent, stride);
        }
        for (uint32_t r = 0; r < 2 && !empty; r++) {
            const uint8_t* rel = op.p + reloc0 + r * kRelocRecord;
            if (rel[kRelocKind] != kRelocDataPtr)
                continue;
            const RegionRecord* region = g_.find_region(load<int32_t>(rel + kRelocationRecord.region_id.offset));
            uint64_t base = load<uint64_t>(rel + kRelocationRecord.region_offset.offset);
            if (!region || base > region->size)
                continue;  // reported by relocation()
            if (-reach.lo > __int128(base) || reach.hi >= __int128(region->size - base))
                fail_invalid_at(op.label, op.at + blob + kArr.shape.offset,
                                "param %u: array %s (shape and strides at this offset) reaches outside region %u of %llu "
                                "bytes from offset %llu",
                                j, r ? "grad" : "data", region->id, static_cast<unsigned long long>(region->size),
                                static_cast<unsigned long long>(base));
        }
        if (!indexed)
            return;
        // Index array d holds shape[d] int32 entries (the indexedarray's own
        // shape, at +88).
        for (uint32_t d = 0; d < 4; d++) {
            const uint8_t* rel = op.p + reloc0 + (2 + d) * kRelocRecord;
            if (rel[kRelocKind] != kRelocDataPtr)
                continue;
            int32_t count = load<int32_t>(a + kIdx.index_shape.offset + 4 * d);
            const RegionRecord* region = g_.find_region(load<int32_t>(rel + kRelocationRecord.region_id.offset));
            uint64_t base = load<uint64_t>(rel + kRelocationRecord.region_offset.offset);
            if (count < 0 || (region && base <= region->size && uint64_t(count) * 4 > region->size - base))
                fail_invalid_at(op.label, op.at + blob + kIdx.index_shape.offset + 4 * d,
                                "param %u: index array %u of %d entries does not fit its region", j, d, count);
        }
    }

    // --------------------------------------------------------------- others
    void memcpy_h2d(const Op& op)
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

    void conditional(const Op& op, uint32_t depth)
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

    void scan(const Op& op)
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

    void memtile(const Op& op)
    {
        uint32_t fixed = layout_.op_size[op.type];
        uint32_t srcsize = op.total >= fixed ? op.field<uint32_t>(rec::kMemtile.srcsize) : 0;
        if (op.total < fixed || srcsize == 0 || uint64_t(srcsize) + fixed != op.total)
            op.fail("total_size %u does not equal %u + a nonzero value size (%u)", op.total, fixed, srcsize);
        ranges(op);
    }

    void segmented_sort(const Op& op)
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

    void radix_sort(const Op& op)
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

    void runlength_encode(const Op& op)
    {
        exact(op);
        op.require_zero(rec::kRunlengthEncode.pad, "_pad");
        uint32_t count = op.field<uint32_t>(rec::kRunlengthEncode.value_count);
        if (count > INT_MAX)
            op.fail("value_count %u exceeds INT_MAX", count);
        ranges(op);
    }

    void bsr_from_triplets(const Op& op)
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

    void bsr_transpose(const Op& op)
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

    void reduction(const Op& op)
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

    const uint8_t* image_;
    Wrp1Graph& g_;
    const FormatLayout& layout_;  // the file's format: which ops exist, record sizes, launch fields
    bool semantic_;
    std::unordered_set<uint64_t> mesh_ids_;
    std::set<std::string> raw_seen_;  // (module, kernel, argument, byte) already reported
    // The kernel key and module hash of the last launch checked (for Wrp1Graph::top_ops).
    std::string launched_key_, launched_hash_;
    // The launch being checked: its forward argument count, and the most elements of its forward
    // array arguments (the extent lint).
    uint32_t forward_params_ = 0;
    bool launch_has_array_ = false;
    uint64_t launch_max_elements_ = 0;
    // Region ids each enclosing WHILE body reads or writes (innermost last).
    std::vector<std::unordered_set<int32_t>> while_touched_;

    void touch(int32_t region_id)
    {
        for (std::unordered_set<int32_t>& regions : while_touched_)
            regions.insert(region_id);
    }
};

}  // namespace

void validate_operations(const uint8_t* image, uint64_t begin, uint64_t end, Wrp1Graph& graph, bool semantic)
{
    ByteReader r(image, begin, end, "operations");
    uint64_t at = r.pos();
    uint32_t count = r.read<uint32_t>("op_count");
    if (count > r.remaining() / 8)
        fail_invalid_at("operations.op_count", at, "%u ops cannot fit in the %llu bytes that follow", count,
                        static_cast<unsigned long long>(r.remaining()));
    graph.top_ops.reserve(count);  // bounded: count <= remaining / 8
    OpsValidator(image, graph, semantic).stream(r.pos(), end, count, "ops", 0);
}

}  // namespace wrp
