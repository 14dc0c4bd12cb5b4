// warp_runtime.cpp -- finding, loading and binding Warp's shared libraries.
#include "warp_runtime.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "error.h"

namespace wrp {
namespace {

bool is_regular_file(const std::string& path)
{
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string real_dir(const std::string& dir)
{
    char buf[PATH_MAX];
    return realpath(dir.c_str(), buf) ? std::string(buf) : dir;
}

const char* const kFix =
    "Pass --warp-lib-dir (or wrp_options.warp_lib_dir) or set WRP_WARP_LIB_DIR to the warp/bin directory of the "
    "warp-lang install that recorded the file (python -c \"import warp, os; print(os.path.dirname(warp.__file__) + "
    "'/bin')\")";

// dlopen reports an address space too small for a library only as "failed to map
// segment from shared object" (it keeps no errno), which a noexec mount gives too.
// A reservation of the library's size decides: if that fails as well, the host is out
// of memory (one status, with the size); otherwise the library is unusable here.
// wrpkit/environment.py (warp_library_error) decides the same way for the python engine.
[[noreturn]] void fail_to_load(const std::string& path, const char* needed_for)
{
    const char* said = dlerror();
    std::string why = said ? said : "no reason given";
    struct stat st;
    if (why.find("failed to map segment") != std::string::npos && stat(path.c_str(), &st) == 0 && st.st_size > 0) {
        size_t size = static_cast<size_t>(st.st_size);
        void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            struct rlimit rl;
            std::string limit;
            if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                limit = "; this process's address space is limited to " + std::to_string(rl.rlim_cur >> 20) +
                        " MiB (ulimit -v): raise the limit";
            fail_out_of_memory(size, "out of memory on the host: cannot load Warp's library %s (%zu MiB, %zu bytes): "
                               "%s%s", path.c_str(), size >> 20, size, why.c_str(), limit.c_str());
        }
        munmap(p, size);
    }
    fail(WRP_ERR_RUNTIME, "cannot load %s%s: %s", path.c_str(), needed_for, why.c_str());
}

template <typename F> void bind(void* lib, const char* lib_name, const char* symbol, F& slot)
{
    dlerror();
    void* p = dlsym(lib, symbol);
    if (!p)
        fail(WRP_ERR_RUNTIME, "%s has no symbol %s: it is not the Warp 1.19 runtime this build expects", lib_name, symbol);
    slot = reinterpret_cast<F>(p);
}

// The first directory that holds warp.so: an explicit one is final; the
// environment variable next; then the build-time relative locations.
std::string locate(const std::string& explicit_dir)
{
    if (!explicit_dir.empty()) {
        if (!is_regular_file(explicit_dir + "/warp.so"))
            fail(WRP_ERR_RUNTIME, "Warp runtime not found: %s/warp.so does not exist. %s", explicit_dir.c_str(), kFix);
        return explicit_dir;
    }
    if (const char* env = std::getenv("WRP_WARP_LIB_DIR"); env && *env) {
        if (!is_regular_file(std::string(env) + "/warp.so"))
            fail(WRP_ERR_RUNTIME, "Warp runtime not found: WRP_WARP_LIB_DIR is %s, but %s/warp.so does not exist. %s",
                 env, env, kFix);
        return env;
    }
    std::string tried;
    for (const std::string& dir : builtin_warp_dirs()) {
        if (is_regular_file(dir + "/warp.so"))
            return dir;
        tried += "\n  " + dir;
    }
    fail(WRP_ERR_RUNTIME, "Warp runtime (warp.so) not found. Searched:%s\n%s", tried.empty() ? " (nothing)" : tried.c_str(),
         kFix);
}

}  // namespace

FairMutex& warp_mutex()
{
    static FairMutex m;
    return m;
}

WarpRuntime& WarpRuntime::acquire(const std::string& explicit_dir, bool need_clang, bool need_cuda)
{
    static WarpRuntime* runtime = nullptr;  // lives for the process: Warp cannot be unloaded safely
    std::string dir = real_dir(locate(explicit_dir));
    if (!runtime) {
        auto* rt = new WarpRuntime();
        try {
            rt->load_core(dir);
        } catch (...) {
            delete rt;
            throw;
        }
        runtime = rt;
    } else if (runtime->dir_ != dir) {
        fail(WRP_ERR_RUNTIME, "Warp is already loaded from %s in this process; it cannot also be loaded from %s",
             runtime->dir_.c_str(), dir.c_str());
    }
    if (need_clang)
        runtime->load_clang();
    if (need_cuda)
        runtime->init_cuda();
    return *runtime;
}

void WarpRuntime::load_core(const std::string& dir)
{
    std::string path = dir + "/warp.so";
    core_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!core_)
        fail_to_load(path, "");
    const char* n = "warp.so";
    bind(core_, n, "wp_version", api_.wp_version);
    bind(core_, n, "wp_init", api_.wp_init);
    bind(core_, n, "wp_get_error_string", api_.wp_get_error_string);
    bind(core_, n, "wp_set_error_output_enabled", api_.wp_set_error_output_enabled);
    bind(core_, n, "wp_cpu_block_runtime_get_api", api_.wp_cpu_block_runtime_get_api);
    bind(core_, n, "wp_apic_load_graph_from_bytes", api_.wp_apic_load_graph_from_bytes);
    bind(core_, n, "wp_apic_destroy_graph", api_.wp_apic_destroy_graph);
    bind(core_, n, "wp_apic_get_param_size", api_.wp_apic_get_param_size);
    bind(core_, n, "wp_apic_set_param", api_.wp_apic_set_param);
    bind(core_, n, "wp_apic_get_param", api_.wp_apic_get_param);
    bind(core_, n, "wp_apic_get_param_ptr", api_.wp_apic_get_param_ptr);
    bind(core_, n, "wp_apic_register_loaded_cpu_kernel", api_.wp_apic_register_loaded_cpu_kernel);
    bind(core_, n, "wp_apic_cpu_replay_graph", api_.wp_apic_cpu_replay_graph);
    bind(core_, n, "wp_apic_launch", api_.wp_apic_launch);
    bind(core_, n, "wp_cuda_device_get_count", api_.wp_cuda_device_get_count);
    bind(core_, n, "wp_cuda_device_get_memory_info", api_.wp_cuda_device_get_memory_info);
    bind(core_, n, "wp_cuda_device_get_primary_context", api_.wp_cuda_device_get_primary_context);
    bind(core_, n, "wp_cuda_stream_create", api_.wp_cuda_stream_create);
    bind(core_, n, "wp_cuda_stream_destroy", api_.wp_cuda_stream_destroy);
    bind(core_, n, "wp_cuda_stream_synchronize", api_.wp_cuda_stream_synchronize);
    bind(core_, n, "wp_cuda_context_synchronize", api_.wp_cuda_context_synchronize);
    dir_ = dir;
    // Errors are read back with wp_get_error_string(); Warp echoing them to
    // stderr as well would only duplicate them.
    api_.wp_set_error_output_enabled(0);
}

