// wrp1_ops.h -- the validator of a WRP1 OPERATIONS section, shared by wrp1_ops.cpp (the op stream,
// its region ranges and every op type but launches) and wrp1_ops_launch.cpp (kernel launches and
// their arguments).  Internal to libwrp_replay; the entry point is validate_operations()
// (wrp1_validator.h).
#pragma once

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
namespace ops {

// Record sizes and field widths that are the same in every format; the code below reads those
// fields with these C++ types, so a change of wrp1_layout.py that breaks it fails the build.
namespace rec = op_record;  // every op record's field offsets (generated: wrp1_layouts.h)
namespace reg = op_regions;  // and its region references and their byte lengths (the op table's REGIONS)

constexpr uint32_t kParamRecord = kLaunchParamRecord.record_size;
constexpr uint32_t kRelocRecord = kRelocationRecord.record_size;
// A launch argument's array descriptors (generated from wrp1_layout.py ARRAY_RECORD).
inline constexpr const ArrayRecord& kArr = kArrayRecord;
inline constexpr const IndexedArrayRecord& kIdx = kIndexedArrayRecord;
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
    void stream(uint64_t begin, uint64_t end, uint32_t count, const std::string& path, uint32_t depth);

private:
    void validate(const Op& op, uint32_t depth);

    // An op type this format does not have (wrpkit's decoder: "op type 9 is SCAN, which format 10
    // does not have").
    [[noreturn]] void absent(const Op& op) const;

    // Ops of one fixed size: the format's record size for the type.
    void exact(const Op& op) const;

    // Every region reference of the op's type in the op table (wrp1_layouts.h op_regions, generated
    // from wrpkit/model.py REGIONS): its fields, its byte length (region_lengths.h evaluates the
    // table's terms), its name in messages ("region_id" for a record's only region) and whether -1
    // means absent.  Called once the op's own fields are checked (counts, dtypes, its tail).
    void ranges(const Op& op);

    // The region bytes [offset, offset + length) the op touches must exist.
    // `optional` lets region id -1 mean "absent" (then nothing is touched).
    void range(const Op& op, const char* field, int32_t region_id, uint64_t offset, uint64_t length, bool optional = false);

    static uint64_t mul(const Op& op, uint64_t a, uint64_t b, const char* what);

    // ---------------------------------------------------------------- launch
    // The fields every format's launch record has, read at the format's own offsets
    // (wrp1_layouts.h: format 10 has no grid_stride/cluster_dim and format 3 describes
    // its arguments with 88-byte descriptors instead of bindings and a value blob).
    struct LaunchHead {
        bool is_forward;
        uint16_t key_len, hash_len, num_params;
    };

    LaunchHead launch_head(const Op& op);

    // The kernel key and module hash after the fixed part (the caller has checked that they fit).
    std::string launch_key(const Op& op, const LaunchHead& h) const;
    std::string launch_hash(const Op& op, const LaunchHead& h) const;

    // Check the launch's key and hash, and the kernel record the launch runs.
    void launch_kernel(const Op& op, const LaunchHead& h, const std::string& key, const std::string& hash);

    void launch(const Op& op);

    // A launch whose threads exceed the elements of every array it is given: a lint, not an error
    // (a guarded kernel may do it on purpose).  The same rule and words as wrpkit's
    // formats/launch_arrays.exceeded_launches.
    void extent_lint(const Op& op, const std::string& key);

    // A format-3 launch (Warp 1.13): after key and hash, one 88-byte descriptor per argument
    // (is_array, ndim, param_index, region_id, byte_offset, shape[4], strides[4], element_size)
    // and u32 handle offsets.  Warp 1.13 rebuilt the args buffer from the descriptors itself.
    // The rules of wrpkit's checks/legacy.py (launch_problems).
    void legacy_launch(const Op& op);

