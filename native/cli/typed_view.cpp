// typed_view.cpp -- see typed_view.h.
#include "typed_view.h"

#include <cstring>

#include "cli_error.h"
#include "npy_io.h"

namespace wrpcli {
namespace {

struct ScalarInfo {
    char kind;
    uint32_t size;
    const char* name;
};

ScalarInfo scalar_info(wrp_scalar_kind k)
{
    switch (k) {
    case WRP_SCALAR_BOOL: return {'b', 1, "bool"};
    case WRP_SCALAR_INT8: return {'i', 1, "int8"};
    case WRP_SCALAR_UINT8: return {'u', 1, "uint8"};
    case WRP_SCALAR_INT16: return {'i', 2, "int16"};
    case WRP_SCALAR_UINT16: return {'u', 2, "uint16"};
    case WRP_SCALAR_INT32: return {'i', 4, "int32"};
    case WRP_SCALAR_UINT32: return {'u', 4, "uint32"};
    case WRP_SCALAR_INT64: return {'i', 8, "int64"};
    case WRP_SCALAR_UINT64: return {'u', 8, "uint64"};
    case WRP_SCALAR_FLOAT16: return {'f', 2, "float16"};
    case WRP_SCALAR_FLOAT32: return {'f', 4, "float32"};
    case WRP_SCALAR_FLOAT64: return {'f', 8, "float64"};
    default: return {'V', 0, "void"};
    }
}

}  // namespace

NpyDtype binding_dtype(const wrp_binding_info& b)
{
    if (!b.has_signature)
        return {'u', 1};
    ScalarInfo s = scalar_info(b.scalar);
    if (s.size == 0)
        return {'V', b.dtype_size};  // a struct: its raw bytes per element
    return {s.kind, s.size};
}

std::vector<uint64_t> binding_shape(const wrp_binding_info& b)
{
    if (!b.has_signature)
        return {b.size};
    std::vector<uint64_t> shape(b.shape, b.shape + b.ndim);
    if (b.scalar != WRP_SCALAR_UNKNOWN)
        shape.insert(shape.end(), b.dtype_shape, b.dtype_shape + b.dtype_ndim);
    return shape;
}

std::string binding_dtype_name(const wrp_binding_info& b)
{
    if (!b.has_signature)
        return "uint8 (raw bytes)";
    std::string scalar = scalar_info(b.scalar).name;
    std::string name = b.dtype ? b.dtype : "";
    if (b.scalar == WRP_SCALAR_UNKNOWN)
        return "void" + std::to_string(b.dtype_size * 8) + " (" + name + ")";
    return name == scalar || name.empty() ? scalar : scalar + " (" + name + ")";
}

void check_input_dtype(const wrp_binding_info& b, const NpyArray& in, const std::string& path)
{
    if (!b.has_signature)
        return;  // untyped binding: any dtype of the right byte size
    NpyDtype want = binding_dtype(b);
    bool raw_bytes = in.dtype.kind == 'V' || (in.dtype.kind == 'u' && in.dtype.size == 1);
    bool ok = b.scalar == WRP_SCALAR_UNKNOWN ? raw_bytes
                                             : (in.dtype.kind == want.kind && in.dtype.size == want.size);
    if (!ok)
        throw CliError(kExitUsage, "input " + path + ": dtype " + in.dtype.descr() + " does not match binding \"" +
                                       b.name + "\", which holds " + binding_dtype_name(b) + " (" + want.descr() + ")");
}

void check_input_shape(const wrp_binding_info& b, const NpyArray& in, const std::string& what)
{
    if (!b.has_signature)
        return;
    std::vector<uint64_t> want = binding_shape(b);
    if (in.shape != want)
        throw CliError(kExitUsage, "input " + what + ": shape " + shape_string(in.shape) + " does not match binding \"" +
                                       b.name + "\", which holds " + binding_dtype_name(b) + " of shape " +
                                       shape_string(want) + " (pass an array of exactly that shape)");
}

uint64_t input_bytes(const wrp_binding_info& b)
{
    if (!b.has_signature)
        return b.size;
    uint64_t count = 1;
    for (uint32_t d = 0; d < b.ndim; d++)
        count *= static_cast<uint64_t>(b.shape[d]);
    return count * b.dtype_size;
}

bool view_is_whole(const wrp_binding_info& b)
{
    if (!b.has_signature)
        return true;
    if (b.byte_offset != 0 || input_bytes(b) != b.size)
        return false;
    int64_t expected = b.dtype_size;
    for (int64_t d = static_cast<int64_t>(b.ndim) - 1; d >= 0; d--) {
        if (b.shape[d] > 1 && b.strides[d] != expected)
            return false;
        expected *= b.shape[d];
    }
    return true;
}

namespace {

// Calls fn(view offset, region offset) for each element of the view, in C order.
template <typename Fn>
void for_each_element(const wrp_binding_info& b, size_t region_size, Fn fn)
{
    uint64_t count = 1;
    for (uint32_t d = 0; d < b.ndim; d++)
        count *= static_cast<uint64_t>(b.shape[d]);
    std::vector<int64_t> index(b.ndim, 0);
    for (uint64_t e = 0; e < count; e++) {
        int64_t offset = static_cast<int64_t>(b.byte_offset);
        for (uint32_t d = 0; d < b.ndim; d++)
            offset += index[d] * b.strides[d];
        // The library validated the view against the region; re-check anyway
        // rather than trust arithmetic on file-provided numbers.
        if (offset < 0 || static_cast<uint64_t>(offset) + b.dtype_size > region_size)
            throw CliError(kExitRuntime, std::string("binding \"") + b.name + "\": view element outside its region");
        fn(static_cast<size_t>(e * b.dtype_size), static_cast<size_t>(offset));
        for (int64_t d = static_cast<int64_t>(b.ndim) - 1; d >= 0; d--) {
            if (++index[d] < b.shape[d])
                break;
            index[d] = 0;
        }
    }
}

}  // namespace

void scatter_view(const wrp_binding_info& b, const std::vector<uint8_t>& view, std::vector<uint8_t>& region)
{
    scatter_view(b, view.data(), view.size(), region);
}

void scatter_view(const wrp_binding_info& b, const uint8_t* view, size_t view_size, std::vector<uint8_t>& region)
{
    if (view_size < input_bytes(b))
        throw CliError(kExitUsage, std::string("binding \"") + b.name + "\": the input holds " +
                                       std::to_string(view_size) + " bytes, the view " + std::to_string(input_bytes(b)));
    for_each_element(b, region.size(), [&](size_t v, size_t r) { std::memcpy(region.data() + r, view + v, b.dtype_size); });
}

std::vector<uint8_t> gather_view(const wrp_binding_info& b, const std::vector<uint8_t>& region)
{
    if (!b.has_signature)
        return region;
    std::vector<uint8_t> out(static_cast<size_t>(input_bytes(b)));
    gather_view_into(b, region.data(), region.size(), out.data());
    return out;
}

void gather_view_into(const wrp_binding_info& b, const uint8_t* region, size_t region_size, uint8_t* out)
{
    if (view_is_whole(b)) {  // untyped, or the whole region in C order: one copy, not one per element
        if (region_size)
            std::memcpy(out, region, region_size);
        return;
    }
    for_each_element(b, region_size, [&](size_t v, size_t r) { std::memcpy(out + v, region + r, b.dtype_size); });
}

}  // namespace wrpcli
