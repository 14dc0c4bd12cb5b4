// annotations.cpp -- wrpkit's ANNOTATIONS section ("WRPA") of a .wrp file.
//
// The payload is a FlatBuffer with root table `Annotations` and identifier
// "WRPK" (schema/wrp.fbs).  It is verified with flatbuffers::Verifier through
// the code flatc generates at build time, then its binding signatures and
// module digests are checked against the rest of the file.  Warp's own
// loader skips this section.
#include <algorithm>
#include <set>
#include <vector>

#include "byte_reader.h"
#include "checked_math.h"
#include "error.h"
#include "wrp1_validator.h"
#include "wrp_generated.h"

namespace wrp {
namespace {

namespace fbs = wrpkit::formats::fbs;

uint32_t scalar_size(uint8_t kind)
{
    static const uint32_t kSizes[] = {0, 1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8};
    return kind < 13 ? kSizes[kind] : 0;
}

bool utf8(const flatbuffers::String* s) { return !s || is_utf8(reinterpret_cast<const uint8_t*>(s->data()), s->size()); }

// The Verifier bounds the nesting (max_depth), so this recursion is bounded too.
bool dtype_utf8(const fbs::DataType* dt)
{
    if (!dt)
        return true;
    if (!utf8(dt->name()))
        return false;
    if (dt->fields())
        for (const fbs::StructField* f : *dt->fields())
            if (f && (!utf8(f->name()) || !dtype_utf8(f->type())))
                return false;
    return true;
}

// wrpkit's reader decodes every string of the buffer; one that is not UTF-8 makes it refuse the file.
bool strings_are_utf8(const fbs::Annotations* a)
{
    if (!utf8(a->producer()))
        return false;
    if (a->signature())
        for (const fbs::ArraySignature* s : *a->signature())
            if (s && (!utf8(s->name()) || !dtype_utf8(s->dtype())))
                return false;
    if (a->kernel_signatures())
        for (const fbs::KernelSignature* k : *a->kernel_signatures()) {
            if (!k)
                continue;
            if (!utf8(k->kernel_key()) || !utf8(k->module_hash()))
                return false;
            if (k->arguments())
                for (const fbs::KernelArgument* arg : *k->arguments())
                    if (arg && (!utf8(arg->name()) || !utf8(arg->type()) || !dtype_utf8(arg->dtype())))
                        return false;
        }
    if (a->module_digests())
        for (const fbs::ModuleDigest* d : *a->module_digests())
            if (d && !utf8(d->binary_filename()))
                return false;
    return true;
}

class AnnotationReader {
public:
    AnnotationReader(const std::vector<uint8_t>& buf, uint64_t section_at, Wrp1Graph& g)
        : buf_(buf)
        , section_at_(section_at)
        , g_(g)
    {
    }

    // File offset of a table inside the copied buffer.
    uint64_t at(const void* table) const
    {
        return section_at_ + static_cast<uint64_t>(static_cast<const uint8_t*>(table) - buf_.data());
    }

