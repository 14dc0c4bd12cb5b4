// binding_stats.cpp -- see binding_stats.h.
#include "binding_stats.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "json_writer.h"
#include "npy_io.h"
#include "typed_view.h"

namespace wrpcli {
namespace {

std::string number(double v)
{
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return buf;
}

std::string shape_json(const std::vector<uint64_t>& shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

double half_to_double(uint16_t h)
{
    uint32_t sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    double v;
    if (exp == 0)
        v = std::ldexp(static_cast<double>(frac), -24);
    else if (exp == 31)
        v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else
        v = std::ldexp(static_cast<double>(frac | 0x400), static_cast<int>(exp) - 25);
    return sign ? -v : v;
}

const char* numpy_name(const NpyDtype& d)
{
    switch (d.kind) {
    case 'f': return d.size == 2 ? "float16" : d.size == 4 ? "float32" : "float64";
    case 'i': return d.size == 1 ? "int8" : d.size == 2 ? "int16" : d.size == 4 ? "int32" : "int64";
    case 'u': return d.size == 1 ? "uint8" : d.size == 2 ? "uint16" : d.size == 4 ? "uint32" : "uint64";
    case 'b': return "bool";
    default: return "";
    }
}

// Running totals; the mean is summed in blocks (close to NumPy's pairwise sum).
struct Totals {
    bool any = false;
    double flo = 0, fhi = 0;
    int64_t ilo = 0, ihi = 0;
    uint64_t ulo = 0, uhi = 0;
    double total = 0, block = 0;
    uint64_t in_block = 0, count = 0, nan = 0, inf = 0;

    void add_sum(double v)
    {
        block += v;
        if (++in_block == 4096) {
            total += block;
            block = 0;
            in_block = 0;
        }
        count++;
    }
};

void add_scalar(const NpyDtype& d, const uint8_t* p, Totals& t)
{
    if (d.kind == 'f') {
        double v;
        if (d.size == 2) {
            uint16_t h;
            std::memcpy(&h, p, 2);
            v = half_to_double(h);
        } else if (d.size == 4) {
            float f;
            std::memcpy(&f, p, 4);
            v = f;
        } else {
            std::memcpy(&v, p, 8);
        }
        if (std::isnan(v)) {
            t.nan++;
            return;
        }
        if (std::isinf(v)) {
            t.inf++;
            return;
        }
        if (!t.any || v < t.flo)
            t.flo = v;
        if (!t.any || v > t.fhi)
            t.fhi = v;
        t.any = true;
        t.add_sum(v);
        return;
    }
    if (d.kind == 'i') {
        int64_t v = 0;
        if (d.size == 1) { int8_t x; std::memcpy(&x, p, 1); v = x; }
        else if (d.size == 2) { int16_t x; std::memcpy(&x, p, 2); v = x; }
        else if (d.size == 4) { int32_t x; std::memcpy(&x, p, 4); v = x; }
        else std::memcpy(&v, p, 8);
        if (!t.any || v < t.ilo)
            t.ilo = v;
        if (!t.any || v > t.ihi)
            t.ihi = v;
        t.any = true;
        t.add_sum(static_cast<double>(v));
        return;
    }
    uint64_t v = 0;  // 'u' and 'b'
    if (d.size == 1) v = p[0];
    else if (d.size == 2) { uint16_t x; std::memcpy(&x, p, 2); v = x; }
    else if (d.size == 4) { uint32_t x; std::memcpy(&x, p, 4); v = x; }
    else std::memcpy(&v, p, 8);
    if (d.kind == 'b')
        v = v != 0;
    if (!t.any || v < t.ulo)
        t.ulo = v;
    if (!t.any || v > t.uhi)
        t.uhi = v;
    t.any = true;
    t.add_sum(static_cast<double>(v));
}

}  // namespace

std::string binding_stats_json(const wrp_binding_info& b, const uint8_t* region)
{
    std::vector<uint64_t> shape = binding_shape(b);
    if (!b.has_signature)
        return "{\"shape\": " + shape_json(shape) + ", \"dtype\": \"raw bytes\", \"min\": null, \"max\": null, "
               "\"mean\": null, \"nan\": null, \"inf\": null, \"raw\": true}";
    NpyDtype d = binding_dtype(b);
    if (d.kind == 'V' || !numpy_name(d)[0])
        return "{\"shape\": " + shape_json(shape) + ", \"dtype\": \"struct\", \"min\": null, \"max\": null, "
               "\"mean\": null, \"nan\": 0, \"inf\": 0}";
    Totals t;
    const uint32_t per = d.size ? b.dtype_size / d.size : 0;  // scalars per element (a vec3f holds 3)
    auto element = [&](const uint8_t* e) {
        for (uint32_t k = 0; k < per; k++)
            add_scalar(d, e + static_cast<size_t>(k) * d.size, t);
    };
    if (view_is_whole(b)) {
        for (uint64_t off = 0; off + b.dtype_size <= b.size && b.dtype_size; off += b.dtype_size)
            element(region + off);
    } else {
        std::vector<uint8_t> whole(region, region + b.size);
        std::vector<uint8_t> view = gather_view(b, whole);
        for (size_t off = 0; off + b.dtype_size <= view.size() && b.dtype_size; off += b.dtype_size)
            element(view.data() + off);
    }
    std::string lo = "null", hi = "null", mean = "null";
    if (t.any) {
        if (d.kind == 'f') {
            lo = number(t.flo);
            hi = number(t.fhi);
        } else if (d.kind == 'i') {
            lo = std::to_string(t.ilo);
            hi = std::to_string(t.ihi);
        } else {
            lo = std::to_string(t.ulo);
            hi = std::to_string(t.uhi);
        }
        mean = number((t.total + t.block) / static_cast<double>(t.count));
    }
    return "{\"shape\": " + shape_json(shape) + ", \"dtype\": " + json_string(numpy_name(d)) + ", \"min\": " + lo +
           ", \"max\": " + hi + ", \"mean\": " + mean + ", \"nan\": " + std::to_string(d.kind == 'f' ? t.nan : 0) +
           ", \"inf\": " + std::to_string(d.kind == 'f' ? t.inf : 0) + "}";
}

}  // namespace wrpcli
