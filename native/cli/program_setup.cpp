// program_setup.cpp -- see program_setup.h.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <unistd.h>
#include "program_setup.h"

#include <cstdint>

#include "cli_error.h"
#include "json_writer.h"
#include "npy_io.h"
#include "typed_view.h"

namespace wrpcli {

int exit_code_for(wrp_status s)
{
    switch (s) {
    case WRP_OK: return kExitOk;
    case WRP_ERR_INVALID_FILE: return kExitInvalidFile;
    case WRP_ERR_INCOMPATIBLE: return kExitInvalidFile;
    case WRP_ERR_UNTRUSTED: return kExitInvalidFile;  // unsigned, untrusted or changed after signing: exit 3
    case WRP_ERR_OUT_OF_MEMORY: return kExitInvalidFile;  // too big for this device: exit 3, as wrp's
    case WRP_ERR_INVALID_ARGUMENT: return kExitUsage;
    case WRP_ERR_NO_DEVICE: return kExitUsage;
    case WRP_ERR_INTERNAL: return kExitInternal;
    default: return kExitRuntime;
    }
}

void check(wrp_status s)
{
    if (s != WRP_OK)
        throw CliError(exit_code_for(s), wrp_last_error(), s == WRP_ERR_OUT_OF_MEMORY ? wrp_last_error_bytes() : 0);
}

std::vector<wrp_binding_info> list_bindings(wrp_program* p)
{
    std::vector<wrp_binding_info> out(wrp_program_num_bindings(p));
    for (size_t i = 0; i < out.size(); i++)
        check(wrp_program_binding(p, i, &out[i]));
    return out;
}

// Edit distance of two names, letters compared without case (for "did you mean").
size_t name_distance(const std::string& a, const std::string& b)
{
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++)
        row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            size_t up = row[j];
            bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                std::tolower(static_cast<unsigned char>(b[j - 1]));
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

const wrp_binding_info& find(const std::vector<wrp_binding_info>& bindings, const std::string& name)
{
    for (const wrp_binding_info& b : bindings)
        if (name == b.name)
            return b;
    std::string names, guess;
    size_t best = std::max<size_t>(1, name.size() / 3) + 1;  // a close spelling only (wrp's rule is alike)
    for (const wrp_binding_info& b : bindings) {
        names += std::string(names.empty() ? "" : ", ") + b.name;
        size_t d = name_distance(name, b.name);
        if (d < best) {
            best = d;
            guess = b.name;
        }
    }
    throw CliError(kExitUsage, "no binding named \"" + name + "\"" +
                   (guess.empty() ? "" : " (did you mean \"" + guess + "\"?)") +
                   " (the file has: " + (names.empty() ? "none" : names) + ")");
}

namespace {

// --approve-fd: the caller's go-ahead, asked for once the file is validated and its memory checked,
// before Warp allocates (wrp replay checks what only it knows meanwhile: regions no op reaches).
int wait_for_approval(void* user_data, uint64_t declared_bytes)
{
    const CliArgs& args = *static_cast<const CliArgs*>(user_data);
    if (declared_bytes <= args.approve_above)
        return 0;
    char answer = 0;
    ssize_t n;
    do {
        n = read(args.approve_fd, &answer, 1);
    } while (n < 0 && errno == EINTR);
    return n == 1 && answer == 'y' ? 0 : 1;
}

}  // namespace

wrp_options options_for(const CliArgs& args)
{
    wrp_options opts;
    wrp_options_init(&opts);
    opts.device = args.device.c_str();
    opts.warp_lib_dir = args.warp_lib_dir.empty() ? nullptr : args.warp_lib_dir.c_str();
    opts.skip_checks = args.skip_checks;
    // --list reads a .wrpk's records only (as wrp inspect does): its blobs are hashed with --verify
    // and before every replay, so a 1 GiB bundle is listed without reading its data.
    opts.verify_checksums = args.no_verify || (args.list && !args.verify) ? 0 : 1;
    opts.allow_raw_pointers = args.allow_raw_pointers ? 1 : 0;
    opts.validate_only = args.list;
    opts.modules_optional = args.list;  // --list works without modules, as `wrp inspect` does
    opts.modules_dir = args.modules_dir.empty() ? nullptr : args.modules_dir.c_str();
    opts.capture_warp_stderr = 1;  // Warp's diagnostics belong in our error message
    if (args.max_memory)
        opts.max_memory_bytes = args.max_memory;
    // --trusted-key / --trusted-keys (none: the library reads $WRPKIT_TRUSTED_KEYS), --signature.  The
    // pointers stay valid while `args` does (both callers keep it to the end).
    static thread_local std::vector<const char*> keys;
    keys.clear();
    for (const std::string& k : args.trusted_keys)
        keys.push_back(k.c_str());
    opts.trusted_keys = keys.empty() ? nullptr : keys.data();
    opts.num_trusted_keys = keys.size();
    opts.signature_path = args.signature.empty() ? nullptr : args.signature.c_str();
    if (args.approve_fd >= 0) {
        opts.before_allocate = wait_for_approval;
        opts.before_allocate_user_data = const_cast<CliArgs*>(&args);
    }
    return opts;
}

// Copy the --input arrays into their bindings; returns the "inputs" list of the --json report.
std::string apply_inputs(wrp_program* p, const std::vector<wrp_binding_info>& bindings, const CliArgs& args)
{
    std::string inputs_json = "[";
    for (const NamedPath& in : args.inputs) {
        const wrp_binding_info& b = find(bindings, in.name);
        std::string what = in.name + " (" + in.path + ")";
        NpyArray a = read_npy(in.path, input_bytes(b), [&](const NpyArray& head) {
            check_input_dtype(b, head, what);  // names both dtypes, as wrp replay does
        });
        check_input_shape(b, a, what);
        if (view_is_whole(b)) {
            check(wrp_program_set(p, b.name, a.bytes, a.size));
        } else {
            // A view binding takes the view's elements: the rest of the region keeps its bytes.
            std::vector<uint8_t> region(static_cast<size_t>(b.size));
            check(wrp_program_get(p, b.name, region.data(), region.size()));
            scatter_view(b, a.bytes, a.size, region);
            check(wrp_program_set(p, b.name, region.data(), region.size()));
        }
        inputs_json += std::string(inputs_json.size() > 1 ? ", " : "") + "{\"name\": " + json_string(in.name) +
            ", \"path\": " + json_string(in.path) + "}";
    }
    return inputs_json + "]";
}

}  // namespace wrpcli
