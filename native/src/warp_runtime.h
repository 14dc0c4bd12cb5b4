// warp_runtime.h -- Warp's native runtime (warp.so, warp-clang.so) loaded
// with dlopen at run time, and the C functions this project calls in it.
//
// Signatures follow warp/native/apic.h, warp.h and warp_clang.h of Warp
// 1.19.0 (and the ctypes declarations in warp/_src/context.py).  Nothing is
// linked against Warp at build time, and no Python interpreter is involved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "fair_mutex.h"

namespace wrp {

// APICModuleBytes of apic.h (natural alignment, 24 bytes).
struct WarpModuleBytes {
    const char* filename;
    const void* data;
    size_t size;
};

struct WarpApi {
    // warp.so
    const char* (*wp_version)();
    int (*wp_init)(const char* expected_version);
    const char* (*wp_get_error_string)();
    void (*wp_set_error_output_enabled)(int enable);
    const void* (*wp_cpu_block_runtime_get_api)();
    void* (*wp_apic_load_graph_from_bytes)(void* context, const void* data, size_t size, const WarpModuleBytes* modules,
                                           uint32_t num_modules, int device_type);
    void (*wp_apic_destroy_graph)(void* graph);
    size_t (*wp_apic_get_param_size)(void* graph, const char* name);
    bool (*wp_apic_set_param)(void* graph, const char* name, const void* data, size_t size);
    bool (*wp_apic_get_param)(void* graph, const char* name, void* data, size_t size);
    void* (*wp_apic_get_param_ptr)(void* graph, const char* name);
    void (*wp_apic_register_loaded_cpu_kernel)(void* graph, const char* kernel_key, const char* module_hash,
                                               void* forward_fn, void* backward_fn);
    bool (*wp_apic_cpu_replay_graph)(void* graph);
    bool (*wp_apic_launch)(void* graph, void* stream);
    int (*wp_cuda_device_get_count)();
    void (*wp_cuda_device_get_memory_info)(int ordinal, size_t* free_mem, size_t* total_mem);
    void* (*wp_cuda_device_get_primary_context)(int ordinal);
    void* (*wp_cuda_stream_create)(void* context, int priority);
    void (*wp_cuda_stream_destroy)(void* context, void* stream);
    bool (*wp_cuda_stream_synchronize)(void* stream);
    bool (*wp_cuda_context_synchronize)(void* context);
    // warp-clang.so (CPU graphs only)
    const char* (*wp_warp_clang_version)();
    int (*wp_llvm_set_cpu_block_runtime)(const void* api);
    int (*wp_load_obj_from_bytes)(const void* data, size_t size, const char* module_name, bool use_legacy_linker);
    uint64_t (*wp_lookup)(const char* module_name, const char* function_name);
    int (*wp_unload_obj)(const char* module_name);
};

// Every call into Warp holds this lock (see "Thread safety" in wrp_replay.h); it is
// handed over first come, first served (fair_mutex.h).
FairMutex& warp_mutex();

// Directories searched for Warp when no explicit one is given, derived from
// where this binary is installed.  Implemented twice, one per target: next to
// the shared library (locate_from_library.cpp) or the executable
// (locate_from_executable.cpp).
std::vector<std::string> builtin_warp_dirs();

// The ':'-separated `relative_dirs` resolved against the directory holding
// `binary_path`, lexically normalized (locate_common.cpp).
std::vector<std::string> dirs_relative_to(const std::string& binary_path, const std::string& relative_dirs);

class WarpRuntime {
public:
    // The process's Warp runtime, loaded on first use.  `explicit_dir` is the
    // wrp_options/--warp-lib-dir value (may be empty).  `need_clang` also
    // loads warp-clang.so and binds the CPU block runtime.  `need_cuda` calls
    // wp_init so the CUDA driver is loaded.  Must be called with warp_mutex()
    // held.  Throws wrp::Error(WRP_ERR_RUNTIME).
    static WarpRuntime& acquire(const std::string& explicit_dir, bool need_clang, bool need_cuda);

    const WarpApi& api() const { return api_; }
    const std::string& dir() const { return dir_; }
    std::string version() const { return api_.wp_version(); }

    // Warp's current error string (copied); empty if unset.
    std::string error_string() const;

private:
    WarpRuntime() = default;
    void load_core(const std::string& dir);
    void load_clang();
    void init_cuda();

    WarpApi api_{};
    std::string dir_;
    void* core_ = nullptr;
    void* clang_ = nullptr;
    bool cuda_initialized_ = false;
};

}  // namespace wrp
