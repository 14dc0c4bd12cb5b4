// c_api.cpp -- the C functions of wrp_replay.h.
//
// Each one is a thin wrapper that converts every C++ exception into a status
// and a thread-local message; nothing thrown ever crosses into C.
#include <cstring>
#include <new>
#include <string>

#include "error.h"
#include "mapped_file.h"
#include "program.h"
#include "signature.h"
#include "wrp_replay.h"

#ifndef WRP_LIBRARY_VERSION
#define WRP_LIBRARY_VERSION "0.0.0"
#endif

struct wrp_program {
    std::unique_ptr<wrp::Program> impl;
    wrp::Program::OpCrashContext op_context;  // what wrp_program_op_info handed out last
};

namespace {

thread_local std::string t_last_error;
thread_local uint64_t t_last_error_bytes = 0;

wrp_status set_error(wrp_status status, const std::string& message, uint64_t requested_bytes = 0)
{
    t_last_error_bytes = status == WRP_ERR_OUT_OF_MEMORY ? requested_bytes : 0;
    try {
        t_last_error = message;
    } catch (...) {
        t_last_error.clear();
    }
    return status;
}

// Run `body`; map what it throws to a status and this thread's last error.
template <typename F> wrp_status guarded(F&& body)
{
    try {
        t_last_error.clear();
        t_last_error_bytes = 0;
        body();
        return WRP_OK;
    } catch (const wrp::Error& e) {
        return set_error(e.status(), e.what(), e.requested_bytes());
    } catch (const std::bad_alloc&) {
        return set_error(WRP_ERR_OUT_OF_MEMORY, "out of memory on the host: an allocation of this library failed");
    } catch (const std::exception& e) {
        return set_error(WRP_ERR_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
        return set_error(WRP_ERR_INTERNAL, "internal error: unknown exception");
    }
}

wrp::Program& program_of(wrp_program* p)
{
    if (!p || !p->impl)
        wrp::fail(WRP_ERR_INVALID_ARGUMENT, "program is NULL");
    return *p->impl;
}

const wrp::Program& program_of(const wrp_program* p) { return program_of(const_cast<wrp_program*>(p)); }

wrp_status finish_open(wrp_program** out, std::unique_ptr<wrp::Program> impl)
{
    auto* p = new wrp_program;
    p->impl = std::move(impl);
    *out = p;
    return WRP_OK;
}

}  // namespace

extern "C" {

void wrp_options_init(wrp_options* opts)
{
    if (!opts)
        return;
    std::memset(opts, 0, sizeof(*opts));
    opts->struct_size = sizeof(*opts);
    opts->verify_checksums = 1;
}

const char* wrp_library_version(void) { return WRP_LIBRARY_VERSION; }

const char* wrp_last_error(void) { return t_last_error.c_str(); }

uint64_t wrp_last_error_bytes(void) { return t_last_error_bytes; }

wrp_status wrp_program_open(const char* path, const wrp_options* opts, wrp_program** out_program)
{
    return guarded([&] {
        if (!out_program)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "out_program is NULL");
        *out_program = nullptr;
        if (!path || !*path)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "path is NULL or empty");
        finish_open(out_program, wrp::Program::open_file(path, wrp::OpenOptions::from(opts)));
    });
}

wrp_status wrp_program_open_memory(const void* wrp_data, size_t wrp_size, const wrp_module_bytes* modules,
                                   size_t num_modules, const wrp_options* opts, wrp_program** out_program)
{
    return guarded([&] {
        if (!out_program)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "out_program is NULL");
        *out_program = nullptr;
        if (!wrp_data || wrp_size == 0)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "no .wrp or .wrpk bytes given");
        finish_open(out_program, wrp::Program::open_memory(static_cast<const uint8_t*>(wrp_data), wrp_size, modules,
                                                           num_modules, wrp::OpenOptions::from(opts)));
    });
}

wrp_status wrp_verify_signature(const char* path, const wrp_options* opts)
{
    return guarded([&] {
        if (!path || !*path)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "path is NULL or empty");
        wrp::OpenOptions o = wrp::OpenOptions::from(opts);
        bool from_environment = false;
        std::vector<std::string> keys = wrp::requested_trusted_keys(o.trusted_keys, o.num_trusted_keys,
                                                                    &from_environment);
        if (keys.empty())
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "no trusted keys given");
        wrp::MappedFile file = wrp::MappedFile::open(path, o.limits.max_file_bytes, "file", /*follow=*/true);
        wrp::CaptureToVerify capture;
        capture.path = path;
        capture.data = file.data();
        capture.size = file.size();
        capture.modules_dir = o.modules_dir;
        wrp::verify_signature(capture, wrp::TrustedKeys::load(keys, from_environment), o.signature_path, nullptr);
    });
}

void wrp_program_destroy(wrp_program* program)
{
    try {
        delete program;
    } catch (...) {
        // Program::release() is noexcept; nothing can reach here, but the
        // C boundary must hold regardless.
    }
}

