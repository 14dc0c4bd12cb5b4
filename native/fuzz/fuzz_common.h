// fuzz_common.h -- what both fuzz targets do with one input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "wrp_replay.h"

namespace wrpfuzz {

// Open `data` with validate_only (Warp is never loaded) and exercise what a
// validated program offers.  Any status other than OK / INVALID_FILE /
// INVALID_ARGUMENT is a bug in the library: WRP_ERR_INTERNAL means an
// unexpected C++ exception escaped a check.
inline void open_and_check(const uint8_t* data, size_t size, const wrp_module_bytes* modules, size_t num_modules,
                           bool skip_checks, bool verify_checksums)
{
    wrp_options o;
    wrp_options_init(&o);
    o.validate_only = 1;
    o.skip_checks = skip_checks ? 1 : 0;
    o.verify_checksums = verify_checksums ? 1 : 0;
    o.warp_lib_dir = "/nonexistent/fuzz-never-loads-warp";
    wrp_program* p = nullptr;
    wrp_status s = wrp_program_open_memory(data, size, modules, num_modules, &o, &p);
    static const bool verbose = std::getenv("WRP_FUZZ_VERBOSE") != nullptr;  // for triage and regression tests
    if (verbose)
        std::fprintf(stderr, "fuzz: skip_checks=%d verify_checksums=%d status=%d: %s\n", o.skip_checks,
                     o.verify_checksums, static_cast<int>(s), s == WRP_OK ? "ok" : wrp_last_error());
    if (s == WRP_OK) {
        size_t n = wrp_program_num_bindings(p);
        for (size_t i = 0; i < n; i++) {
            wrp_binding_info info;
            if (wrp_program_binding(p, i, &info) != WRP_OK)
                std::abort();
            size_t index;
            if (wrp_program_find_binding(p, info.name, &index) != WRP_OK)
                std::abort();
            volatile int64_t sink = 0;  // touch every array the library hands out
            for (uint32_t d = 0; d < info.ndim; d++)
                sink = sink + info.shape[d] + info.strides[d];
            for (uint32_t d = 0; d < info.dtype_ndim; d++)
                sink = sink + info.dtype_shape[d];
            sink = sink + static_cast<int64_t>(std::strlen(info.name)) + (info.dtype ? info.dtype[0] : 0);
        }
        if (wrp_program_run(p, 1) != WRP_ERR_INVALID_ARGUMENT)  // validate_only: refused, not run
            std::abort();
        (void)wrp_program_device(p);
        (void)wrp_program_warp_version(p);
        wrp_program_destroy(p);
        return;
    }
    if (p)
        std::abort();
    if (s != WRP_ERR_INVALID_FILE && s != WRP_ERR_INVALID_ARGUMENT) {
        std::fprintf(stderr, "fuzz target: unexpected status %d: %s\n", static_cast<int>(s), wrp_last_error());
        std::abort();
    }
}

}  // namespace wrpfuzz
