// program.cpp -- validation first, then Warp: the life of a wrp_program.
//
// A .wrp is validated in place, under the rules of its own format (3, 10,
// 13-16 or 18); a replay of any format but the current one is then refused
// with WRP_ERR_INCOMPATIBLE and the `wrp upgrade` command that converts it.
// A .wrpk bundle is checked by decode_wrpk()
// (header, manifest SHA-256 and FlatBuffer, blob layout, blob SHA-256s), its
// program rebuilt as a WRP1 image, and that image validated by the very same
// validate_wrp1(); its module binaries go to Warp straight from the mapping.
//
// Sequence for CPU graphs (mirrors warp.capture_load_from_bytes and
// _apic_load_cpu_modules in warp/_src/context.py):
//   wp_apic_load_graph_from_bytes(NULL, bytes, size, NULL, 0, CPU)
//   for each needed object: wp_load_obj_from_bytes(obj, unique JITDylib name)
//   for each kernel: wp_lookup(forward/backward) + wp_apic_register_loaded_cpu_kernel
//   run: wp_apic_cpu_replay_graph
// and for CUDA graphs:
//   wp_init; wp_cuda_device_get_primary_context(N)
//   wp_apic_load_graph_from_bytes(ctx, bytes, size, modules, n, CUDA)
//   wp_cuda_stream_create; run: wp_apic_launch + wp_cuda_stream_synchronize
#include "program.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <fstream>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>
#include <iterator>
#include <cstdlib>
#include <cstdio>
#include <sstream>
#include <map>

#include <sys/resource.h>
#include <sys/stat.h>

#include "error.h"
#include "host_memory.h"
#include "mapped_file.h"
#include "op_slot.h"
#include "wrp1_op_slots.h"
#include "signature.h"
#include "stderr_capture.h"
#include "warp_runtime.h"
#include "wrp1_validator.h"
#include "wrpk_reader.h"