    // Param record j of a launch: (its offset in the op, relocation count, value offset, value size).
    static std::tuple<uint32_t, uint16_t, uint32_t, uint32_t> param_record(const Op& op, uint32_t params_off,
                                                                          uint32_t j);

    // wrpkit's lint-pointer (checks/check.py lint_launches): an 8-aligned word in
    // [2^44, 2^47) outside every array descriptor and relocated slot of a forward
    // argument is where a 64-bit Linux process keeps heap and mmap pointers.
    void raw_pointers(const Op& op, const std::string& key, const std::string& hash, uint32_t num_params,
                      uint32_t params_off, uint32_t relocs_off, uint32_t values_off);

    // Files wrpkit wrote record each kernel's arguments (annotations): every
    // launch must pass that many arguments of those byte sizes, and each array
    // argument's descriptor must have the declared ndim and fit its region
    // with the real element size (not just one byte, as without a signature).
    // The rules of wrpkit's validator (checks/launch_checks.py, LaunchChecks._against_signature).
    void against_signature(const Op& op, const std::string& key, const std::string& hash, uint32_t num_params,
                           uint32_t params_off, uint32_t relocs_off, uint32_t values_off);

    void relocation(const Op& op, uint32_t ro, uint32_t index, uint32_t blob_size);

    // The relocations of one argument follow the shape of its type, as
    // Warp's capture walks it (warp/_src/apic/capture.py): a wp.array is a
    // 56-byte array_t with DATA_PTR/NULL slots for data (+0) and grad (+8); a
    // wp.indexedarray is that array_t plus four index-array slots (+56..+80);
    // a wp.handle is one HANDLE slot; a struct is its fields in order.  So
    // DATA_PTR/NULL slots must come as those groups, in ascending order, and
    // each array_t's frozen shape and strides must address bytes inside the
    // regions its pointers are relocated to.
    void argument_pointers(const Op& op, uint32_t j, uint32_t blob_off, uint32_t blob_size, uint32_t relocs_off,
                           uint32_t first_reloc, uint32_t n);

    // The elements the array at `a` presents, for the extent lint: the product of its first ndim
    // extents (an indexedarray: of its own shape at +88, ndim = how many of them are positive),
    // as launch_arrays.array_extents counts them.
    void count_elements(const uint8_t* a, bool indexed, uint16_t ndim);

    // `blob` is the file offset (within the op) of an array_t whose data and
    // grad relocations start at `reloc0`.  Element sizes are not in the file,
    // so the first byte of the last element is what is bounded.
    void array_extent(const Op& op, uint32_t j, uint32_t blob, uint32_t reloc0, bool indexed, bool forward);

    // --------------------------------------------------------------- others
    void memcpy_h2d(const Op& op);

    void conditional(const Op& op, uint32_t depth);

    void scan(const Op& op);

    void memtile(const Op& op);

    void segmented_sort(const Op& op);

    void radix_sort(const Op& op);

    void runlength_encode(const Op& op);

    void bsr_from_triplets(const Op& op);

    void bsr_transpose(const Op& op);

    void reduction(const Op& op);

    const uint8_t* image_;
    Wrp1Graph& g_;
    const FormatLayout& layout_;  // the file's format: which ops exist, record sizes, launch fields
    bool semantic_;
    std::unordered_set<uint64_t> mesh_ids_;
    std::set<std::string> raw_seen_;  // (module, kernel, argument, byte) already reported
    // The kernel key and module hash of the last launch checked (for Wrp1Graph::all_ops).
    std::string launched_key_, launched_hash_;
    // The launch being checked: its forward argument count, and the most elements of its forward
    // array arguments (the extent lint).
    uint32_t forward_params_ = 0;
    bool launch_has_array_ = false;
    uint64_t launch_max_elements_ = 0;
    // Region ids each enclosing WHILE body reads or writes (innermost last).
    std::vector<std::unordered_set<int32_t>> while_touched_;

    void touch(int32_t region_id);
};

}  // namespace ops
}  // namespace wrp