void WarpRuntime::load_clang()
{
    if (clang_)
        return;
    std::string path = dir_ + "/warp-clang.so";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        fail_to_load(path, " (needed for CPU graphs)");
    WarpApi api = api_;
    const char* n = "warp-clang.so";
    bind(lib, n, "wp_warp_clang_version", api.wp_warp_clang_version);
    bind(lib, n, "wp_llvm_set_cpu_block_runtime", api.wp_llvm_set_cpu_block_runtime);
    bind(lib, n, "wp_load_obj_from_bytes", api.wp_load_obj_from_bytes);
    bind(lib, n, "wp_lookup", api.wp_lookup);
    bind(lib, n, "wp_unload_obj", api.wp_unload_obj);
    if (std::strcmp(api.wp_warp_clang_version(), api.wp_version()) != 0)
        fail(WRP_ERR_RUNTIME, "warp-clang.so is version %s but warp.so is %s; both must come from the same warp-lang",
             api.wp_warp_clang_version(), api.wp_version());
    // Mandatory before any object is loaded: the JIT resolves the CPU block
    // runtime of generated kernels to this warp.so's implementation.
    if (api.wp_llvm_set_cpu_block_runtime(api.wp_cpu_block_runtime_get_api()) != 1)
        fail(WRP_ERR_RUNTIME, "warp-clang.so refused warp.so's CPU block runtime");
    api_ = api;
    clang_ = lib;
}

void WarpRuntime::init_cuda()
{
    if (cuda_initialized_)
        return;
    // wp_init loads the CUDA driver entry points; passing Warp's own version
    // makes its version check trivially pass.
    if (api_.wp_init(api_.wp_version()) != 0)
        fail(WRP_ERR_RUNTIME, "wp_init failed: %s", error_string().c_str());
    cuda_initialized_ = true;
}

std::string WarpRuntime::error_string() const
{
    const char* s = api_.wp_get_error_string ? api_.wp_get_error_string() : nullptr;
    return s ? s : "";
}

}  // namespace wrp
