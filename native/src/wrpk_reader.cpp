// wrpk_reader.cpp -- see wrpk_reader.h.  The checks mirror wrpkit/formats/wrpk/
// (reader.decode_wrpk; the header and blob checks, blobs.read_header and blobs.check_blobs,
// are wrpk_blobs.cpp's) and schema/WRPK-FORMAT.md; the WRP1 encoding mirrors
// wrpkit/formats/wrp1_encode.py (encode_wrp1's records) byte for byte.  Each op's record is
// written by wrpk_op_writer.h, generated from the op table by tools/gen_op_writer.py.
#include "wrpk_reader.h"

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstring>

#include "checked_math.h"
#include "error.h"
#include "sha256.h"
#include "wrp1_model.h"
#include "wrp_generated.h"
#include "wrpk_blobs.h"
#include "wrpk_layout.h"

namespace wrp {

const char* const kWrpkImageOffsetNote = "of the bundle's program as a .wrp (wrp convert BUNDLE.wrpk X.wrp)";

namespace {

namespace rec = op_record;  // every op record's size (generated: wrp1_layouts.h)

namespace fbs = wrpkit::formats::fbs;
using flatbuffers::Offset;
using flatbuffers::Vector;

// The header's layout, the tiling rules and the limits (generated from wrpkit/formats/wrpk/tables.py).
using namespace wrpk_layout;
// The bundle's header, blob area and checksums, and the image's memory (wrpk_blobs.cpp).
using namespace wrpk_blobs;
// The Verifier's depth counts tables: Program, then per nesting level an
// Operation and its If/While, then the innermost op's table.
constexpr uint32_t kVerifierMaxDepth = 2 * kMaxBodyDepth + 4;
// Tables and vectors may be shared in a valid FlatBuffer, so the WRP1 records
// can be larger than the manifest (wrpkit shares identical value vectors).
// A hostile manifest that references one big vector from many tables must
// not turn a small file into a huge allocation: the records (metadata and
// ops, not region data) may be at most kExpansionFloor + kExpansionFactor
// times the manifest's size (wrpk_layout.h).

static_assert(sizeof(fbs::LegacyArg) == kLegacyArg.size, "the schema's LegacyArg must be the WRP1 descriptor, byte for byte");

// A field path inside the manifest ("ops[3].then_ops[0].relocations"),
// rendered only when an error is reported.
struct Path {
    const Path* parent;
    const char* name;  // a field name, or nullptr for an index
    uint32_t index;

    std::string str() const
    {
        std::string head = parent ? parent->str() : std::string();
        if (!name)
            return head + "[" + std::to_string(index) + "]";
        return head.empty() ? std::string(name) : head + "." + name;
    }
    Path field(const char* n) const { return Path{this, n, 0}; }
    Path at(uint32_t i) const { return Path{this, nullptr, i}; }
};

// Raw scalar of a table field (generated accessors turn booleans into bool
// and so hide values other than 0 and 1).
template <typename T> T raw_field(const void* table, flatbuffers::voffset_t field, T def)
{
    return reinterpret_cast<const flatbuffers::Table*>(table)->GetField<T>(field, def);
}

template <typename T> uint32_t count_of(const T* vec) { return vec ? vec->size() : 0; }

class Writer {
public:
    explicit Writer(uint64_t* budget)
        : budget_(budget)
    {
    }

    std::vector<uint8_t> bytes;

    // Account for `n` more bytes before they are written (see kExpansionFactor).
    bool reserve(uint64_t n)
    {
        if (n > *budget_)
            return false;
        *budget_ -= n;
        return true;
    }
    template <typename T> void put(T v)
    {
        size_t at = bytes.size();
        bytes.resize(at + sizeof(T));
        std::memcpy(&bytes[at], &v, sizeof(T));
    }
    void raw(const void* p, size_t n)
    {
        const uint8_t* b = static_cast<const uint8_t*>(p);
        bytes.insert(bytes.end(), b, b + n);
    }
    void zeros(size_t n) { bytes.resize(bytes.size() + n, 0); }
    void str(const flatbuffers::String* s)
    {
        uint32_t n = s ? s->size() : 0;
        put<uint32_t>(n);
        if (n)
            raw(s->data(), n);
    }
    template <typename T> void patch(size_t at, T v) { std::memcpy(&bytes[at], &v, sizeof(T)); }
    size_t size() const { return bytes.size(); }

private:
    uint64_t* budget_;
};

uint64_t str_bytes(const flatbuffers::String* s) { return 4 + (s ? s->size() : 0); }

class ManifestDecoder {
public:
    ManifestDecoder(const uint8_t* manifest, uint64_t manifest_size)
        : m_(manifest)
        , limit_(kExpansionFloor + kExpansionFactor * manifest_size)
        , budget_(limit_)
        , op_refs_limit_(manifest_size / 4 + 1)
        , op_refs_left_(op_refs_limit_)
        , meta_(&budget_)
        , ops_(&budget_)
    {
    }

