// wrp1_validator.cpp -- the WRP1 container: header, section table, METADATA
// and MEMORY sections, and the cross references between them.  The operation
// stream is checked in wrp1_ops.cpp and the annotations in annotations.cpp.
//
// The rules are Warp 1.19.0's loader rules (apic_load_graph_from_image,
// apic_parse_metadata, apic_parse_memory_regions, apic_validate_module,
// apic_create_meshes, apic_fixup_ptr_locations) made stricter where Warp is
// lax: flags and reserved bytes must be zero, the sections must be laid out
// exactly as Warp writes them, trailing bytes are errors, and references
// Warp resolves only at replay (or never) are checked up front.
#include "wrp1_validator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <set>
#include <unordered_set>
#include <utility>

#include "byte_reader.h"
#include "checked_math.h"
#include "error.h"

namespace wrp {

const RegionRecord* Wrp1Graph::find_region(int64_t id) const
{
    if (id < 0 || id > UINT32_MAX)
        return nullptr;
    auto it = std::lower_bound(regions.begin(), regions.end(), static_cast<uint32_t>(id),
                               [](const RegionRecord& r, uint32_t v) { return r.id < v; });
    return (it != regions.end() && it->id == id) ? &*it : nullptr;
}

const ModuleRecord* Wrp1Graph::find_module(const std::string& hash) const
{
    for (const ModuleRecord& m : modules)
        if (m.hash == hash)
            return &m;
    return nullptr;
}

const KernelRecord* Wrp1Graph::find_kernel(const std::string& module_hash, const std::string& key) const
{
    auto it = kernel_index.find({module_hash, key});
    return it == kernel_index.end() ? nullptr : &kernels[it->second];
}

const KernelRecord* Wrp1Graph::launch_kernel(const std::string& module_hash, const std::string& key) const
{
    if (const KernelRecord* k = find_kernel(module_hash, key))
        return k;
    if (!layout || !layout->kernels_by_key)
        return nullptr;
    for (const KernelRecord& k : kernels)  // keys are unique in these formats (read_metadata)
        if (k.key == key)
            return &k;
    return nullptr;
}

const ArraySignature* Wrp1Graph::find_signature(const std::string& binding) const
{
    for (const ArraySignature& s : signatures)
        if (s.name == binding)
            return &s;
    return nullptr;
}

const ModuleDigest* Wrp1Graph::find_digest(const std::string& binary_filename) const
{
    for (const ModuleDigest& d : module_digests)
        if (d.binary_filename == binary_filename)
            return &d;
    return nullptr;
}

bool is_plain_basename(const std::string& name)
{
    return !name.empty() && name != "." && name != ".." && name.find_first_of(std::string("/\\:\0", 4)) == std::string::npos;
}

// Symbol names are looked up in the module's ELF symbol table and passed to
// warp-clang's JIT; Warp only ever writes C identifiers.
bool is_c_identifier(const std::string& s)
{
    if (s.empty() || (s[0] >= '0' && s[0] <= '9'))
        return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    });
}

std::string describe_format(uint32_t version)
{
    const FormatLayout* l = find_format_layout(version);
    if (!l)
        return "format " + std::to_string(version) + " (no Warp release known to wrpkit)";
    if (!*l->releases)
        return "format " + std::to_string(version) + " (written by no released Warp; loaded by Warp " + l->loaded_by + ")";
    return "format " + std::to_string(version) + " (written by Warp " + l->releases + ")";
}

std::string upgrade_message(uint32_t version)
{
    const FormatLayout* l = find_format_layout(version);
    const FormatLayout* current = find_format_layout(kCurrentFormat);
    std::string msg = describe_format(version) + ": Warp " + current->loaded_by + " loads only format "
        + std::to_string(kCurrentFormat) + "; convert it with `wrp upgrade IN OUT";
    if (l && l->legacy_args)
        return msg + " --kernels KERNELS.py` (format " + std::to_string(version) + " kernels are rebuilt from their "
            "Python source)";
    return msg + "`";
}

