// wrp1_model.h -- what the validator learns about a WRP1 file (formats 3, 10,
// 13-16 and 18).
//
// The byte layout is defined by each Warp release's warp/native/apic_types.h;
// the constants below are this project's own statement of it (see
// /work/shared/reference/WRP1-FORMAT.md), and what differs between formats
// is in wrp1_layouts.h, generated from wrpkit/formats/wrp1_layout.py.  Only
// what the replay engine and the CLI need is kept; the raw bytes stay in the
// caller's mapping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "wrp1_layouts.h"

namespace wrp {
constexpr uint64_t kFileHeaderSize = 64;
constexpr uint64_t kSectionTableOffset = 64;
constexpr uint64_t kSectionEntrySize = 32;

enum SectionType : uint32_t {
    kSectionMetadata = 1,
    kSectionMemory = 2,
    kSectionOperations = 3,
    kSectionAnnotations = 0x41505257,  // the bytes "WRPA": wrpkit's annotations
};

enum class Device : uint8_t { Cuda = 0, Cpu = 1 };

// The op types (enum OpType) and op_name() are generated from the op table: wrp1_layouts.h.

struct ModuleRecord {
    std::string hash;
    std::string binary_filename;
    uint32_t target_arch = 0;
    std::string binary_digest;
    uint64_t at = 0;  // file offset of the record
};

struct KernelRecord {
    std::string key;
    std::string module_hash;
    std::string forward_name;
    std::string backward_name;
    uint64_t at = 0;
    // A backward launch runs this kernel: only then is backward_name required, checked and
    // looked up (Warp replays a module whose unused backward symbol is missing).
    bool backward_used = false;
};

struct BindingRecord {
    std::string name;
    uint32_t region_id = 0;
    uint64_t at = 0;
};

struct MeshRecord {
    int32_t num_points = 0;
    int32_t num_tris = 0;
    uint32_t points_region_id = 0;
    uint32_t indices_region_id = 0;
    uint32_t velocities_region_id = 0;
    uint64_t original_ptr = 0;
    uint64_t at = 0;
};

struct PointerLocationRecord {
    uint32_t region_id = 0;
    uint64_t offset = 0;
    uint64_t stride = 0;
    uint64_t count = 0;
    uint64_t at = 0;
};

// One op of the top-level stream, as validate_operations walked it (crash reports, prefixes).
struct TopLevelOp {
    uint64_t offset = 0;  // file offset of the op header
    uint32_t size = 0;    // total_size: the op with its nested bodies
    uint32_t type = 0;
    std::string kernel_key;   // KERNEL_LAUNCH only
    std::string module_hash;  // KERNEL_LAUNCH only
};

struct RegionRecord {
    uint32_t id = 0;
    uint64_t size = 0;
    bool has_initial_data = false;
    uint64_t data_offset = 0;  // file offset of the initial data
    uint64_t at = 0;
};

// wrpkit's typed view of a binding (table ArraySignature of schema/wrp.fbs).
struct ArraySignature {
    std::string name;
    std::string dtype_name;
    uint8_t scalar_kind = 0;  // wrp_scalar_kind
    uint32_t dtype_size = 0;
    std::vector<uint32_t> dtype_shape;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
    uint64_t byte_offset = 0;
    bool is_input = false;
    bool is_output = false;
};

// One kernel argument as wrpkit recorded it (table KernelArgument).
struct KernelArgumentSignature {
    std::string name;
    std::string type;
    uint32_t value_size = 0;  // 0: unknown
    bool has_dtype = false;
    std::string dtype_name;
    uint32_t dtype_size = 0;
    uint32_t ndim = 0;  // 0: not an array
};

// A kernel's argument list (table KernelSignature); launches are held to it.
struct KernelSignature {
    std::string kernel_key;
    std::string module_hash;
    std::vector<KernelArgumentSignature> arguments;
};

// SHA-256 of one module file recorded by wrpkit (table ModuleDigest).
struct ModuleDigest {
    std::string binary_filename;
    uint8_t sha256[32] = {};
    uint64_t size = 0;
};

struct Wrp1Graph {
    // The file's format; every format-specific rule reads it.  Never null after validation.
    const FormatLayout* layout = nullptr;
    Device device = Device::Cpu;
    uint32_t target_arch = 0;
    std::string producer_version;  // "" in formats that do not record it
    std::vector<ModuleRecord> modules;
    std::vector<KernelRecord> kernels;
    std::map<std::pair<std::string, std::string>, size_t> kernel_index;  // (module_hash, key) -> kernels[i]
    std::vector<BindingRecord> bindings;
    std::vector<MeshRecord> meshes;
    std::vector<PointerLocationRecord> pointer_locations;
    std::vector<RegionRecord> regions;  // ascending id
    uint64_t total_ops = 0;             // at every nesting depth
    std::vector<TopLevelOp> all_ops;    // every op at every depth, in file order (an op slot's seq indexes it)
    std::vector<size_t> top_ops;        // the top-level stream, in file order: indexes into all_ops
    const TopLevelOp& top_op(size_t i) const { return all_ops[top_ops[i]]; }
    // Where the sections and two lists lie (file offsets; op slots rewrite a copy of the file).
    uint64_t metadata_at = 0, metadata_size = 0, memory_at = 0, memory_size = 0;
    uint64_t operations_at = 0, operations_size = 0;
    uint64_t num_bindings_at = 0;  // the num_bindings count
    uint64_t bindings_end = 0;     // just after the last binding record
    std::vector<ArraySignature> signatures;
    std::vector<ModuleDigest> module_digests;
    std::map<std::pair<std::string, std::string>, KernelSignature> kernel_signatures;  // (module_hash, key)
    // Kernel arguments that hold what looks like a live process pointer with no relocation
    // (a HashGrid, Bvh or Volume id passed as uint64): one message each.  Not an error of the
    // records; a replay refuses them unless told to allow raw pointers (wrpkit's lint-pointer).
    std::vector<std::string> raw_pointers;
    // Findings that are no errors (wrpkit validate's warnings), as "ops[3]: ...": launches whose
    // threads exceed every array argument's elements (lint-extent), and in formats 3 and 10 launches
    // that run another module's kernel of the same key (Warp keyed kernels by key alone).
    std::vector<std::string> warnings;