    void decode(const fbs::Program* p)
    {
        Path root{nullptr, "manifest", 0};
        program(p, root);
    }

    std::vector<BlobRef> blobs;
    std::vector<RegionOut> regions;
    std::vector<WrpkModule> modules;
    const fbs::Program* prog = nullptr;
    uint32_t top_level_ops = 0;
    Writer& meta() { return meta_; }
    Writer& ops() { return ops_; }

private:
    uint64_t at(const void* p) const { return kHeaderSize + static_cast<uint64_t>(static_cast<const uint8_t*>(p) - m_); }

    [[noreturn]] void bad(const Path& where, const void* p, const char* fmt, ...) const
        __attribute__((format(printf, 4, 5)))
    {
        va_list args;
        va_start(args, fmt);
        std::string what = vformat(fmt, args);
        va_end(args);
        fail_invalid_at(where.str(), at(p), "%s", what.c_str());
    }

    void reserve(Writer& w, uint64_t n, const Path& where, const void* p)
    {
        if (!w.reserve(n))
            bad(where, p,
                "the program's records would exceed %llu bytes as WRP1 (64 MiB + %llu times the manifest's size): "
                "tables or vectors are referenced over and over",
                static_cast<unsigned long long>(limit_), static_cast<unsigned long long>(kExpansionFactor));
    }

    void check_bool(const void* table, flatbuffers::voffset_t field, uint8_t def, const Path& where, const char* name)
    {
        uint8_t v = raw_field<uint8_t>(table, field, def);
        if (v > 1)
            bad(where.field(name), table, "boolean must be 0 or 1, found %u", v);
    }

    void blob(const fbs::Blob* b, std::string name, const Path& where, const uint8_t** data_out, size_t* size_out,
              uint64_t memory_offset = kNotMapped, uint32_t region_id = 0)
    {
        if (!b)
            return;
        const Vector<uint8_t>* sha = b->sha256();
        std::string path = where.str();  // named by its place in the model, as wrpkit does: "regions[2].data"
        if (path.compare(0, 9, "manifest.") == 0)
            path.erase(0, 9);
        blobs.push_back(BlobRef{std::move(name), std::move(path), b->offset(), b->length(), sha ? sha->data() : nullptr,
                                count_of(sha), at(b), data_out, size_out, memory_offset, region_id});
        const Vector<uint8_t>* chunks = b->chunk_sha256();
        blobs.back().chunk_length = b->chunk_length();
        blobs.back().chunk_sha = chunks ? chunks->data() : nullptr;
        blobs.back().chunk_sha_len = count_of(chunks);
    }