    void signature(const fbs::ArraySignature* s, size_t index)
    {
        std::string where = "annotations.signature[" + std::to_string(index) + "]";
        uint64_t pos = at(s);
        if (!s->name())
            fail_invalid_at(where + ".name", pos, "signature has no binding name");
        ArraySignature sig;
        sig.name = s->name()->str();
        auto binding = std::find_if(g_.bindings.begin(), g_.bindings.end(),
                                    [&](const BindingRecord& b) { return b.name == sig.name; });
        if (binding == g_.bindings.end())
            fail_invalid_at(where + ".name", pos, "binding %s does not exist", quoted(sig.name).c_str());
        if (!names_.insert(sig.name).second)
            fail_invalid_at(where + ".name", pos, "binding %s has two signatures", quoted(sig.name).c_str());

        const fbs::DataType* dt = s->dtype();
        if (!dt)
            fail_invalid_at(where + ".dtype", pos, "signature has no dtype");
        sig.dtype_name = dt->name() ? dt->name()->str() : "";
        sig.scalar_kind = static_cast<uint8_t>(dt->scalar());
        sig.dtype_size = dt->size();
        if (sig.scalar_kind > fbs::ScalarKind_MAX)
            fail_invalid_at(where + ".dtype.scalar", at(dt), "unknown scalar kind %u", sig.scalar_kind);
        uint64_t lanes = 1;
        if (dt->shape()) {
            if (dt->shape()->size() > 2)
                fail_invalid_at(where + ".dtype.shape", at(dt), "dtype has %u dimensions (at most 2)", dt->shape()->size());
            for (uint32_t v : *dt->shape()) {
                if (v == 0 || v > 4096)
                    fail_invalid_at(where + ".dtype.shape", at(dt), "dtype extent %u is outside 1..4096", v);
                sig.dtype_shape.push_back(v);
                lanes *= v;
            }
        }
        if (sig.dtype_size == 0)
            fail_invalid_at(where + ".dtype.size", at(dt), "element size is zero");
        if (sig.scalar_kind != 0 && uint64_t(scalar_size(sig.scalar_kind)) * lanes != sig.dtype_size)
            fail_invalid_at(where + ".dtype.size", at(dt), "element size %u is not %llu scalars of %u bytes", sig.dtype_size,
                            static_cast<unsigned long long>(lanes), scalar_size(sig.scalar_kind));

        // flatbuffers::Verifier checks a vector's 4-byte length field but not
        // the alignment of 8-byte elements, and Vector<int64_t>::Get() reads
        // them in place (found by fuzz_wrp1: a misaligned load, undefined
        // behaviour).  wrpkit's reader requires the alignment too.
        for (const flatbuffers::Vector<int64_t>* v : {s->shape(), s->strides()})
            if (v && (v->Data() - buf_.data()) % 8 != 0)
                fail_invalid_at(where + (v == s->shape() ? ".shape" : ".strides"), at(v),
                                "the vector's int64 elements are not 8-byte aligned (a corrupt FlatBuffer)");
        size_t ndim = s->shape() ? s->shape()->size() : 0;
        size_t nstrides = s->strides() ? s->strides()->size() : 0;
        if (ndim > 4 || nstrides != ndim)
            fail_invalid_at(where + ".shape", pos, "%zu dimensions with %zu strides (need equal counts, at most 4)", ndim,
                            nstrides);
        for (size_t d = 0; d < ndim; d++) {
            sig.shape.push_back(s->shape()->Get(static_cast<flatbuffers::uoffset_t>(d)));
            sig.strides.push_back(s->strides()->Get(static_cast<flatbuffers::uoffset_t>(d)));
            if (sig.shape.back() < 0 || sig.shape.back() > INT32_MAX || sig.strides.back() < INT32_MIN
                || sig.strides.back() > INT32_MAX)
                fail_invalid_at(where + ".shape", pos, "dimension %zu: extent %lld or stride %lld out of range", d,
                                static_cast<long long>(sig.shape.back()), static_cast<long long>(sig.strides.back()));
        }
        sig.byte_offset = s->byte_offset();
        sig.is_input = s->is_input();
        sig.is_output = s->is_output();
        const RegionRecord* region = g_.find_region(binding->region_id);
        if (!region)
            fail_invalid_at(where + ".name", pos, "binding %s has no region", quoted(sig.name).c_str());
        check_extent(sig, region, where, pos);
        g_.signatures.push_back(std::move(sig));
    }

    void digest(const fbs::ModuleDigest* d, size_t index)
    {
        std::string where = "annotations.module_digests[" + std::to_string(index) + "]";
        uint64_t pos = at(d);
        ModuleDigest md;
        md.binary_filename = d->binary_filename() ? d->binary_filename()->str() : "";
        if (!is_plain_basename(md.binary_filename))
            fail_invalid_at(where + ".binary_filename", pos, "%s is not a plain file name", quoted(md.binary_filename).c_str());
        bool known = std::any_of(g_.modules.begin(), g_.modules.end(),
                                 [&](const ModuleRecord& m) { return m.binary_filename == md.binary_filename; });
        if (!known)
            fail_invalid_at(where + ".binary_filename", pos, "%s is not a module of this graph",
                            quoted(md.binary_filename).c_str());
        if (!d->sha256() || d->sha256()->size() != 32)
            fail_invalid_at(where + ".sha256", pos, "SHA-256 must be 32 bytes");
        std::copy(d->sha256()->begin(), d->sha256()->end(), md.sha256);
        md.size = d->size();
        if (g_.find_digest(md.binary_filename))
            fail_invalid_at(where + ".binary_filename", pos, "%s has two digests", quoted(md.binary_filename).c_str());
        g_.module_digests.push_back(std::move(md));
    }