namespace {

bool is_lower_hex(const std::string& s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_sha256_hex(const std::string& s) { return s.size() == 64 && is_lower_hex(s); }

bool all_zero(const uint8_t* p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

bool ends_with(const std::string& s, const char* suffix)
{
    size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

struct Section {
    uint32_t type;
    uint64_t offset;
    uint64_t size;
};

void check_header(const uint8_t* image, size_t size, Wrp1Graph& g)
{
    if (size < kFileHeaderSize)
        fail_invalid_at("header", 0, "file is %zu bytes, smaller than the 64-byte WRP1 header", size);
    if (std::memcmp(image, "WRP1", 4) != 0)
        fail_invalid_at("header.magic", 0, "expected \"WRP1\", found bytes %02x %02x %02x %02x; not a Warp capture",
                        image[0], image[1], image[2], image[3]);
    uint32_t version = load<uint32_t>(image + 4);
    g.layout = find_format_layout(version);
    if (!g.layout) {
        std::string known;
        for (const FormatLayout& l : kFormatLayouts)
            known += (known.empty() ? "" : ", ") + std::to_string(l.version);
        fail_invalid_at("header.version", 4,
                        "WRP1 format version %u is not supported (this build reads formats %s); no released Warp "
                        "wrote it: recapture the graph with Warp %s", version, known.c_str(),
                        find_format_layout(kCurrentFormat)->loaded_by);
    }
    if (uint32_t flags = load<uint32_t>(image + 8))
        fail_invalid_at("header.flags", 8, "flags 0x%x must be zero", flags);
    uint8_t device = image[24];
    if (device > 1)
        fail_invalid_at("header.device_type", 24, "device type %u is neither 0 (CUDA) nor 1 (CPU)", device);
    if (!all_zero(image + 25, 3))
        fail_invalid_at("header._reserved_dt", 25, "reserved bytes must be zero");
    uint32_t arch = load<uint32_t>(image + 28);
    g.device = device == 1 ? Device::Cpu : Device::Cuda;
    if (g.device == Device::Cpu && arch != 0)
        fail_invalid_at("header.target_arch", 28, "a CPU graph must have target_arch 0, found %u", arch);
    if (g.device == Device::Cuda && (arch == 0 || arch > INT_MAX))
        fail_invalid_at("header.target_arch", 28, "a CUDA graph needs a target_arch between 1 and %d, found %u",
                        INT_MAX, arch);
    g.target_arch = arch;
    if (!all_zero(image + 32, 32))
        fail_invalid_at("header._reserved", 32, "reserved bytes must be zero");
}

// Warp writes the table at offset 64 and the sections right after it, in the
// order METADATA, MEMORY, OPERATIONS, up to the end of the file; wrpkit may
// append one ANNOTATIONS section.  Anything else is refused.
std::vector<Section> check_sections(const uint8_t* image, size_t size)
{
    uint32_t num = load<uint32_t>(image + 12);
    if (num != 3 && num != 4)
        fail_invalid_at("header.num_sections", 12,
                        "%u sections; expected 3 (METADATA, MEMORY, OPERATIONS) or 4 (plus wrpkit ANNOTATIONS)", num);
    uint64_t table = load<uint64_t>(image + 16);
    if (table != kSectionTableOffset)
        fail_invalid_at("header.section_table_offset", 16, "section table must start at byte 64, found %llu",
                        static_cast<unsigned long long>(table));
    uint64_t next = kSectionTableOffset + num * kSectionEntrySize;
    if (next > size)
        fail_invalid_at("sections", kSectionTableOffset, "the %u-entry section table runs past the end of the %zu-byte file",
                        num, size);
    static const uint32_t kExpected[4] = {kSectionMetadata, kSectionMemory, kSectionOperations, kSectionAnnotations};
    static const char* kNames[4] = {"METADATA (1)", "MEMORY (2)", "OPERATIONS (3)", "ANNOTATIONS (0x41505257, \"WRPA\")"};
    std::vector<Section> sections;
    for (uint32_t i = 0; i < num; i++) {
        uint64_t at = kSectionTableOffset + i * kSectionEntrySize;
        std::string where = "sections[" + std::to_string(i) + "]";
        Section s{load<uint32_t>(image + at), load<uint64_t>(image + at + 8), load<uint64_t>(image + at + 16)};
        uint32_t flags = load<uint32_t>(image + at + 4);
        uint64_t uncompressed = load<uint64_t>(image + at + 24);
        if (s.type != kExpected[i])
            fail_invalid_at(where + ".type", at, "section type 0x%x found where %s is required", s.type, kNames[i]);
        if (flags)
            fail_invalid_at(where + ".flags", at + 4, "flags 0x%x must be zero", flags);
        if (s.offset != next)
            fail_invalid_at(where + ".offset", at + 8, "section starts at byte %llu; it must follow directly at byte %llu",
                            static_cast<unsigned long long>(s.offset), static_cast<unsigned long long>(next));
        if (s.size == 0 || !range_fits(s.offset, s.size, size))
            fail_invalid_at(where + ".size", at + 16, "size %llu does not fit in the %zu-byte file after byte %llu",
                            static_cast<unsigned long long>(s.size), size, static_cast<unsigned long long>(s.offset));
        if (uncompressed != s.size)
            fail_invalid_at(where + ".uncompressed_size", at + 24, "uncompressed_size %llu differs from size %llu "
                            "(compression is not part of format 18)",
                            static_cast<unsigned long long>(uncompressed), static_cast<unsigned long long>(s.size));
        next = s.offset + s.size;
        sections.push_back(s);
    }
    if (next != size)
        fail_invalid_at("sections", next, "%llu bytes after the last section; the sections must cover the file",
                        static_cast<unsigned long long>(size - next));
    return sections;
}

void check_module(const ModuleRecord& m, Device device, uint8_t kind, uint8_t fallback, const std::string& source_filename,
                  const std::string& source_digest, const uint8_t* recipe, const std::string& where)
{
    if (!is_sha256_hex(m.hash))
        fail_invalid_at(where + ".module_hash", m.at, "module hash %s is not 64 lowercase hex characters",
                        quoted(m.hash).c_str());
    if (!is_plain_basename(m.binary_filename))
        fail_invalid_at(where + ".binary_filename", m.at,
                        "%s is not a plain file name (non-empty, no '/', '\\', ':' or NUL, not \".\" or \"..\")",
                        quoted(m.binary_filename).c_str());
    if (!all_zero(recipe + 7, 9))
        fail_invalid_at(where + ".recipe", m.at, "reserved recipe bytes must be zero");
    bool empty_recipe = all_zero(recipe, 16);
    if (device == Device::Cpu) {
        if (m.target_arch != 0)
            fail_invalid_at(where + ".target_arch", m.at, "a CPU module must have target_arch 0, found %u", m.target_arch);
        if (!m.binary_digest.empty() || !source_filename.empty() || !source_digest.empty() || kind != 0 || fallback != 1
            || !empty_recipe)
            fail_invalid_at(where, m.at, "a CPU module must carry no CUDA artifact metadata (digests, source, kind, recipe)");
        return;
    }
    if (m.target_arch == 0 || m.target_arch > INT_MAX)
        fail_invalid_at(where + ".target_arch", m.at, "a CUDA module needs a target_arch between 1 and %d, found %u",
                        INT_MAX, m.target_arch);
    if (m.binary_digest.empty()) {
        if (!source_filename.empty() || !source_digest.empty() || kind != 0 || fallback != 1 || !empty_recipe)
            fail_invalid_at(where, m.at, "a binary-only CUDA module must have no source, kind NONE, fallback "
                            "SOURCE_UNAVAILABLE and an all-zero recipe");
        return;
    }
    if (!is_sha256_hex(m.binary_digest))
        fail_invalid_at(where + ".binary_digest", m.at, "binary digest is not 64 lowercase hex characters");
    if (kind != 1 && kind != 2)
        fail_invalid_at(where + ".binary_kind", m.at, "binary kind %u is neither PTX (1) nor CUBIN (2)", kind);
    if (fallback > 6)
        fail_invalid_at(where + ".fallback_reason", m.at, "fallback reason %u is out of range 0..6", fallback);
    if (recipe[0] > 1 || recipe[1] > 3 || recipe[2] > 1 || recipe[3] > 1 || recipe[4] > 1 || recipe[5] > 1 || recipe[6] > 2)
        fail_invalid_at(where + ".recipe", m.at, "compile recipe field out of range");
    if (!ends_with(m.binary_filename, kind == 1 ? ".ptx" : ".cubin"))
        fail_invalid_at(where + ".binary_filename", m.at, "%s does not end in %s as its binary kind requires",
                        quoted(m.binary_filename).c_str(), kind == 1 ? ".ptx" : ".cubin");
    if (source_filename.empty() != source_digest.empty()
        || (!source_filename.empty()
            && (!is_plain_basename(source_filename) || !ends_with(source_filename, ".cu") || !is_sha256_hex(source_digest))))
        fail_invalid_at(where + ".source_filename", m.at, "source file name or digest is invalid");
    if ((recipe[6] == 1 && m.target_arch < 90) || (recipe[6] == 2 && m.target_arch < 100))
        fail_invalid_at(where + ".recipe.arch_suffix", m.at, "arch suffix is invalid for target_arch %u", m.target_arch);
    if (fallback == 0 && source_filename.empty())
        fail_invalid_at(where + ".fallback_reason", m.at, "source fallback marked available without a source file");
}

// Whether names split into a prefix and a suffix that each hold no name twice (wrpkit.model.binding_split).
bool is_one_save(const std::vector<std::string>& names)
{
    std::set<std::string> seen;
    size_t prefix = 0;
    while (prefix < names.size() && seen.insert(names[prefix]).second)
        prefix++;
    seen.clear();
    size_t suffix = 0;
    while (suffix < names.size() && seen.insert(names[names.size() - 1 - suffix]).second)
        suffix++;
    return names.size() - suffix <= prefix;
}

void read_metadata(const uint8_t* image, const Section& s, Wrp1Graph& g, bool semantic)
{
    const FormatLayout& layout = *g.layout;
    ByteReader r(image, s.offset, s.offset + s.size, "metadata");
    uint64_t at = r.pos();
    uint32_t version = r.read<uint32_t>("format_version");
    if (version != layout.version)
        fail_invalid_at("metadata.format_version", at, "metadata format version %u differs from the header's %u", version,
                        layout.version);
    at = r.pos();
    if (layout.producer_version) {
        g.producer_version = r.read_string("warp_version", kMaxVersionBytes);
        if (g.producer_version.empty()
            || !std::all_of(g.producer_version.begin(), g.producer_version.end(),
                            [](char c) { return c > 0x20 && c < 0x7f; }))
            fail_invalid_at("metadata.warp_version", at, "producer Warp version must be non-empty printable ASCII");
    }
    at = r.pos();
    uint32_t arch = r.read<uint32_t>("target_arch");
    if (arch != g.target_arch)
        fail_invalid_at("metadata.target_arch", at, "target_arch %u differs from the header's %u", arch, g.target_arch);

    at = r.pos();
    g.num_bindings_at = at + 8;
    uint32_t n_modules = r.read<uint32_t>("num_modules");
    uint32_t n_kernels = r.read<uint32_t>("num_kernels");
    uint32_t n_bindings = r.read<uint32_t>("num_bindings");
    uint32_t n_meshes = r.read<uint32_t>("num_meshes");
    uint32_t n_ptrs = r.read<uint32_t>("num_ptr_locations");
    struct Cap { const char* name; uint32_t count, cap, min_bytes; };
    const Cap caps[] = {{"num_modules", n_modules, kMaxModules, layout.module_record_min_size},
                        {"num_kernels", n_kernels, kMaxKernels, 28}, {"num_bindings", n_bindings, kMaxBindings, 8},
                        {"num_meshes", n_meshes, kMaxMeshes, layout.mesh_record_size},
                        {"num_ptr_locations", n_ptrs, kMaxPointerLocations, layout.pointer_location_size}};
    uint64_t min_total = 0;
    for (const Cap& c : caps) {
        if (c.count > c.cap)
            fail_invalid_at(std::string("metadata.") + c.name, at, "%u exceeds the limit of %u", c.count, c.cap);
        min_total += uint64_t(c.count) * c.min_bytes;
    }
    if (min_total > r.remaining())
        fail_invalid_at("metadata", at, "the record counts need at least %llu bytes but only %llu remain",
                        static_cast<unsigned long long>(min_total), static_cast<unsigned long long>(r.remaining()));

    g.modules.reserve(n_modules);
    std::set<std::string> module_hashes;
    for (uint32_t i = 0; i < n_modules; i++) {
        std::string where = "metadata.modules[" + std::to_string(i) + "]";
        r.set_where(where);
        ModuleRecord m;
        m.at = r.pos();
        m.hash = r.read_string("module_hash", 256);
        r.read_string("module_name", kMaxStringBytes);
        m.binary_filename = r.read_string("binary_filename", kMaxFilenameBytes);
        m.target_arch = r.read<uint32_t>("target_arch");
        // Formats without module extras read as what Warp 1.19 writes for a module that has none:
        // no digests or source, kind NONE, fallback SOURCE_UNAVAILABLE, an all-zero recipe.
        static const uint8_t kNoRecipe[16] = {};
        std::string source_filename, source_digest;
        uint8_t kind = 0, fallback = 1;
        const uint8_t* recipe = kNoRecipe;
        if (layout.module_extras) {
            m.binary_digest = r.read_string("binary_digest", 64);
            source_filename = r.read_string("source_filename", kMaxFilenameBytes);
            source_digest = r.read_string("source_digest", 64);
            kind = r.read<uint8_t>("binary_kind");
            fallback = r.read<uint8_t>("fallback_reason");
            r.need(16, "recipe");
            recipe = image + r.pos();
            r.skip(16, "recipe");
        }
        check_module(m, g.device, kind, fallback, source_filename, source_digest, recipe, where);
        if (!module_hashes.insert(m.hash).second)
            fail_invalid_at(where + ".module_hash", m.at, "duplicate module hash %s", m.hash.c_str());
        g.modules.push_back(std::move(m));
    }

    g.kernels.reserve(n_kernels);
    std::map<std::string, uint32_t> kernel_keys;  // formats whose Warp keys kernels by key alone
    for (uint32_t i = 0; i < n_kernels; i++) {
        std::string where = "metadata.kernels[" + std::to_string(i) + "]";
        r.set_where(where);
        KernelRecord k;
        k.at = r.pos();
        k.key = r.read_string("kernel_key", kMaxStringBytes);
        k.module_hash = r.read_string("module_hash", 256);
        k.forward_name = r.read_string("forward_name", kMaxStringBytes);
        k.backward_name = r.read_string("backward_name", kMaxStringBytes);
        r.read<uint32_t>("forward_smem_bytes");
        r.read<uint32_t>("backward_smem_bytes");
        r.read<uint32_t>("block_dim");
        if (k.key.empty())
            fail_invalid_at(where + ".kernel_key", k.at, "kernel key is empty");
        if (!is_c_identifier(k.forward_name))
            fail_invalid_at(where + ".forward_name", k.at, "forward symbol %s is not a C identifier", quoted(k.forward_name).c_str());
        // backward_name is checked where a backward launch uses it (wrp1_ops.cpp): unused, it is never looked up.
        if (semantic && !module_hashes.count(k.module_hash))
            fail_invalid_at(where + ".module_hash", k.at, "kernel %s names module %s, which is not in the module table",
                            quoted(k.key).c_str(), quoted(k.module_hash).c_str());
        if (!g.kernel_index.emplace(std::make_pair(k.module_hash, k.key), g.kernels.size()).second)
            fail_invalid_at(where, k.at, "duplicate kernel %s of module %s", quoted(k.key).c_str(),
                            quoted(k.module_hash).c_str());
        if (layout.kernels_by_key && !kernel_keys.emplace(k.key, i).second)
            fail_invalid_at(where + ".kernel_key", k.at, "kernel key %s is recorded twice (kernels[%u] too); Warp %s "
                            "keys kernels by key alone and would keep only the last", quoted(k.key).c_str(),
                            kernel_keys[k.key], layout.releases);
        g.kernels.push_back(std::move(k));
    }

    g.bindings.reserve(n_bindings);
    std::map<std::string, uint32_t> binding_regions;
    std::vector<std::string> binding_names;  // every name in file order, repeats included
    size_t bindings_at = r.pos();
    for (uint32_t i = 0; i < n_bindings; i++) {
        std::string where = "metadata.bindings[" + std::to_string(i) + "]";
        r.set_where(where);
        BindingRecord b;
        b.at = r.pos();
        b.name = r.read_string("name", kMaxStringBytes);
        b.region_id = r.read<uint32_t>("region_id");
        if (b.name.empty())
            fail_invalid_at(where + ".name", b.at, "binding name is empty");
        // A name given both as input and output (an in-place array) is
        // written twice with the same region; keep one.  A name written
        // again with another region (capture_save called twice on one graph
        // with different arrays) resolves as Warp's loader resolves it: the
        // last record wins (apic.cpp, `graph->bindings[name] = region_id`).
        binding_names.push_back(b.name);
        auto seen = binding_regions.emplace(b.name, b.region_id);
        if (!seen.second) {
            if (seen.first->second != b.region_id) {
                g.warnings.push_back(where + ".region_id: binding " + quoted(b.name) + " names region " +
                                     std::to_string(b.region_id) + " here but region " +
                                     std::to_string(seen.first->second) + " before; Warp uses the last, region " +
                                     std::to_string(b.region_id));
                seen.first->second = b.region_id;
                for (BindingRecord& kept : g.bindings)
                    if (kept.name == b.name)
                        kept.region_id = b.region_id;
            }
            continue;
        }
        g.bindings.push_back(std::move(b));
    }
    // Warp writes capture_save's inputs, then its outputs, each a set of names: a list that does not
    // split into two runs without repeats comes from capture_save called more than once on the graph
    // (Warp's APIC state keeps every save's names).  Stock Warp loads it, so it is only a warning:
    // roles are unknown, and each name resolves to its last record (VALIDATION-RULES.md, "Binding").
    if (!is_one_save(binding_names))
        g.warnings.push_back("metadata.bindings: binding names repeat: the list is not one capture_save's inputs "
                             "then outputs (was capture_save called twice on one graph?); each name resolves to "
                             "its last record, as in Warp's loader");
    (void)bindings_at;
    g.bindings_end = r.pos();

    g.meshes.reserve(n_meshes);
    std::unordered_set<uint64_t> mesh_ids;
    for (uint32_t i = 0; i < n_meshes; i++) {
        std::string where = "metadata.meshes[" + std::to_string(i) + "]";
        r.set_where(where);
        MeshRecord m;
        m.at = r.pos();
        m.num_points = r.read<int32_t>("num_points");
        m.num_tris = r.read<int32_t>("num_tris");
        uint8_t winding = r.read<uint8_t>("support_winding_number");
        uint8_t constructor = r.read<uint8_t>("bvh_constructor");
        uint16_t leaf = r.read<uint16_t>("bvh_leaf_size");
        m.points_region_id = r.read<uint32_t>("points_region_id");
        m.indices_region_id = r.read<uint32_t>("indices_region_id");
        m.velocities_region_id = r.read<uint32_t>("velocities_region_id");
        m.original_ptr = r.read<uint64_t>("original_ptr");
        if (m.num_points < 0 || m.num_tris < 0)
            fail_invalid_at(where, m.at, "negative point or triangle count (%d, %d)", m.num_points, m.num_tris);
        if (winding > 1)
            fail_invalid_at(where + ".support_winding_number", m.at + 8, "must be 0 or 1, found %u", winding);
        if (constructor > 2)
            fail_invalid_at(where + ".bvh_constructor", m.at + 9, "BVH constructor %u is not 0 (SAH), 1 or 2", constructor);
        if (leaf == 0)
            fail_invalid_at(where + ".bvh_leaf_size", m.at + 10, "BVH leaf size must be at least 1");
        if (m.original_ptr == 0)
            fail_invalid_at(where + ".original_ptr", m.at + 24, "mesh id is zero");
        if (!mesh_ids.insert(m.original_ptr).second)
            fail_invalid_at(where + ".original_ptr", m.at + 24, "mesh id 0x%llx appears twice",
                                static_cast<unsigned long long>(m.original_ptr));
        g.meshes.push_back(m);
    }

    g.pointer_locations.reserve(n_ptrs);
    for (uint32_t i = 0; i < n_ptrs; i++) {
        r.set_where("metadata.ptr_locations[" + std::to_string(i) + "]");
        PointerLocationRecord p;
        p.at = r.pos();
        p.region_id = r.read<uint32_t>("region_id");
        p.offset = r.read<uint64_t>("offset");
        p.stride = r.read<uint64_t>("stride");
        // Before format 18 there is no count: 0 stands for "not recorded" (stride 0 is one slot,
        // else every stride to the end of the region; Warp's loop stays inside the region).
        p.count = layout.pointer_location_size >= 28 ? r.read<uint64_t>("count") : 0;
        g.pointer_locations.push_back(p);
    }

    if (r.remaining() != 0)
        fail_invalid_at("metadata", r.pos(), "%llu trailing bytes after the last record",
                        static_cast<unsigned long long>(r.remaining()));
}

void read_memory(const uint8_t* image, const Section& s, Wrp1Graph& g, const ValidationLimits& /*limits*/)
{
    ByteReader r(image, s.offset, s.offset + s.size, "memory");
    uint64_t at = r.pos();
    uint32_t count = r.read<uint32_t>("region_count");
    if (count > kMaxRegions || uint64_t(count) * 24 > r.remaining())
        fail_invalid_at("memory.region_count", at, "%u regions cannot fit in the %llu bytes of the section (limit %u)", count,
                        static_cast<unsigned long long>(r.remaining()), kMaxRegions);
    g.regions.reserve(count);
    uint64_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        std::string where = "memory.regions[" + std::to_string(i) + "]";
        r.set_where(where);
        RegionRecord rec;
        rec.at = r.pos();
        rec.id = r.read<uint32_t>("region_id");
        r.read<uint32_t>("element_size");  // informational; Warp ignores it
        rec.size = r.read<uint64_t>("size");
        uint8_t has_data = r.read<uint8_t>("has_initial_data");
        r.need(7, "_pad");
        if (!all_zero(image + r.pos(), 7))
            fail_invalid_at(where + "._pad", r.pos(), "pad bytes must be zero");
        r.skip(7, "_pad");
        if (rec.id == 0)
            fail_invalid_at(where + ".region_id", rec.at, "region id 0 is reserved");
        if (!g.regions.empty() && rec.id <= g.regions.back().id)
            fail_invalid_at(where + ".region_id", rec.at, "region id %u is not above the previous id %u (ids must ascend)",
                            rec.id, g.regions.back().id);
        if (has_data > 1)
            fail_invalid_at(where + ".has_initial_data", rec.at + 16, "flag must be 0 or 1, found %u", has_data);
        if (!add_ok(total, rec.size, &total))
            fail_invalid_at(where + ".size", rec.at + 8, "regions add up to more than 2^64 bytes");
        rec.has_initial_data = has_data == 1;
        rec.data_offset = r.pos();
        if (rec.has_initial_data)
            r.skip(rec.size, "initial_data");
        g.regions.push_back(rec);
    }
    if (r.remaining() != 0)
        fail_invalid_at("memory", r.pos(), "%llu trailing bytes after the last region",
                        static_cast<unsigned long long>(r.remaining()));
}

const RegionRecord& require_region(const Wrp1Graph& g, uint32_t id, const std::string& where, uint64_t at, const char* what)
{
    const RegionRecord* region = g.find_region(id);
    if (!region)
        fail_invalid_at(where, at, "%s region %u does not exist", what, id);
    return *region;
}

// Meshes are rebuilt by Warp at load time from region memory: the BVH build
// reads points[indices[i]], so indices are checked against num_points here.
void check_meshes(const uint8_t* image, const Wrp1Graph& g)
{
    for (size_t i = 0; i < g.meshes.size(); i++) {
        const MeshRecord& m = g.meshes[i];
        std::string where = "metadata.meshes[" + std::to_string(i) + "]";
        uint64_t points_bytes = uint64_t(m.num_points) * 12;
        uint64_t index_count = uint64_t(m.num_tris) * 3;
        const RegionRecord& points = require_region(g, m.points_region_id, where + ".points_region_id", m.at + 12, "points");
        const RegionRecord& indices =
            require_region(g, m.indices_region_id, where + ".indices_region_id", m.at + 16, "indices");
        if (points.size < points_bytes)
            fail_invalid_at(where + ".num_points", m.at, "%d points need %llu bytes; region %u has %llu", m.num_points,
                            static_cast<unsigned long long>(points_bytes), points.id,
                            static_cast<unsigned long long>(points.size));
        if (indices.size < index_count * 4)
            fail_invalid_at(where + ".num_tris", m.at + 4, "%d triangles need %llu bytes; region %u has %llu", m.num_tris,
                            static_cast<unsigned long long>(index_count * 4), indices.id,
                            static_cast<unsigned long long>(indices.size));
        if (m.velocities_region_id != 0) {
            const RegionRecord& vel =
                require_region(g, m.velocities_region_id, where + ".velocities_region_id", m.at + 20, "velocities");
            if (vel.size < points_bytes)
                fail_invalid_at(where + ".velocities_region_id", m.at + 20, "region %u is smaller than %d points", vel.id,
                                m.num_points);
        }
        if (index_count > 0 && m.num_points == 0)
            fail_invalid_at(where, m.at, "mesh has triangles but no points");
        if (indices.has_initial_data) {
            const uint8_t* data = image + indices.data_offset;
            for (uint64_t k = 0; k < index_count; k++) {
                int32_t v = load<int32_t>(data + 4 * k);
                if (v < 0 || v >= m.num_points)
                    fail_invalid_at(where, indices.data_offset + 4 * k, "triangle index %d (entry %llu of region %u) is "
                                    "outside 0..%d", v, static_cast<unsigned long long>(k), indices.id, m.num_points - 1);
            }
        }
    }
}

void check_references(const uint8_t* image, const Wrp1Graph& g)
{
    for (size_t i = 0; i < g.bindings.size(); i++) {
        const BindingRecord& b = g.bindings[i];
        if (!g.find_region(b.region_id))
            fail_invalid_at("metadata.bindings[" + std::to_string(i) + "].region_id", b.at,
                            "binding %s names region %u, which does not exist", quoted(b.name).c_str(), b.region_id);
    }
    check_meshes(image, g);
    // Mirrors apic_fixup_ptr_locations: `count` 8-byte slots at offset + k*stride.
    for (size_t i = 0; i < g.pointer_locations.size(); i++) {
        const PointerLocationRecord& p = g.pointer_locations[i];
        std::string where = "metadata.ptr_locations[" + std::to_string(i) + "]";
        const RegionRecord& region = require_region(g, p.region_id, where + ".region_id", p.at, "pointer-location");
        if (p.count == 0)
            continue;
        bool ok = p.offset <= region.size && region.size - p.offset >= 8 && (p.stride != 0 || p.count == 1)
            && (p.stride == 0 || p.count - 1 <= (region.size - p.offset - 8) / p.stride);
        if (!ok)
            fail_invalid_at(where, p.at, "%llu slots at offset %llu stride %llu do not fit in region %u of %llu bytes",
                            static_cast<unsigned long long>(p.count), static_cast<unsigned long long>(p.offset),
                            static_cast<unsigned long long>(p.stride), region.id,
                            static_cast<unsigned long long>(region.size));
    }
}

}  // namespace

Wrp1Graph validate_wrp1(const uint8_t* image, size_t size, const ValidationLimits& limits)
{
    if (!image)
        fail(WRP_ERR_INVALID_ARGUMENT, "no WRP1 data given");
    if (size > limits.max_file_bytes)
        fail(WRP_ERR_INVALID_FILE, "file is %zu bytes, larger than the limit of %llu bytes", size,
             static_cast<unsigned long long>(limits.max_file_bytes));
    Wrp1Graph g;
    check_header(image, size, g);
    std::vector<Section> sections = check_sections(image, size);
    g.metadata_at = sections[0].offset;
    g.metadata_size = sections[0].size;
    g.memory_at = sections[1].offset;
    g.memory_size = sections[1].size;
    g.operations_at = sections[2].offset;
    g.operations_size = sections[2].size;
    read_metadata(image, sections[0], g, limits.semantic_checks);
    read_memory(image, sections[1], g, limits);
    if (limits.semantic_checks)
        check_references(image, g);
    // Annotations first: launches are checked against the kernel signatures they record.
    if (sections.size() == 4)
        read_annotations(image, sections[3].offset, sections[3].offset + sections[3].size, g);
    validate_operations(image, sections[2].offset, sections[2].offset + sections[2].size, g, limits.semantic_checks);
    return g;
}

}  // namespace wrp