    // ------------------------------------------------------------- program
    void program(const fbs::Program* p, const Path& root)
    {
        prog = p;
        uint32_t fmt = p->format_version();
        layout_ = find_format_layout(fmt);
        if (!layout_) {
            std::string known;
            for (const FormatLayout& l : kFormatLayouts)
                known += (known.empty() ? "" : ", ") + std::to_string(l.version);
            bad(root.field("format_version"), p,
                "APIC format version %u is not supported (this build reads formats %s); recapture the graph with "
                "Warp %s", fmt, known.c_str(), find_format_layout(kCurrentFormat)->loaded_by);
        }
        // The records are written in the program's own format, so that the image is validated
        // under that format's rules; what the format cannot hold is refused here.
        const FormatLayout& layout = *layout_;
        if (!layout.producer_version && count_of(p->warp_version()))
            bad(root.field("warp_version"), p, "format %u records no producer version, found %s", fmt,
                quoted(p->warp_version()->str()).c_str());
        uint8_t device = raw_field<uint8_t>(p, fbs::Program::VT_DEVICE_TYPE, 1);
        if (device > 1)
            bad(root.field("device_type"), p, "device type must be 0 (CUDA) or 1 (CPU), found %u", device);
        uint32_t arch = p->target_arch();
        if ((device == 1) != (arch == 0) || arch > INT_MAX)
            bad(root.field("target_arch"), p, "target arch %u does not fit device type %s", arch,
                device == 1 ? "CPU" : "CUDA");

        Writer& w = meta_;
        reserve(w, 8 + str_bytes(p->warp_version()) + 20, root, p);
        w.put<uint32_t>(fmt);
        if (layout.producer_version)
            w.str(p->warp_version());
        w.put<uint32_t>(arch);
        w.put<uint32_t>(count_of(p->modules()));
        w.put<uint32_t>(count_of(p->kernels()));
        w.put<uint32_t>(count_of(p->bindings()));
        w.put<uint32_t>(count_of(p->meshes()));
        w.put<uint32_t>(count_of(p->pointer_locations()));

        Path mp = root.field("modules");
        modules.reserve(count_of(p->modules()));
        for (uint32_t i = 0; i < count_of(p->modules()); i++)
            module(p->modules()->Get(i), mp.at(i));
        Path kp = root.field("kernels");
        for (uint32_t i = 0; i < count_of(p->kernels()); i++) {
            const fbs::Kernel* k = p->kernels()->Get(i);
            reserve(w,
                    str_bytes(k->kernel_key()) + str_bytes(k->module_hash()) + str_bytes(k->forward_name())
                        + str_bytes(k->backward_name()) + 12,
                    kp.at(i), k);
            w.str(k->kernel_key());
            w.str(k->module_hash());
            w.str(k->forward_name());
            w.str(k->backward_name());
            w.put<uint32_t>(k->forward_smem_bytes());
            w.put<uint32_t>(k->backward_smem_bytes());
            w.put<uint32_t>(k->block_dim());
        }
        Path bp = root.field("bindings");
        for (uint32_t i = 0; i < count_of(p->bindings()); i++) {
            const fbs::Binding* b = p->bindings()->Get(i);
            reserve(w, str_bytes(b->name()) + 4, bp.at(i), b);
            w.str(b->name());
            w.put<uint32_t>(b->region_id());
        }
        Path mep = root.field("meshes");
        for (uint32_t i = 0; i < count_of(p->meshes()); i++) {
            const fbs::Mesh* m = p->meshes()->Get(i);
            check_bool(m, fbs::Mesh::VT_SUPPORT_WINDING_NUMBER, 0, mep.at(i), "support_winding_number");
            reserve(w, 32, mep.at(i), m);
            w.put<int32_t>(m->num_points());
            w.put<int32_t>(m->num_tris());
            w.put<uint8_t>(raw_field<uint8_t>(m, fbs::Mesh::VT_SUPPORT_WINDING_NUMBER, 0));
            w.put<uint8_t>(m->bvh_constructor());
            w.put<uint16_t>(m->bvh_leaf_size());
            w.put<uint32_t>(m->points_region_id());
            w.put<uint32_t>(m->indices_region_id());
            w.put<uint32_t>(m->velocities_region_id());
            w.put<uint64_t>(m->original_ptr());
        }
        Path pp = root.field("pointer_locations");
        for (uint32_t i = 0; i < count_of(p->pointer_locations()); i++) {
            const fbs::PointerLocation* l = p->pointer_locations()->Get(i);
            bool has_count = layout.pointer_location_size >= 28;
            if (!has_count && l->count())
                bad(pp.at(i), l, "format %u pointer locations record no slot count, found %llu", fmt,
                    static_cast<unsigned long long>(l->count()));
            reserve(w, layout.pointer_location_size, pp.at(i), l);
            w.put<uint32_t>(l->region_id());
            w.put<uint64_t>(l->offset());
            w.put<uint64_t>(l->stride());
            if (has_count)
                w.put<uint64_t>(l->count());
        }

        Path rp = root.field("regions");
        // Blob references hold pointers into `regions`, which therefore must never move.
        regions.reserve(count_of(p->regions()));
        uint32_t last = 0;
        uint64_t memory_pos = 4;  // in the WRP1 MEMORY section: the region count, then records and data
        for (uint32_t i = 0; i < count_of(p->regions()); i++) {
            const fbs::Region* r = p->regions()->Get(i);
            Path here = rp.at(i);
            if (r->region_id() <= last)
                bad(here.field("region_id"), r,
                    "region id %u is not above the previous id %u (ids must be unique, ascending and >= 1)",
                    r->region_id(), last);
            last = r->region_id();
            check_bool(r, fbs::Region::VT_HAS_INITIAL_DATA, 0, here, "has_initial_data");
            bool has = r->has_initial_data();
            const fbs::Blob* data = r->data();
            if (has != (data != nullptr))
                bad(here.field("data"), r, "region %u has_initial_data is %s but its data blob is %s", r->region_id(),
                    has ? "true" : "false", data ? "present" : "absent");
            if (data && data->length() != r->size())
                bad(here.field("data"), data, "region %u data blob is %llu bytes, the region %llu", r->region_id(),
                    static_cast<unsigned long long>(data->length()), static_cast<unsigned long long>(r->size()));
            uint64_t memory_offset = 0;
            if (!add_ok(memory_pos, 24, &memory_offset) || !add_ok(memory_offset, has ? r->size() : 0, &memory_pos))
                bad(here.field("size"), r, "the regions' data adds up to more than 2^64 bytes");
            regions.push_back(RegionOut{r->region_id(), r->element_size(), r->size(), has, memory_offset});
            blob(data, "region " + std::to_string(r->region_id()) + " initial data", here.field("data"),
                 &regions.back().data, &regions.back().data_size, memory_offset, r->region_id());
        }

        reserve(ops_, 4, root, p);
        top_level_ops = op_list(p->ops(), root.field("ops"), 1);
    }

