// program.h -- the replay engine behind a wrp_program.
//
// A Program owns the validated description of a graph and, unless opened
// with validate_only, Warp's loaded graph: for CPU the JIT-loaded module
// objects and registered kernels, for CUDA the device context and a stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "module_files.h"
#include "wrp1_prefix.h"
#include "wrp1_model.h"
#include "wrp_replay.h"

namespace wrp {

class WarpRuntime;
struct WrpkBundle;

// Options after defaults are applied (see wrp_options in wrp_replay.h).
struct OpenOptions {
    Device device = Device::Cpu;
    bool auto_device = true;  // follow the file: "cpu" or "cuda:0"
    int cuda_ordinal = 0;
    std::string device_name = "auto";
    std::string warp_lib_dir;
    bool skip_checks = false;
    bool validate_only = false;
    bool capture_stderr = false;
    bool verify_checksums = true;  // .wrpk blobs
    bool allow_raw_pointers = false;
    std::string modules_dir;        // .wrp: "" = <stem>_modules/ beside the path (or its target)
    bool modules_optional = false;  // with validate_only: no modules directory is not an error
    uint64_t op_limit = 0;          // 0: the whole graph; N: its first N top-level ops
    bool op_slots = false;          // Warp gets the graph with op slots (wrp1_op_slots.h), where it can
    int (*before_allocate)(void*, uint64_t) = nullptr;  // the host's last word before Warp allocates
    void* before_allocate_user_data = nullptr;
    // Signed captures (open_file and wrp_verify_signature only): the caller's wrp_options.trusted_keys
    // as given (checked where they are used: open_memory ignores them), and the signature's path.
    const char* const* trusted_keys = nullptr;
    size_t num_trusted_keys = 0;
    std::string signature_path;  // "" = <stem>.sig beside the file
    ValidationLimits limits;

    static OpenOptions from(const wrp_options* opts);
};

class Program {
public:
    static std::unique_ptr<Program> open_file(const std::string& path, const OpenOptions& opts);
    static std::unique_ptr<Program> open_memory(const uint8_t* data, size_t size, const wrp_module_bytes* modules,
                                                size_t num_modules, const OpenOptions& opts);
    ~Program();
    Program(const Program&) = delete;
    Program& operator=(const Program&) = delete;

    const Wrp1Graph& graph() const { return graph_; }
    // What a crash report can say about this program (see wrp_program_crash_context).
    const std::string& crash_context() const { return crash_context_; }
    size_t num_ops() const { return graph_.top_ops.size(); }
    // What a crash report says of top-level op `index` (see wrp_op_info).
    struct OpCrashContext {
        std::string summary, kind, kernel, module, note;
        bool verified = false;
    };
    // `nested`: an op inside top-level op `index` (graph().all_ops), described in its place.
    OpCrashContext op_crash_context(size_t index, const TopLevelOp* nested = nullptr) const;
    // "format 16 (written by Warp 1.18.0)" (see wrp_program_format_description).
    const std::string& format_description() const { return format_description_; }
    // "" for the current format, else why a replay is refused (see wrp_program_upgrade_message).
    const std::string& upgrade_message() const { return upgrade_message_; }
    const std::string& device_name() const { return opts_.device_name; }
    size_t num_bindings() const { return bindings_.size(); }
    const wrp_binding_info& binding(size_t index) const;
    size_t find_binding(const char* name) const;  // throws if unknown

    void set(const char* name, const void* data, size_t size);
    void get(const char* name, void* data, size_t size);
    void* data_ptr(const char* name, size_t* size);
    void run(uint32_t count);
    // The op slot Warp writes before each op (op_slots, once started), or nullptr: not asked for, or
    // the graph cannot hold slots (op_slots_missing() says why).
    const void* op_slot() const { return op_slot_; }
    const std::string& op_slots_missing() const { return op_slots_missing_; }

private:
    explicit Program(const OpenOptions& opts);
    // A .wrpk held in `data` (a mapping or the caller's buffer).  `map_source_pages`: `data` is
    // a MAP_SHARED mapping of the file, whose region data pages the WRP1 image may map.
    static std::unique_ptr<Program> open_bundle(const uint8_t* data, size_t size, const wrp_module_bytes* extra,
                                                size_t num_extra, const OpenOptions& opts,
                                                bool map_source_pages = false);
    // start() on a bundle's image while its deferred region checksums are verified.
    static void start_verifying(Program& p, WrpkBundle& bundle, const std::vector<ModuleImage>& images);
    void describe_bindings();
    void describe_crash_context(const std::vector<ModuleImage>& modules);
    void start(const uint8_t* image, size_t size, const std::vector<ModuleImage>& modules);
    void start_cpu(const uint8_t* image, size_t size, const std::vector<ModuleImage>& modules);
    void start_cuda(const uint8_t* image, size_t size, const std::vector<ModuleImage>& modules);
    const wrp_binding_info& checked_binding(const char* name, size_t size) const;
    void require_started(const char* what) const;
    // Bytes of every region together; `largest` gets the three largest, described.
    uint64_t declared_memory(std::string* largest) const;
    // WRP_ERR_OUT_OF_MEMORY when the declared memory exceeds `available` (0: unknown) or max_memory_bytes.
    void check_memory(uint64_t available, const std::string& device, const std::string& bound = "") const;
    [[noreturn]] void warp_failed(const std::string& what, const std::string& before_error, const std::string& captured) const;
    void release() noexcept;

    OpenOptions opts_;
    Wrp1Graph graph_;
    std::vector<wrp_binding_info> bindings_;
    WarpRuntime* rt_ = nullptr;
    void* handle_ = nullptr;        // APICGraph*
    void* cuda_context_ = nullptr;  // CUcontext
    void* cuda_stream_ = nullptr;   // CUstream
    std::vector<std::string> jit_names_;
    std::string crash_context_;
    std::vector<std::string> unverified_modules_;  // binary file names
    std::string format_description_;
    std::string upgrade_message_;
    bool bundle_verified_ = false;
    const void* op_slot_ = nullptr;
    std::string op_slots_missing_;
};

}  // namespace wrp