namespace wrp {
namespace {

// JITDylib names must be unique in the process; one counter serves all loads.
std::atomic<uint64_t> g_jit_serial{0};

std::string strip_extension(const std::string& filename)
{
    size_t dot = filename.find('.');
    return dot == std::string::npos ? filename : filename.substr(0, dot);
}

void parse_device(const char* device, OpenOptions& o)
{
    std::string d = device && *device ? device : "auto";
    o.auto_device = d == "auto";
    if (o.auto_device)
        return;
    if (d == "cpu") {
        o.device = Device::Cpu;
        o.device_name = "cpu";
        return;
    }
    if (d == "cuda")
        d = "cuda:0";
    if (d.compare(0, 5, "cuda:") == 0 && d.size() > 5 && d.size() <= 9
        && d.find_first_not_of("0123456789", 5) == std::string::npos) {
        o.device = Device::Cuda;
        o.cuda_ordinal = std::stoi(d.substr(5));
        o.device_name = "cuda:" + std::to_string(o.cuda_ordinal);
        return;
    }
    fail(WRP_ERR_INVALID_ARGUMENT, "device %s is not \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"", quoted(d).c_str());
}

}  // namespace

OpenOptions OpenOptions::from(const wrp_options* user)
{
    wrp_options o;
    wrp_options_init(&o);
    if (user) {
        if (user->struct_size == 0)
            fail(WRP_ERR_INVALID_ARGUMENT, "wrp_options.struct_size is 0: initialize options with wrp_options_init()");
        std::memcpy(&o, user, std::min<size_t>(user->struct_size, sizeof(o)));
    }
    OpenOptions out;
    parse_device(o.device, out);
    out.warp_lib_dir = o.warp_lib_dir ? o.warp_lib_dir : "";
    out.skip_checks = o.skip_checks != 0;
    out.validate_only = o.validate_only != 0;
    out.capture_stderr = o.capture_warp_stderr != 0;
    out.verify_checksums = o.verify_checksums != 0;
    out.allow_raw_pointers = o.allow_raw_pointers != 0;
    out.modules_dir = o.modules_dir ? o.modules_dir : "";  // older callers' structs leave the defaults
    out.modules_optional = o.modules_optional != 0;
    out.op_limit = o.op_limit;
    out.op_slots = o.op_slots != 0;  // older callers' structs leave it 0
    out.before_allocate = o.before_allocate;
    out.before_allocate_user_data = o.before_allocate_user_data;
    out.trusted_keys = o.trusted_keys;
    out.num_trusted_keys = o.num_trusted_keys;
    out.signature_path = o.signature_path ? o.signature_path : "";
    if (o.max_file_bytes)
        out.limits.max_file_bytes = o.max_file_bytes;
    if (o.max_memory_bytes)
        out.limits.max_memory_bytes = o.max_memory_bytes;
    out.limits.semantic_checks = !out.skip_checks;
    return out;
}

Program::Program(const OpenOptions& opts)
    : opts_(opts)
{
    opts_.trusted_keys = nullptr;  // the caller's, only valid during the open (which has used them)
    opts_.num_trusted_keys = 0;
}

Program::~Program() { release(); }

std::unique_ptr<Program> Program::open_file(const std::string& path, const OpenOptions& opts)
{
    MappedFile file = MappedFile::open(path, opts.limits.max_file_bytes, "file", /*follow=*/true);
    // A signed capture: the verdict comes before the file is decoded or anything reaches Warp, on
    // the very bytes decoded below; a .wrp's module files are read once, and those bytes are loaded.
    bool keys_from_environment = false;
    std::vector<std::string> keys = requested_trusted_keys(opts.trusted_keys, opts.num_trusted_keys,
                                                           &keys_from_environment);
    SignedModules signed_modules;
    const bool check_signature = !keys.empty();
    if (check_signature) {
        CaptureToVerify capture;
        capture.path = path;
        capture.data = file.data();
        capture.size = file.size();
        capture.modules_dir = opts.modules_dir;
        verify_signature(capture, TrustedKeys::load(keys, keys_from_environment), opts.signature_path,
                         &signed_modules);
    }
    if (is_wrpk(file.data(), file.size())) {
        // `file` (a MAP_SHARED mapping) outlives Warp's load; the image maps its region data pages.
        // A signed bundle's blob checksums would be a second pass over bytes whose signed digest
        // was just checked, proving nothing more: they are skipped (as in wrpkit's Python reader).
        OpenOptions bundle_opts = opts;
        if (check_signature)
            bundle_opts.verify_checksums = false;
        std::unique_ptr<Program> p = open_bundle(file.data(), file.size(), nullptr, 0, bundle_opts,
                                                 /*map_source_pages=*/true);
        if (check_signature)
            p->bundle_verified_ = true;
        return p;
    }
    std::unique_ptr<Program> p(new Program(opts));
    p->graph_ = validate_wrp1(file.data(), file.size(), opts.limits);
    p->describe_bindings();
    std::vector<ModuleImage> modules;
    std::string dir = opts.modules_dir.empty() ? find_modules_dir(path) : opts.modules_dir;
    struct stat st;
    if (!(opts.validate_only && opts.modules_optional && stat(dir.c_str(), &st) != 0))
        modules = read_module_files(path, opts.modules_dir, p->graph_, !opts.skip_checks,
                                    check_signature ? &signed_modules : nullptr);
    p->start(file.data(), file.size(), modules);
    return p;
}

std::unique_ptr<Program> Program::open_memory(const uint8_t* data, size_t size, const wrp_module_bytes* modules,
                                              size_t num_modules, const OpenOptions& opts)
{
    if (is_wrpk(data, size))  // a caller that mapped its file shared gets its pages mapped, not copied
        return open_bundle(data, size, modules, num_modules, opts, is_shared_mapping(data, size));
    std::unique_ptr<Program> p(new Program(opts));
    p->graph_ = validate_wrp1(data, size, opts.limits);
    p->describe_bindings();
    std::vector<ModuleImage> images = select_module_bytes(modules, num_modules, p->graph_, !opts.skip_checks);
    p->start(data, size, images);
    return p;
}

std::unique_ptr<Program> Program::open_bundle(const uint8_t* data, size_t size, const wrp_module_bytes* extra,
                                              size_t num_extra, const OpenOptions& opts, bool map_source_pages)
{
    if (size > opts.limits.max_file_bytes)
        fail(WRP_ERR_INVALID_FILE, "file is %zu bytes, larger than the limit of %llu bytes", size,
             static_cast<unsigned long long>(opts.limits.max_file_bytes));
    WrpkOptions wo;
    wo.verify_checksums = opts.verify_checksums;
    wo.max_image_bytes = opts.limits.max_file_bytes;
    wo.copy_region_data = !opts.validate_only;
    wo.map_source_pages = map_source_pages;
    // Region data is hashed while Warp loads it (below); a listing hashes everything first.
    wo.defer_region_checksums = opts.verify_checksums && !opts.validate_only;
    WrpkBundle bundle = decode_wrpk(data, size, wo);

    std::unique_ptr<Program> p(new Program(opts));
    {
        OffsetNote note(kWrpkImageOffsetNote);
        p->graph_ = validate_wrp1(bundle.image.get(), bundle.image_size, opts.limits);
    }
    p->describe_bindings();
    std::vector<ModuleImage> images = select_bundle_modules(bundle.modules, extra, num_extra, p->graph_,
                                                            !opts.skip_checks);
    p->bundle_verified_ = opts.verify_checksums && num_extra == 0;  // every blob's SHA-256 was checked
    start_verifying(*p, bundle, images);
    return p;
}

void Program::start_verifying(Program& p, WrpkBundle& bundle, const std::vector<ModuleImage>& images)
{
    // The deferred region checksums (no validation reads those regions) are verified on
    // hasher threads while Warp copies the same bytes out of the image, so that hashing costs
    // no wall time where cores are free; a blob with chunk digests is shared out chunk by
    // chunk, and this thread joins the same work as soon as its load returns.  The program
    // is returned only once every item has been verified and matched (WRPK-FORMAT.md step
    // 6); on a mismatch it is released with its graph.
    std::exception_ptr load_error;
    ChecksumVerifier verifier(bundle.deferred);
    {
        VerifierThreads threads(verifier, true);
        try {
            p.start(bundle.image.get(), bundle.image_size, images);
        } catch (...) {
            load_error = std::current_exception();
        }
        verifier.work();  // the items no hasher thread has taken yet (all of them if none started)
    }  // joins the hasher threads
    verifier.rethrow();  // altered data explains a failed load better than the load's own error
    if (load_error)
        std::rethrow_exception(load_error);
}

namespace {

const char* const kNoDigestHint =
    "corrupt or mismatched kernel code cannot be caught before it runs; save the capture with wrpkit (wrpkit.save or "
    "wrpkit.capture) or bundle it (wrp convert FILE out.wrpk) to record module digests";

}  // namespace

// Said when a replay dies of a fatal signal (wrp-replay's crash report): which modules had their
// SHA-256 checked before they ran.  The same words as wrpkit.run.contain.crash.crash_error.
void Program::describe_crash_context(const std::vector<ModuleImage>& modules)
{
    unverified_modules_.clear();
    for (const ModuleImage& m : modules)
        if (!((!opts_.skip_checks && graph_.find_digest(m.filename)) || bundle_verified_))
            unverified_modules_.push_back(m.filename);
    std::sort(unverified_modules_.begin(), unverified_modules_.end());
    std::string names;
    for (size_t i = 0; i < unverified_modules_.size() && i < 3; i++)
        names += std::string(i ? ", " : "") + "'" + unverified_modules_[i] + "'";
    if (unverified_modules_.size() > 3)
        names += ", ...";
    if (!unverified_modules_.empty())
        crash_context_ = "Modules without a recorded digest (" + names + "): " + kNoDigestHint + ".";
    else
        crash_context_ = "Every module's SHA-256 was verified before it ran: the crash comes from the data the kernels "
                         "were given (run `wrp check` for stale pointers and launches past their arrays).";
}

Program::OpCrashContext Program::op_crash_context(size_t index, const TopLevelOp* nested) const
{
    if (index >= graph_.top_ops.size())
        fail(WRP_ERR_INVALID_ARGUMENT, "op %zu does not exist", index);
    const TopLevelOp& op = nested ? *nested : graph_.top_op(index);
    OpCrashContext c;
    c.kind = op_name(op.type);
    c.summary = "op " + std::to_string(index) + " (" + c.kind;
    const ModuleRecord* mod = op.type == kOpKernelLaunch ? graph_.find_module(op.module_hash) : nullptr;
    if (!mod) {
        c.summary += ")";
        c.note = crash_context_;
        return c;
    }
    c.kernel = op.kernel_key;
    c.module = mod->binary_filename;
    c.summary += " of kernel '" + c.kernel + "', module '" + c.module + "')";
    c.verified = std::find(unverified_modules_.begin(), unverified_modules_.end(), c.module) == unverified_modules_.end();
    c.note = "Module '" + c.module + "': ";
    if (!c.verified)
        c.note += std::string("no digest was recorded, so ") + kNoDigestHint + ".";
    else if (bundle_verified_)
        c.note += "its SHA-256 recorded in the bundle was verified before it ran: the crash comes from the data it "
                  "was given (run `wrp check` for stale pointers and launches past their arrays).";
    else
        c.note += "its SHA-256 recorded at save time was verified before it ran: the crash comes from the data it "
                  "was given (run `wrp check` for stale pointers and launches past their arrays).";
    return c;
}

void Program::describe_bindings()
{
    for (const BindingRecord& b : graph_.bindings) {
        wrp_binding_info info{};
        info.name = b.name.c_str();
        info.region_id = b.region_id;
        const RegionRecord* region = graph_.find_region(b.region_id);
        info.size = region ? region->size : 0;
        if (const ArraySignature* s = graph_.find_signature(b.name)) {
            info.has_signature = 1;
            info.dtype = s->dtype_name.c_str();
            info.scalar = static_cast<wrp_scalar_kind>(s->scalar_kind);
            info.dtype_size = s->dtype_size;
            info.dtype_ndim = static_cast<uint32_t>(s->dtype_shape.size());
            info.dtype_shape = s->dtype_shape.data();
            info.ndim = static_cast<uint32_t>(s->shape.size());
            info.shape = s->shape.data();
            info.strides = s->strides.data();
            info.byte_offset = s->byte_offset;
            info.is_input = s->is_input;
            info.is_output = s->is_output;
        }
        bindings_.push_back(info);
    }
}

void Program::start(const uint8_t* image, size_t size, const std::vector<ModuleImage>& modules)
{
    format_description_ = describe_format(graph_.layout->version);
    if (graph_.layout->version != kCurrentFormat)
        upgrade_message_ = wrp::upgrade_message(graph_.layout->version);
    bool file_cpu = graph_.device == Device::Cpu;
    if (opts_.auto_device) {
        opts_.device = graph_.device;
        opts_.device_name = file_cpu ? "cpu" : "cuda:0";
    }
    if (file_cpu != (opts_.device == Device::Cpu))
        fail(WRP_ERR_INVALID_ARGUMENT, "the file was captured for %s, but device \"%s\" was requested; use %s",
             file_cpu ? "the CPU" : "CUDA", opts_.device_name.c_str(), file_cpu ? "\"cpu\"" : "\"cuda:N\"");
    if (!graph_.raw_pointers.empty() && !opts_.allow_raw_pointers)
        // The hint is wrpkit/checks/check.py's RAW_POINTER_HINT, in wrp-replay's words.
        fail(WRP_ERR_INVALID_FILE, "%s%s; its replay in a new process would dereference a dangling pointer. A wp.Mesh "
             "id: declare that kernel argument `wp.handle` instead of `wp.uint64` and recapture (Warp rebuilds meshes "
             "at load). A HashGrid, Bvh or Volume cannot be saved by Warp 1.19: replay the graph in the process that "
             "captured it, or allow it with --allow-raw-pointers", graph_.raw_pointers[0].c_str(),
             graph_.raw_pointers.size() > 1 ? (" (and " + std::to_string(graph_.raw_pointers.size() - 1) +
                                              " more)").c_str() : "");
    describe_crash_context(modules);
    if (opts_.op_slots)
        op_slots_missing_ = op_slots_unsupported(graph_);
    if (opts_.validate_only)
        return;
    // Validated under its own format's rules, but Warp loads only the current format (`wrp upgrade`
    // converts the older ones); refused before Warp is loaded at all.
    if (!upgrade_message_.empty())
        fail(WRP_ERR_INCOMPATIBLE, "%s", upgrade_message_.c_str());
    // op_limit: Warp gets a copy that holds only the first N top-level ops.
    if (opts_.op_slots && opts_.op_limit > 0)
        fail(WRP_ERR_INVALID_ARGUMENT, "op_slots and op_limit cannot be combined: the op slots are placed in the "
             "whole graph; open the program with one of them");
    std::vector<uint8_t> prefix;
    if (opts_.op_limit > 0 && opts_.op_limit < graph_.top_ops.size()) {
        prefix = prefix_image(image, size, graph_, opts_.op_limit);
        image = prefix.data();
        size = prefix.size();
    }
    // op_slots: Warp gets a copy that writes the op slot before each op (to name a crashing op).
    // Its records are placed from the validated graph of the whole file, so no prefix is slotted.
    std::vector<uint8_t> slotted;
    if (opts_.op_slots && op_slots_missing_.empty()) {
        slotted = op_slot_image(image, size, graph_);
        image = slotted.data();
        size = slotted.size();
    }
    if (file_cpu) {
        HostMemory h = host_memory();
        check_memory(h.known ? h.available : 0, "cpu", h.bound);  // before Warp is loaded, or allocates anything
    }
    std::unique_lock<FairMutex> lock(warp_mutex());
    rt_ = &WarpRuntime::acquire(opts_.warp_lib_dir, file_cpu, !file_cpu);
    if (file_cpu) {
        // Warp's libraries took address space: under RLIMIT_AS the room is what is left now.
        HostMemory h = host_memory();
        check_memory(h.known ? h.available : 0, "cpu", h.bound);
    }
    if (rt_->version() != graph_.producer_version)
        fail(WRP_ERR_INCOMPATIBLE, "the file was recorded with Warp %s, but the Warp runtime in %s is %s; recapture with %s",
             graph_.producer_version.c_str(), rt_->dir().c_str(), rt_->version().c_str(), rt_->version().c_str());
    if (!file_cpu && opts_.cuda_ordinal < rt_->api().wp_cuda_device_get_count()) {
        size_t free_bytes = 0, total_bytes = 0;
        rt_->api().wp_cuda_device_get_memory_info(opts_.cuda_ordinal, &free_bytes, &total_bytes);
        check_memory(total_bytes ? free_bytes : 0, opts_.device_name);
    }
    if (opts_.before_allocate) {
        // Warp's libraries are loaded (that time overlaps the host's wait too), nothing is allocated
        // yet; the host may wait on another process, so no other thread's call waits on it.
        uint64_t need = declared_memory(nullptr);
        lock.unlock();
        int verdict = opts_.before_allocate(opts_.before_allocate_user_data, need);
        if (verdict != 0)
            fail(WRP_ERR_RUNTIME, "the caller withdrew the open (before_allocate returned %d; for wrp-replay: no "
                 "'y' came on --approve-fd); nothing was allocated", verdict);
        lock.lock();
    }
    if (file_cpu)
        start_cpu(image, size, modules);
    else
        start_cuda(image, size, modules);
    if (!slotted.empty()) {
        auto* region = static_cast<uint8_t*>(rt_->api().wp_apic_get_param_ptr(handle_, kOpSlotBinding));
        if (!region || rt_->api().wp_apic_get_param_size(handle_, kOpSlotBinding) != kOpSlotRegionBytes)
            fail(WRP_ERR_INTERNAL, "Warp holds no op slot region of %zu bytes in the slotted graph", kOpSlotRegionBytes);
        std::memcpy(region + kOpSlotAt, kOpSlotEmpty, kOpSlotSize);  // no op yet (host memory)
        op_slot_ = region + kOpSlotAt;
    }
    // Cross-check our reading of the bindings with Warp's.
    for (const wrp_binding_info& b : bindings_)
        if (rt_->api().wp_apic_get_param_size(handle_, b.name) != b.size)
            fail(WRP_ERR_INTERNAL, "Warp reports a different size for binding %s than the file's region %u",
                 quoted(b.name).c_str(), b.region_id);
}

uint64_t Program::declared_memory(std::string* largest) const
{
    uint64_t total = 0;
    std::vector<const RegionRecord*> by_size;
    for (const RegionRecord& r : graph_.regions) {
        total += r.size;  // the validator checked the sum fits 64 bits
        by_size.push_back(&r);
    }
    std::sort(by_size.begin(), by_size.end(), [](const RegionRecord* a, const RegionRecord* b) { return a->size > b->size; });
    if (largest) {
        largest->clear();
        for (size_t i = 0; i < by_size.size() && i < 3; i++)
            *largest += (i ? ", region " : "region ") + std::to_string(by_size[i]->id) + ": " +
                std::to_string(by_size[i]->size) + " bytes";
    }
    return total;
}

void Program::check_memory(uint64_t available, const std::string& device, const std::string& bound) const
{
    std::string largest;
    uint64_t need = declared_memory(&largest);
    const bool explicit_budget = opts_.limits.max_memory_bytes != ~uint64_t(0);
    uint64_t budget = explicit_budget ? opts_.limits.max_memory_bytes : available;
    if (!explicit_budget && available == 0)
        return;  // unknown: nothing to compare with
    if (need <= budget)
        return;
    if (explicit_budget)
        fail_out_of_memory(need, "out of memory: the capture declares %llu bytes of memory (largest: %s), but the "
             "budget max_memory_bytes (--max-memory) is %llu bytes on %s; nothing was allocated",
             static_cast<unsigned long long>(need), largest.c_str(), static_cast<unsigned long long>(budget),
             device.c_str());
    fail_out_of_memory(need, "out of memory: the capture declares %llu bytes of memory (largest: %s), but device "
         "%s has %llu bytes free%s; nothing was allocated (max_memory_bytes / --max-memory SIZE replays it anyway)",
         static_cast<unsigned long long>(need), largest.c_str(), device.c_str(), static_cast<unsigned long long>(available),
         bound.empty() ? "" : (" (bounded by " + bound + ")").c_str());
}

void Program::warp_failed(const std::string& what, const std::string& before_error, const std::string& captured) const
{
    std::string msg = what;
    std::string now = rt_ ? rt_->error_string() : "";
    if (!now.empty() && now != before_error)
        msg += ": " + now;
    if (!captured.empty())
        msg += (now.empty() || now == before_error ? ": " : "\nWarp printed: ") + captured;
    else if (now.empty() || now == before_error)
        msg += " (Warp printed its reason on stderr; set capture_warp_stderr to include it here)";
    // Warp's allocation failures are one status here as everywhere: out of memory, with the size.
    std::string lower = msg;
    for (char& c : lower)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("out of memory") != std::string::npos || lower.find("failed to allocate") != std::string::npos ||
        lower.find("cannot allocate") != std::string::npos) {
        std::string largest;
        uint64_t need = declared_memory(&largest);
        fail_out_of_memory(need, "out of memory on %s: %s (the capture declares %llu bytes; largest: %s)",
             opts_.device_name.empty() ? "cpu" : opts_.device_name.c_str(), msg.c_str(),
             static_cast<unsigned long long>(need), largest.c_str());
    }
    fail(WRP_ERR_RUNTIME, "%s", msg.c_str());
}

void Program::start_cpu(const uint8_t* image, size_t size, const std::vector<ModuleImage>& modules)
{
    const WarpApi& api = rt_->api();
    std::string before = rt_->error_string();
    StderrCapture capture(opts_.capture_stderr);
    handle_ = api.wp_apic_load_graph_from_bytes(nullptr, image, size, nullptr, 0, /*CPU*/ 1);
    if (!handle_)
        warp_failed("Warp could not load the graph", before, capture.finish());

    std::vector<std::pair<std::string, std::string>> loaded;  // binary_filename -> JITDylib name
    for (const ModuleImage& m : modules) {
        std::string name = "wrp_" + std::to_string(g_jit_serial++) + "_" + strip_extension(m.filename);
        if (api.wp_load_obj_from_bytes(m.data, m.size, name.c_str(), false) != 0)
            warp_failed("warp-clang could not load module " + quoted(m.filename), before, capture.finish());
        jit_names_.push_back(name);
        loaded.emplace_back(m.filename, name);
    }
    for (const KernelRecord& k : graph_.kernels) {
        const ModuleRecord* mod = graph_.find_module(k.module_hash);
        const std::string* dylib = nullptr;
        for (const auto& entry : loaded)
            if (mod && entry.first == mod->binary_filename)
                dylib = &entry.second;
        if (!dylib)
            fail(WRP_ERR_INTERNAL, "module of kernel %s was not loaded", quoted(k.key).c_str());
        uint64_t forward = api.wp_lookup(dylib->c_str(), k.forward_name.c_str());
        bool need_backward = k.backward_used && !k.backward_name.empty();
        uint64_t backward = need_backward ? api.wp_lookup(dylib->c_str(), k.backward_name.c_str()) : 0;
        if (!forward || (need_backward && !backward))
            warp_failed("warp-clang could not link kernel " + quoted(k.key) + " of module " + quoted(mod->binary_filename),
                        before, capture.finish());
        api.wp_apic_register_loaded_cpu_kernel(handle_, k.key.c_str(), k.module_hash.c_str(),
                                               reinterpret_cast<void*>(forward), reinterpret_cast<void*>(backward));
    }
}

void Program::start_cuda(const uint8_t* image, size_t size, const std::vector<ModuleImage>& modules)
{
    const WarpApi& api = rt_->api();
    int count = api.wp_cuda_device_get_count();
    if (opts_.cuda_ordinal >= count)
        fail(WRP_ERR_NO_DEVICE, "no CUDA device %s: Warp found %d CUDA device(s)%s", opts_.device_name.c_str(), count,
             count == 0 ? " (no NVIDIA driver or GPU on this machine)" : "");
    cuda_context_ = api.wp_cuda_device_get_primary_context(opts_.cuda_ordinal);
    if (!cuda_context_)
        fail(WRP_ERR_NO_DEVICE, "cannot get the primary context of %s: %s", opts_.device_name.c_str(),
             rt_->error_string().c_str());
    std::vector<WarpModuleBytes> list;
    for (const ModuleImage& m : modules)
        list.push_back({m.filename.c_str(), m.data, m.size});
    std::string before = rt_->error_string();
    StderrCapture capture(opts_.capture_stderr);
    handle_ = api.wp_apic_load_graph_from_bytes(cuda_context_, image, size, list.data(),
                                                static_cast<uint32_t>(list.size()), /*CUDA*/ 0);
    if (!handle_)
        warp_failed("Warp could not load the graph on " + opts_.device_name, before, capture.finish());
    cuda_stream_ = api.wp_cuda_stream_create(cuda_context_, 0);
    if (!cuda_stream_)
        warp_failed("cannot create a CUDA stream on " + opts_.device_name, before, capture.finish());
}

void Program::release() noexcept
{
    if (!rt_)
        return;
    std::lock_guard<FairMutex> lock(warp_mutex());
    const WarpApi& api = rt_->api();
    if (cuda_stream_)
        api.wp_cuda_stream_destroy(cuda_context_, cuda_stream_);
    if (handle_)
        api.wp_apic_destroy_graph(handle_);
    for (const std::string& name : jit_names_)
        api.wp_unload_obj(name.c_str());
    cuda_stream_ = handle_ = nullptr;
    jit_names_.clear();
    rt_ = nullptr;
}

const wrp_binding_info& Program::binding(size_t index) const
{
    if (index >= bindings_.size())
        fail(WRP_ERR_INVALID_ARGUMENT, "binding index %zu is out of range (the program has %zu bindings)", index,
             bindings_.size());
    return bindings_[index];
}

size_t Program::find_binding(const char* name) const
{
    if (!name)
        fail(WRP_ERR_INVALID_ARGUMENT, "binding name is NULL");
    for (size_t i = 0; i < bindings_.size(); i++)
        if (std::strcmp(bindings_[i].name, name) == 0)
            return i;
    std::string names;
    for (const wrp_binding_info& b : bindings_)
        names += std::string(names.empty() ? "" : ", ") + printable(b.name);
    fail(WRP_ERR_INVALID_ARGUMENT, "no binding named %s (the program has: %s)", quoted(name).c_str(),
         names.empty() ? "none" : names.c_str());
}

void Program::require_started(const char* what) const
{
    if (!handle_)
        fail(WRP_ERR_INVALID_ARGUMENT, "cannot %s: the program was opened with validate_only", what);
}

const wrp_binding_info& Program::checked_binding(const char* name, size_t size) const
{
    const wrp_binding_info& b = bindings_[find_binding(name)];
    if (size != b.size)
        fail(WRP_ERR_INVALID_ARGUMENT, "binding %s is %llu bytes, but %zu were given", quoted(name).c_str(),
             static_cast<unsigned long long>(b.size), size);
    return b;
}

void Program::set(const char* name, const void* data, size_t size)
{
    require_started("set a binding");
    const wrp_binding_info& b = checked_binding(name, size);
    if (!data && size)
        fail(WRP_ERR_INVALID_ARGUMENT, "data is NULL");
    std::lock_guard<FairMutex> lock(warp_mutex());
    std::string before = rt_->error_string();
    StderrCapture capture(opts_.capture_stderr);
    if (!rt_->api().wp_apic_set_param(handle_, b.name, data, size))
        warp_failed("Warp could not set binding " + quoted(name), before, capture.finish());
    // CUDA copies are asynchronous on stream 0; make them complete before the
    // caller may reuse `data`.
    if (cuda_context_ && !rt_->api().wp_cuda_context_synchronize(cuda_context_))
        warp_failed("CUDA synchronization failed after setting " + quoted(name), before, capture.finish());
}

void Program::get(const char* name, void* data, size_t size)
{
    require_started("get a binding");
    const wrp_binding_info& b = checked_binding(name, size);
    if (!data && size)
        fail(WRP_ERR_INVALID_ARGUMENT, "data is NULL");
    std::lock_guard<FairMutex> lock(warp_mutex());
    std::string before = rt_->error_string();
    StderrCapture capture(opts_.capture_stderr);
    if (!rt_->api().wp_apic_get_param(handle_, b.name, data, size))
        warp_failed("Warp could not read binding " + quoted(name), before, capture.finish());
}

void* Program::data_ptr(const char* name, size_t* size)
{
    require_started("map a binding");
    const wrp_binding_info& b = bindings_[find_binding(name)];
    std::lock_guard<FairMutex> lock(warp_mutex());
    void* p = rt_->api().wp_apic_get_param_ptr(handle_, b.name);
    if (!p && b.size)
        fail(WRP_ERR_RUNTIME, "Warp returned no memory for binding %s", quoted(name).c_str());
    if (size)
        *size = static_cast<size_t>(b.size);
    return p;
}

void Program::run(uint32_t count)
{
    require_started("run");
    std::lock_guard<FairMutex> lock(warp_mutex());
    const WarpApi& api = rt_->api();
    std::string before = rt_->error_string();
    StderrCapture capture(opts_.capture_stderr);
    for (uint32_t i = 0; i < count; i++) {
        bool ok = cuda_stream_ ? api.wp_apic_launch(handle_, cuda_stream_) : api.wp_apic_cpu_replay_graph(handle_);
        if (!ok)
            warp_failed("Warp replay " + std::to_string(i + 1) + " of " + std::to_string(count) + " failed", before,
                        capture.finish());
    }
    if (cuda_stream_ && !api.wp_cuda_stream_synchronize(cuda_stream_))
        warp_failed("CUDA stream synchronization failed after replay", before, capture.finish());
}

}  // namespace wrp