    const RegionRecord* find_region(int64_t id) const;
    const ModuleRecord* find_module(const std::string& hash) const;
    const KernelRecord* find_kernel(const std::string& module_hash, const std::string& key) const;
    // The kernel record a launch runs: (module_hash, key), or in formats whose Warp keyed kernels
    // by key alone (layout->kernels_by_key), the record of that key when the pair has none.
    const KernelRecord* launch_kernel(const std::string& module_hash, const std::string& key) const;
    const ArraySignature* find_signature(const std::string& binding) const;
    const ModuleDigest* find_digest(const std::string& binary_filename) const;
};

// Caps applied while validating.  Counts are also bounded by the bytes left
// in their section, so a huge count can never cause a huge allocation.
struct ValidationLimits {
    // No fixed caps: a file is bounded by 64-bit arithmetic and its mapping, a region with data by
    // the file's own size, and the memory a load allocates by the device's free memory (checked
    // in Program::start before Warp allocates anything; max_memory_bytes replaces that figure).
    uint64_t max_file_bytes = ~uint64_t(0);
    uint64_t max_memory_bytes = ~uint64_t(0);
    bool semantic_checks = true;
};

constexpr uint32_t kMaxStringBytes = 4096;
constexpr uint32_t kMaxFilenameBytes = 255;
constexpr uint32_t kMaxVersionBytes = 64;
constexpr uint32_t kMaxModules = 1u << 16;
constexpr uint32_t kMaxKernels = 1u << 20;
constexpr uint32_t kMaxBindings = 1u << 16;
constexpr uint32_t kMaxMeshes = 1u << 16;
constexpr uint32_t kMaxPointerLocations = 1u << 20;
constexpr uint32_t kMaxRegions = 1u << 20;
constexpr uint64_t kMaxTotalOps = uint64_t(1) << 26;
constexpr uint32_t kMaxNestingDepth = 64;
constexpr uint64_t kMaxLaunchThreads = uint64_t(1) << 32;
constexpr uint64_t kMaxAnnotationsBytes = uint64_t(64) << 20;

}  // namespace wrp