    void module(const fbs::Module* m, const Path& here)
    {
        Writer& w = meta_;
        reserve(w,
                str_bytes(m->module_hash()) + str_bytes(m->module_name()) + str_bytes(m->binary_filename()) + 4
                    + str_bytes(m->binary_digest()) + str_bytes(m->source_filename()) + str_bytes(m->source_digest())
                    + 2 + 16,
                here, m);
        w.str(m->module_hash());
        w.str(m->module_name());
        w.str(m->binary_filename());
        w.put<uint32_t>(m->target_arch());
        const fbs::CudaCompileRecipe* recipe = m->recipe();
        static const uint8_t kNoRecipe[7] = {};
        if (layout_->module_extras) {
            w.str(m->binary_digest());
            w.str(m->source_filename());
            w.str(m->source_digest());
            w.put<uint8_t>(static_cast<uint8_t>(m->binary_kind()));
            w.put<uint8_t>(static_cast<uint8_t>(m->fallback_reason()));
            if (recipe)
                w.raw(recipe, 7);  // seven u8 fields, no padding
            else
                w.zeros(7);
            w.zeros(9);
        } else if (count_of(m->binary_digest()) || count_of(m->source_filename()) || count_of(m->source_digest())
                   || static_cast<uint8_t>(m->binary_kind()) != 0 || static_cast<uint8_t>(m->fallback_reason()) != 1
                   || (recipe && std::memcmp(recipe, kNoRecipe, 7) != 0)) {
            bad(here, m, "format %u module records carry no binary digest, source, binary kind, fallback reason or "
                "compile recipe", layout_->version);
        }

        std::string filename = m->binary_filename() ? m->binary_filename()->str() : std::string();
        std::string source = m->source_filename() ? m->source_filename()->str() : std::string();
        if (m->source() && source.empty())
            bad(here.field("source"), m, "module carries a source blob but has no source_filename");
        modules.push_back(WrpkModule{filename, m->binary() != nullptr});
    }

public:
    // Module blobs point into `modules`, which must not move afterwards.
    void module_blobs()
    {
        Path root{nullptr, "manifest", 0};
        Path mp = root.field("modules");
        for (uint32_t i = 0; i < count_of(prog->modules()); i++) {
            const fbs::Module* m = prog->modules()->Get(i);
            blob(m->binary(), "module " + printable(modules[i].binary_filename), mp.at(i).field("binary"),
                 &modules[i].data, &modules[i].size);
            std::string source = m->source_filename() ? m->source_filename()->str() : std::string();
            blob(m->source(), "module source " + printable(source), mp.at(i).field("source"), nullptr, nullptr);
        }
    }

private:
    // --------------------------------------------------------------- ops
    uint32_t op_list(const Vector<Offset<fbs::Operation>>* list, const Path& where, uint32_t depth)
    {
        uint32_t n = count_of(list);
        if (!list)
            return 0;
        if (depth > kMaxBodyDepth + 1)
            bad(where, list, "IF/WHILE bodies are nested deeper than %u levels", kMaxBodyDepth);
        // A body vector shared by many IF/WHILE tables is walked once per
        // table: bound the entries walked in all, as wrpkit/formats/wrpk/reader.py does.
        if (n > op_refs_left_)
            bad(where, list,
                "the operation lists hold more than %llu entries in all (a quarter of the manifest's size; a body "
                "shared by several IF/WHILE ops counts each time): tables or vectors are referenced over and over",
                static_cast<unsigned long long>(op_refs_limit_));
        op_refs_left_ -= n;
        for (uint32_t j = 0; j < n; j++) {
            const fbs::Operation* o = list->Get(j);
            Path here = where.at(j);
            uint8_t t = raw_field<uint8_t>(o, fbs::Operation::VT_OP_TYPE, 0);
            if (t == 0 || t == kOpMemcpyD2H || t >= kNumOpTypes)
                bad(here.field("op_type"), o, "op type %u is %s", t,
                    t == kOpMemcpyD2H ? "reserved by Warp (MEMCPY_D2H)" : t == 0 ? "NONE" : "unknown");
            if (!o->op())
                bad(here.field("op"), o, "op of type %s has no table", op_name(t));
            op(t, o->op(), here, depth);
        }
        return n;
    }

