// wrp1_ops_launch.cpp -- validation of a WRP1 kernel launch record: its fixed fields, kernel key and
// module hash, the kernel it runs, its argument records and relocations (every array's extent inside
// the regions its pointers go to), a format-3 launch's descriptors, the raw-pointer and extent lints,
// and the annotations' argument signatures.  The rest of the OPERATIONS section is wrp1_ops.cpp's;
// the validator's class is wrp1_ops.h.

#include "wrp1_ops.h"

namespace wrp {
namespace ops {

OpsValidator::LaunchHead OpsValidator::launch_head(const Op& op)
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

std::string OpsValidator::launch_key(const Op& op, const LaunchHead& h) const
{
    return std::string(reinterpret_cast<const char*>(op.p + layout_.launch.fixed_size), h.key_len);
}

std::string OpsValidator::launch_hash(const Op& op, const LaunchHead& h) const
{
    return std::string(reinterpret_cast<const char*>(op.p + layout_.launch.fixed_size + h.key_len), h.hash_len);
}

void OpsValidator::launch_kernel(const Op& op, const LaunchHead& h, const std::string& key, const std::string& hash)
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

void OpsValidator::launch(const Op& op)
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

void OpsValidator::extent_lint(const Op& op, const std::string& key)
{
    uint64_t size = op.get<uint64_t>(layout_.launch.size.offset);
    if (!launch_has_array_ || size <= launch_max_elements_)
        return;
    g_.warnings.push_back(op.path + ": launch of kernel '" + key + "' runs " + std::to_string(size) +
                          " threads but its largest array argument holds " + std::to_string(launch_max_elements_) +
                          " elements: unless the kernel guards its indices, threads read and write past the arrays");
}

void OpsValidator::legacy_launch(const Op& op)
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

std::tuple<uint32_t, uint16_t, uint32_t, uint32_t> OpsValidator::param_record(const Op& op, uint32_t params_off,
                                                                              uint32_t j)
{
    uint32_t po = params_off + j * kParamRecord;
    return {po, op.get<uint16_t>(po + kLaunchParamRecord.num_relocs.offset), op.get<uint32_t>(po + kLaunchParamRecord.value_offset.offset), op.get<uint32_t>(po + kLaunchParamRecord.value_size.offset)};
}

void OpsValidator::raw_pointers(const Op& op, const std::string& key, const std::string& hash, uint32_t num_params,
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

void OpsValidator::against_signature(const Op& op, const std::string& key, const std::string& hash, uint32_t num_params,
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

void OpsValidator::relocation(const Op& op, uint32_t ro, uint32_t index, uint32_t blob_size)
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

void OpsValidator::argument_pointers(const Op& op, uint32_t j, uint32_t blob_off, uint32_t blob_size, uint32_t relocs_off,
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

void OpsValidator::count_elements(const uint8_t* a, bool indexed, uint16_t ndim)
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

void OpsValidator::array_extent(const Op& op, uint32_t j, uint32_t blob, uint32_t reloc0, bool indexed, bool forward)
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

}  // namespace ops
}  // namespace wrp