const char* wrp_program_device(const wrp_program* program)
{
    return program && program->impl ? program->impl->device_name().c_str() : "";
}

const char* wrp_program_warp_version(const wrp_program* program)
{
    return program && program->impl ? program->impl->graph().producer_version.c_str() : "";
}

uint32_t wrp_program_format_version(const wrp_program* program)
{
    return program && program->impl ? program->impl->graph().layout->version : 0;
}

const char* wrp_program_format_description(const wrp_program* program)
{
    return program && program->impl ? program->impl->format_description().c_str() : "";
}

const char* wrp_program_upgrade_message(const wrp_program* program)
{
    return program && program->impl ? program->impl->upgrade_message().c_str() : "";
}

const char* wrp_program_crash_context(const wrp_program* program)
{
    return program && program->impl ? program->impl->crash_context().c_str() : "";
}

const void* wrp_program_op_slot(const wrp_program* program)
{
    return program && program->impl ? program->impl->op_slot() : nullptr;
}

const char* wrp_program_op_slots_missing(const wrp_program* program)
{
    return program && program->impl ? program->impl->op_slots_missing().c_str() : "";
}

size_t wrp_program_num_warnings(const wrp_program* program)
{
    return program && program->impl ? program->impl->graph().warnings.size() : 0;
}

const char* wrp_program_warning(const wrp_program* program, size_t index)
{
    if (!program || !program->impl || index >= program->impl->graph().warnings.size())
        return "";
    return program->impl->graph().warnings[index].c_str();
}

size_t wrp_program_num_ops(const wrp_program* program)
{
    return program && program->impl ? program->impl->num_ops() : 0;
}

wrp_status wrp_program_op_info(wrp_program* program, size_t index, wrp_op_info* out_info)
{
    return guarded([&] {
        wrp::Program& p = program_of(program);
        if (!out_info)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "out_info is NULL");
        if (index >= p.num_ops())
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "op %zu does not exist (the graph has %zu top-level ops)", index,
                      p.num_ops());
        program->op_context = p.op_crash_context(index);
        const wrp::Program::OpCrashContext& c = program->op_context;
        *out_info = wrp_op_info{c.summary.c_str(), c.kind.c_str(), c.kernel.c_str(), c.module.c_str(),
                                c.verified ? 1 : 0, c.note.c_str()};
    });
}

wrp_status wrp_program_slot_op_info(wrp_program* program, size_t index, size_t seq, wrp_op_info* out_info)
{
    return guarded([&] {
        wrp::Program& p = program_of(program);
        if (!out_info)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "out_info is NULL");
        const auto& all = p.graph().all_ops;
        if (index >= p.num_ops() || seq >= all.size())
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "op %zu (number %zu in file order) does not exist", index, seq);
        program->op_context = p.op_crash_context(index, &all[seq]);
        const wrp::Program::OpCrashContext& c = program->op_context;
        *out_info = wrp_op_info{c.summary.c_str(), c.kind.c_str(), c.kernel.c_str(), c.module.c_str(),
                                c.verified ? 1 : 0, c.note.c_str()};
    });
}

size_t wrp_program_num_bindings(const wrp_program* program)
{
    return program && program->impl ? program->impl->num_bindings() : 0;
}

wrp_status wrp_program_binding(const wrp_program* program, size_t index, wrp_binding_info* out_info)
{
    return guarded([&] {
        if (!out_info)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "out_info is NULL");
        *out_info = program_of(program).binding(index);
    });
}

wrp_status wrp_program_find_binding(const wrp_program* program, const char* name, size_t* out_index)
{
    return guarded([&] {
        if (!out_index)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "out_index is NULL");
        *out_index = program_of(program).find_binding(name);
    });
}

wrp_status wrp_program_set(wrp_program* program, const char* name, const void* data, size_t size)
{
    return guarded([&] { program_of(program).set(name, data, size); });
}

wrp_status wrp_program_get(wrp_program* program, const char* name, void* data, size_t size)
{
    return guarded([&] { program_of(program).get(name, data, size); });
}

wrp_status wrp_program_data_ptr(wrp_program* program, const char* name, void** out_ptr, size_t* out_size)
{
    return guarded([&] {
        if (!out_ptr)
            wrp::fail(WRP_ERR_INVALID_ARGUMENT, "out_ptr is NULL");
        *out_ptr = program_of(program).data_ptr(name, out_size);
    });
}

wrp_status wrp_program_run(wrp_program* program, uint32_t count)
{
    return guarded([&] { program_of(program).run(count); });
}

int wrp_guard_mapping(const void* data, size_t size, const char* line)
{
    if (!data || !size || !line)
        return 0;
    try {
        return wrp::guard_range(data, size, line) ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

void wrp_guard_alias(const void* data, size_t size, const void* original)
{
    if (data && size && original)
        wrp::guard_alias(data, size, original);
}

void wrp_unguard_mapping(const void* data, size_t size)
{
    if (data && size)
        wrp::unguard_range(data, size);
}

}  // extern "C"