    // The op header (type, total size), once the op's `total` bytes are accounted for.
    void head(uint32_t type, uint64_t total, const Path& where, const void* table)
    {
        reserve(ops_, total, where, table);
        ops_.put<uint32_t>(type);
        ops_.put<uint32_t>(static_cast<uint32_t>(total));
    }

    // op(): each op's WRP1 record, field by field (generated from the op table: wrpk_op_writer.h).
#include "wrpk_op_writer.h"

    // The nested bodies of an IF/WHILE whose record (its header at `start`) is written: they follow
    // it, and its total size and the bodies' sizes and op counts are patched in.
    template <typename Record>
    void bodies(uint8_t t, const void* table, size_t start, const Record& r, const Vector<Offset<fbs::Operation>>* a,
                const char* a_name, const Vector<Offset<fbs::Operation>>* b, const char* b_name, const Path& here,
                uint32_t depth)
    {
        Writer& w = ops_;
        size_t a_start = w.size();
        uint32_t a_count = op_list(a, here.field(a_name), depth + 1);
        size_t b_start = w.size();
        uint32_t b_count = b ? op_list(b, here.field(b_name), depth + 1) : 0;
        uint64_t a_size = b_start - a_start, b_size = w.size() - b_start, total = w.size() - start;
        if (total > UINT32_MAX)
            bad(here, table, "the %s record would be %llu bytes; a WRP1 op is at most 4 GiB", op_name(t),
                static_cast<unsigned long long>(total));
        w.patch<uint32_t>(start + 4, static_cast<uint32_t>(total));
        w.patch<uint32_t>(start + r.branch_a_size.offset, static_cast<uint32_t>(a_size));
        w.patch<uint32_t>(start + r.branch_a_op_count.offset, a_count);
        w.patch<uint32_t>(start + r.branch_b_size.offset, static_cast<uint32_t>(b_size));
        w.patch<uint32_t>(start + r.branch_b_op_count.offset, b_count);
    }