    void kernel_signature(const fbs::KernelSignature* k, size_t index)
    {
        std::string where = "annotations.kernel_signatures[" + std::to_string(index) + "]";
        uint64_t pos = at(k);
        KernelSignature ks;
        ks.kernel_key = k->kernel_key() ? k->kernel_key()->str() : "";
        ks.module_hash = k->module_hash() ? k->module_hash()->str() : "";
        if (!g_.find_kernel(ks.module_hash, ks.kernel_key))
            fail_invalid_at(where, pos, "kernel %s of module %s is not in the kernel table", quoted(ks.kernel_key).c_str(),
                            quoted(ks.module_hash).c_str());
        if (g_.kernel_signatures.count({ks.module_hash, ks.kernel_key}))
            fail_invalid_at(where, pos, "kernel %s has two signatures", quoted(ks.kernel_key).c_str());
        if (k->arguments()) {
            for (flatbuffers::uoffset_t j = 0; j < k->arguments()->size(); j++) {
                const fbs::KernelArgument* a = k->arguments()->Get(j);
                KernelArgumentSignature arg;
                arg.name = a->name() ? a->name()->str() : "";
                arg.type = a->type() ? a->type()->str() : "";
                arg.value_size = a->value_size();
                arg.ndim = a->ndim();
                if (const fbs::DataType* dt = a->dtype()) {
                    arg.has_dtype = true;
                    arg.dtype_name = dt->name() ? dt->name()->str() : "";
                    arg.dtype_size = dt->size();
                }
                if (arg.ndim > 4)
                    fail_invalid_at(where + ".arguments[" + std::to_string(j) + "]", at(a),
                                    "argument %s declares ndim %u (at most 4)", quoted(arg.name).c_str(), arg.ndim);
                ks.arguments.push_back(std::move(arg));
            }
        }
        g_.kernel_signatures.emplace(std::make_pair(ks.module_hash, ks.kernel_key), std::move(ks));
    }

private:
    // Every element the view addresses must lie inside the binding's region.
    static void check_extent(const ArraySignature& sig, const RegionRecord* region, const std::string& where, uint64_t pos)
    {
        StridedReach reach;
        for (size_t d = 0; d < sig.shape.size(); d++) {
            if (sig.shape[d] == 0)
                return;  // an empty view addresses nothing
            reach.add(sig.shape[d], sig.strides[d]);
        }
        __int128 first = __int128(sig.byte_offset) + reach.lo;
        __int128 end = __int128(sig.byte_offset) + reach.hi + sig.dtype_size;
        if (first < 0 || end > __int128(region->size))
            fail_invalid_at(where + ".shape", pos, "the view addresses bytes outside region %u of %llu bytes", region->id,
                            static_cast<unsigned long long>(region->size));
    }

    const std::vector<uint8_t>& buf_;
    uint64_t section_at_;
    Wrp1Graph& g_;
    std::set<std::string> names_;
};

}  // namespace

void read_annotations(const uint8_t* image, uint64_t begin, uint64_t end, Wrp1Graph& g)
{
    uint64_t size = end - begin;
    if (size < 8 || size > kMaxAnnotationsBytes)
        fail_invalid_at("annotations", begin, "%llu bytes is outside 8..%llu", static_cast<unsigned long long>(size),
                        static_cast<unsigned long long>(kMaxAnnotationsBytes));
    // FlatBuffers checks alignment against absolute addresses, and the section
    // may start at any file offset: verify a copy in an aligned buffer.
    std::vector<uint8_t> buf(image + begin, image + end);
    if (!flatbuffers::BufferHasIdentifier(buf.data(), "WRPK"))
        fail_invalid_at("annotations", begin + 4, "FlatBuffer identifier is not \"WRPK\"");
    // The same bounds as wrpkit's Python reader (wrpkit/formats/wrpk/reader.py, _verify_nested): at most
    // 64 nested tables, root included, and at most one table visit per 4 bytes,
    // so that shared tables cannot turn a small buffer into a long walk.
    flatbuffers::Verifier::Options options;
    options.max_depth = 64;
    options.max_tables = static_cast<flatbuffers::uoffset_t>(size / 4 + 1);
    flatbuffers::Verifier verifier(buf.data(), buf.size(), options);
    if (!verifier.VerifyBuffer<wrpkit::formats::fbs::Annotations>("WRPK"))
        fail_invalid_at("annotations", begin, "the Annotations FlatBuffer failed verification (corrupt or not wrp.fbs)");
    const wrpkit::formats::fbs::Annotations* a = flatbuffers::GetRoot<wrpkit::formats::fbs::Annotations>(buf.data());

    if (!strings_are_utf8(a))
        fail_invalid_at("annotations", begin, "a string in the Annotations FlatBuffer is not valid UTF-8");

    AnnotationReader reader(buf, begin, g);
    if (a->signature())
        for (flatbuffers::uoffset_t i = 0; i < a->signature()->size(); i++)
            reader.signature(a->signature()->Get(i), i);
    if (a->module_digests())
        for (flatbuffers::uoffset_t i = 0; i < a->module_digests()->size(); i++)
            reader.digest(a->module_digests()->Get(i), i);
    if (a->kernel_signatures())
        for (flatbuffers::uoffset_t i = 0; i < a->kernel_signatures()->size(); i++)
            reader.kernel_signature(a->kernel_signatures()->Get(i), i);
}

}  // namespace wrp