    void launch(const fbs::KernelLaunch* k, const Path& here)
    {
        const FormatLayout& layout = *layout_;
        const LaunchLayout& L = layout.launch;
        uint32_t nshape = count_of(k->shape());
        if (nshape != 4)
            bad(here.field("shape"), k, "shape must have 4 entries, found %u", nshape);
        check_bool(k, fbs::KernelLaunch::VT_IS_FORWARD, 1, here, "is_forward");
        bool forward = k->is_forward();
        uint32_t np = count_of(k->params()), na = count_of(k->adjoint_params());
        const Vector<const fbs::LegacyArg*>* legacy = k->legacy_args();
        uint32_t nl = count_of(legacy), nh = count_of(k->handle_offsets());
        const Vector<const fbs::Relocation*>* relocs = k->relocations();
        uint32_t nr = count_of(relocs);
        uint32_t nv = count_of(k->value_data());
        if (nl && (np || na || nr || nv))
            bad(here.field("legacy_args"), k, "a launch with format-3 argument descriptors has no params, relocations "
                "or value data");
        if (forward && na)
            bad(here.field("adjoint_params"), k, "a forward launch must not have adjoint params");
        if (!forward && na != np)
            bad(here.field("adjoint_params"), k, "an adjoint launch needs one adjoint param per param (%u), found %u",
                np, na);
        // What the program's format cannot hold (wrpkit's validate refuses the same).
        if (layout.legacy_args && (np || nr || nv))
            bad(here, k, "a format-%u launch records argument descriptors, not bindings or value data", layout.version);
        if (!layout.legacy_args && (nl || nh))
            bad(here.field("legacy_args"), k, "format %u has no format-3 argument descriptors", layout.version);
        if (!L.grid_stride.present() && (k->grid_stride() != 0 || k->cluster_dim() != 1))
            bad(here, k, "format %u records no grid_stride or cluster_dim (only 0 and 1 fit), found %d and %u",
                layout.version, k->grid_stride(), k->cluster_dim());
        uint32_t key = count_of(k->kernel_key()), hash = count_of(k->module_hash());
        uint32_t nargs = layout.legacy_args ? nl : np;
        if (key > UINT16_MAX || hash > UINT16_MAX || nargs > UINT16_MAX || nh > UINT16_MAX)
            bad(here, k, "kernel key (%u bytes), module hash (%u bytes), param count (%u) or handle offset count (%u) "
                "exceeds WRP1's 16-bit field", key, hash, nargs, nh);
        if (relocs && (relocs->Data() - m_) % 8 != 0)
            bad(here.field("relocations"), relocs, "Relocation vector at manifest offset %llu is misaligned",
                static_cast<unsigned long long>(relocs->Data() - 4 - m_));
        const uint8_t* args = legacy ? reinterpret_cast<const uint8_t*>(legacy->Data()) : nullptr;
        if (legacy && (args - m_) % 8 != 0)
            bad(here.field("legacy_args"), legacy, "LegacyArg vector at manifest offset %llu is misaligned",
                static_cast<unsigned long long>(args - 4 - m_));
        uint64_t total = uint64_t(L.fixed_size) + key + hash
            + (layout.legacy_args ? uint64_t(kLegacyArg.size) * nl + 4 * uint64_t(nh)
                                  : 16 * (uint64_t(np) + (forward ? 0 : na)) + 24 * uint64_t(nr) + nv);
        if (total > UINT32_MAX)
            bad(here, k, "the KERNEL_LAUNCH record would be %llu bytes; a WRP1 op is at most 4 GiB",
                static_cast<unsigned long long>(total));
        head(kOpKernelLaunch, total, here, k);  // reserves before the relocations are walked
        const uint8_t* rel = relocs ? relocs->Data() : nullptr;
        for (uint32_t j = 0; j < nr; j++)
            for (int b = 17; b < 24; b++)
                if (rel[24 * size_t(j) + b])
                    bad(here.field("relocations").at(j), rel + 24 * size_t(j), "struct padding must be zero");
        // The fixed part, each field at its offset in this format (wrp1_layouts.h).
        Writer& w = ops_;
        size_t base = w.size() - 8;  // the op header
        w.zeros(L.fixed_size - 8);
        auto set = [&](FieldAt f, auto v) { w.patch(base + size_t(f.offset), v); };
        for (uint32_t d = 0; d < 4; d++)
            w.patch(base + size_t(L.shape.offset) + 4 * d, k->shape()->Get(d));  // int32 bits in formats before 16
        set(L.ndim, int32_t(k->ndim()));
        set(L.size, uint64_t(k->size()));
        set(L.dim, uint64_t(k->dim()));
        set(L.max_blocks, int32_t(k->max_blocks()));
        set(L.block_dim, int32_t(k->block_dim()));
        set(L.smem_bytes, int32_t(k->smem_bytes()));
        if (L.grid_stride.present())
            set(L.grid_stride, int32_t(k->grid_stride()));
        set(L.is_forward, uint8_t(forward ? 1 : 0));
        if (L.cluster_dim.present())
            set(L.cluster_dim, uint8_t(k->cluster_dim()));
        set(L.kernel_key_len, uint16_t(key));
        set(L.module_hash_len, uint16_t(hash));
        set(L.num_params, uint16_t(nargs));
        if (layout.legacy_args) {
            set(L.num_handle_offsets, uint16_t(nh));
        } else {
            set(L.num_relocs, uint32_t(nr));
            set(L.value_data_size, uint32_t(nv));
        }
        if (key)
            w.raw(k->kernel_key()->data(), key);
        if (hash)
            w.raw(k->module_hash()->data(), hash);
        if (layout.legacy_args) {
            // LegacyArg (88 bytes; its padding is checked by the validator) has exactly the WRP1
            // descriptor's layout; handle offsets are u32.
            if (nl)
                w.raw(args, size_t(kLegacyArg.size) * nl);
            if (nh)
                w.raw(k->handle_offsets()->Data(), 4 * size_t(nh));
            return;
        }
        // LaunchParam (16 bytes) and Relocation (24 bytes, zero padding
        // checked above) have exactly the WRP1 record layouts.
        if (np)
            w.raw(k->params()->Data(), 16 * size_t(np));
        if (!forward && na)
            w.raw(k->adjoint_params()->Data(), 16 * size_t(na));
        if (nr)
            w.raw(rel, 24 * size_t(nr));
        if (nv)
            w.raw(k->value_data()->data(), nv);
    }

    const uint8_t* m_;
    uint64_t limit_;
    uint64_t budget_;
    uint64_t op_refs_limit_;  // Operation vector entries walked, at most (see op_list)
    uint64_t op_refs_left_;
    Writer meta_;
    Writer ops_;
    const FormatLayout* layout_ = nullptr;  // the program's format (set first thing in program())
};

}  // namespace

WrpkBundle decode_wrpk(const uint8_t* data, size_t size, const WrpkOptions& options)
{
    if (!data)
        fail(WRP_ERR_INVALID_ARGUMENT, "no .wrpk data given");
    const HeaderValues header = check_header(data, size);
    const uint64_t msize = header.manifest_size, boff = header.blob_off, bsize = header.blob_size;
    uint64_t mend = kHeaderSize + msize;
    for (uint64_t i = mend; i < boff; i++)
        if (data[i])
            fail_invalid_at("manifest_padding", mend, "padding after the manifest must be zero");
    const uint8_t* manifest = data + kHeaderSize;
    uint8_t digest[32];
    sha256(manifest, static_cast<size_t>(msize), digest);
    if (std::memcmp(digest, data + kHeaderManifestSha256.offset, kHeaderManifestSha256.size) != 0)
        fail_invalid_at("manifest", kHeaderSize,
                        "integrity check failed: SHA-256 of the manifest (%s) does not match the header's (%s): the "
                        "bundle was altered or corrupted; rebuild it from the original capture",
                        to_hex(digest, 32).c_str(), to_hex(data + kHeaderManifestSha256.offset, 32).c_str());
    if (std::memcmp(manifest + 4, "WRPK", 4) != 0)
        fail_invalid_at("manifest.file_identifier", kHeaderSize + 4, "FlatBuffer identifier is %s, expected \"WRPK\"",
                        quoted(std::string(reinterpret_cast<const char*>(manifest + 4), 4)).c_str());

    // The generated accessors read scalars in place: give them an 8-byte
    // aligned manifest (a mapping is page-aligned, so this copies only for
    // odd in-memory buffers).
    std::unique_ptr<uint64_t[]> aligned;
    if (reinterpret_cast<uintptr_t>(manifest) % 8 != 0) {
        aligned.reset(new uint64_t[(msize + 7) / 8]);
        std::memcpy(aligned.get(), manifest, static_cast<size_t>(msize));
        manifest = reinterpret_cast<const uint8_t*>(aligned.get());
    }
    // The Verifier visits a shared table once per reference, and wrpkit
    // shares the tables of identical ops (a 10,000-launch step loop is
    // 20,000 visits from a 42 KB manifest). The visits that matter are
    // bounded after this by the op-entry budget (ManifestDecoder::op_list)
    // and the expansion limit; this bound only keeps the Verifier linear.
    // It cannot refuse a manifest those accept: at most 3 visits per
    // non-op vector entry and 2 per op entry walked.
    const uint64_t max_tables = 2 * msize + 8;
    flatbuffers::Verifier::Options vo;
    vo.max_depth = kVerifierMaxDepth;
    vo.max_tables = static_cast<flatbuffers::uoffset_t>(max_tables);
    vo.check_alignment = true;
    // The nested Annotations buffer is verified where the WRP1 image's
    // ANNOTATIONS section is read (read_annotations), as for a .wrp.
    vo.check_nested_flatbuffers = false;
    flatbuffers::Verifier verifier(manifest, static_cast<size_t>(msize), vo);
    if (!fbs::VerifyProgramBuffer(verifier))
        fail_invalid_at("manifest", kHeaderSize,
                        "the Program FlatBuffer failed verification: an offset, vtable, vector or string is out of "
                        "bounds or misaligned, tables nest deeper than %u, or more than %llu tables are visited",
                        kVerifierMaxDepth, static_cast<unsigned long long>(max_tables));
    const fbs::Program* prog = fbs::GetProgram(manifest);

    ManifestDecoder dec(manifest, msize);
    dec.decode(prog);
    dec.module_blobs();
    // The regions of meshes, sorted: always verified first and copied, never mapped (see below).
    std::vector<uint32_t> mesh_indices, mesh_regions;
    for (uint32_t i = 0; i < count_of(prog->meshes()); i++) {
        const fbs::Mesh* me = prog->meshes()->Get(i);
        mesh_indices.push_back(me->indices_region_id());
        mesh_regions.insert(mesh_regions.end(), {me->points_region_id(), me->indices_region_id(),
                                                 me->velocities_region_id()});
    }
    std::sort(mesh_indices.begin(), mesh_indices.end());
    std::sort(mesh_regions.begin(), mesh_regions.end());
    auto listed = [](const std::vector<uint32_t>& sorted_ids, uint32_t id) {
        return std::binary_search(sorted_ids.begin(), sorted_ids.end(), id);
    };
    WrpkBundle out;
    if (options.defer_region_checksums)
        for (BlobRef& b : dec.blobs)
            b.deferrable = b.region_id != 0 && !listed(mesh_regions, b.region_id);
    check_blobs(dec.blobs, data, boff, bsize, header.version, options.verify_checksums,
                options.defer_region_checksums ? &out.deferred : nullptr);

    // ---- the WRP1 image: header, section table, METADATA, MEMORY, OPERATIONS [, ANNOTATIONS]
    const Vector<uint8_t>* ann = prog->annotations();
    uint32_t ann_size = count_of(ann);
    uint32_t nsec = ann_size ? 4 : 3;
    const std::vector<uint8_t>& meta = dec.meta().bytes;
    const std::vector<uint8_t>& ops = dec.ops().bytes;
    uint64_t mem = 4;
    for (const RegionOut& r : dec.regions)
        mem += 24 + (r.has_data ? r.data_size : 0);  // bounded by the bundle's size
    uint64_t sizes[4] = {meta.size(), mem, 4 + uint64_t(ops.size()), ann_size};
    uint64_t total = kFileHeaderSize + nsec * kSectionEntrySize;
    for (uint32_t i = 0; i < nsec; i++)
        total += sizes[i];
    if (total > options.max_image_bytes || total > SIZE_MAX)
        fail(WRP_ERR_INVALID_FILE, "the bundle's program is %llu bytes as a .wrp, larger than the limit of %llu bytes",
             static_cast<unsigned long long>(total), static_cast<unsigned long long>(options.max_image_bytes));

    // The region data that goes into the image.  Mesh triangle indices are copied even when
    // only validating (validate_only), because they are checked against their points.
    // Mesh regions are always copied, never mapped: the validator checks the triangle indices
    // in the image, and a private copy keeps what Warp loads equal to what was checked even if
    // the file is written meanwhile (a mapping would show the writes).
    std::vector<char> copied(dec.regions.size()), mappable(dec.regions.size());
    for (size_t i = 0; i < dec.regions.size(); i++) {
        const RegionOut& r = dec.regions[i];
        copied[i] = r.has_data && (options.copy_region_data || listed(mesh_indices, r.id));
        mappable[i] = copied[i] && !listed(mesh_regions, r.id);
    }

    const uint64_t memory_section = kFileHeaderSize + nsec * kSectionEntrySize + meta.size();
    ImagePlacer placer(options.map_source_pages, memory_section, dec.regions, mappable);
    out.image = ImageBuffer::reserve(static_cast<size_t>(total), placer.shift());
    out.image_size = static_cast<size_t>(total);
    uint8_t* w = out.image.get();
    auto put = [&w](const void* p, size_t n) {
        if (n)
            std::memcpy(w, p, n);
        w += n;
    };
    auto put32 = [&put](uint32_t v) { put(&v, 4); };
    auto put64 = [&put](uint64_t v) { put(&v, 8); };
    auto zeros = [&w](size_t n) {
        std::memset(w, 0, n);
        w += n;
    };
    put("WRP1", 4);
    put32(prog->format_version());
    put32(0);
    put32(nsec);
    put64(kSectionTableOffset);
    uint8_t device = raw_field<uint8_t>(prog, fbs::Program::VT_DEVICE_TYPE, 1);
    put(&device, 1);
    zeros(3);
    put32(prog->target_arch());
    zeros(32);
    static const uint32_t kTypes[4] = {kSectionMetadata, kSectionMemory, kSectionOperations, kSectionAnnotations};
    uint64_t off = kFileHeaderSize + nsec * kSectionEntrySize;
    for (uint32_t i = 0; i < nsec; i++) {
        put32(kTypes[i]);
        put32(0);
        put64(off);
        put64(sizes[i]);
        put64(sizes[i]);
        off += sizes[i];
    }
    put(meta.data(), meta.size());
    put32(static_cast<uint32_t>(dec.regions.size()));
    for (size_t i = 0; i < dec.regions.size(); i++) {
        const RegionOut& r = dec.regions[i];
        put32(r.id);
        put32(r.element_size);
        put64(r.size);
        uint8_t has = r.has_data ? 1 : 0;
        put(&has, 1);
        zeros(7);
        if (mappable[i])
            out.mapped_bytes += placer.place(w, r.data, r.data_size);  // the file's pages, or one copy
        else if (copied[i])
            std::memcpy(w, r.data, r.data_size);
        if (r.has_data)
            w += r.data_size;  // validate_only: left as reserved (zero), never read
    }
    put32(dec.top_level_ops);
    put(ops.data(), ops.size());
    if (ann_size)
        put(ann->data(), ann_size);
    if (w != out.image.get() + total)
        fail(WRP_ERR_INTERNAL, "WRP1 image size mismatch: wrote %zu of %llu bytes", static_cast<size_t>(w - out.image.get()),
             static_cast<unsigned long long>(total));
    out.modules = std::move(dec.modules);
    return out;
}

}  // namespace wrp
