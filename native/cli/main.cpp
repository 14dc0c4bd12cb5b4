// main.cpp -- wrp-replay: replay a .wrp or .wrpk with Warp's native runtime, no Python.
//
// Uses only the public C API (wrp_replay.h), statically linked.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.h"
#include "cli_error.h"
#include "json_writer.h"
#include "npy_io.h"
#include "typed_view.h"
#include "wrp_replay.h"

using namespace wrpcli;

namespace {

int exit_code_for(wrp_status s)
{
    switch (s) {
    case WRP_OK: return kExitOk;
    case WRP_ERR_INVALID_FILE: return kExitInvalidFile;
    case WRP_ERR_INVALID_ARGUMENT: return kExitUsage;
    default: return kExitRuntime;
    }
}

void check(wrp_status s)
{
    if (s != WRP_OK)
        throw CliError(exit_code_for(s), wrp_last_error());
}

struct Program {
    wrp_program* p = nullptr;
    ~Program() { wrp_program_destroy(p); }
};

struct OutputDone {
    std::string name, path, dtype;
    std::vector<uint64_t> shape;
};

std::vector<wrp_binding_info> list_bindings(wrp_program* p)
{
    std::vector<wrp_binding_info> out(wrp_program_num_bindings(p));
    for (size_t i = 0; i < out.size(); i++)
        check(wrp_program_binding(p, i, &out[i]));
    return out;
}

const wrp_binding_info& find(const std::vector<wrp_binding_info>& bindings, const std::string& name)
{
    for (const wrp_binding_info& b : bindings)
        if (name == b.name)
            return b;
    std::string names;
    for (const wrp_binding_info& b : bindings)
        names += std::string(names.empty() ? "" : ", ") + b.name;
    throw CliError(kExitUsage, "no binding named \"" + name + "\" (the file has: " + (names.empty() ? "none" : names) + ")");
}

std::string json_int_list(const int64_t* v, uint32_t n)
{
    std::string s = "[";
    for (uint32_t i = 0; i < n; i++)
        s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

std::string json_shape(const std::vector<uint64_t>& shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string bindings_json(const std::vector<wrp_binding_info>& bindings)
{
    std::string s = "[";
    for (size_t i = 0; i < bindings.size(); i++) {
        const wrp_binding_info& b = bindings[i];
        s += std::string(i ? ", " : "") + "{\"name\": " + json_string(b.name) + ", \"size\": " + std::to_string(b.size) +
            ", \"region_id\": " + std::to_string(b.region_id);
        if (b.has_signature)
            s += ", \"dtype\": " + json_string(b.dtype ? b.dtype : "") + ", \"numpy_dtype\": " +
                json_string(binding_dtype(b).descr()) + ", \"shape\": " + json_int_list(b.shape, b.ndim) +
                ", \"strides\": " + json_int_list(b.strides, b.ndim) + ", \"byte_offset\": " +
                std::to_string(b.byte_offset) + ", \"is_input\": " + (b.is_input ? "true" : "false") +
                ", \"is_output\": " + (b.is_output ? "true" : "false");
        s += "}";
    }
    return s + "]";
}

void print_bindings_text(const std::vector<wrp_binding_info>& bindings)
{
    std::printf("%zu binding(s):\n", bindings.size());
    for (const wrp_binding_info& b : bindings) {
        std::printf("  %-24s %12llu bytes  region %u", b.name, static_cast<unsigned long long>(b.size), b.region_id);
        if (b.has_signature) {
            std::string shape = "(";
            for (uint32_t d = 0; d < b.ndim; d++)
                shape += (d ? ", " : "") + std::to_string(b.shape[d]);
            shape += b.ndim == 1 ? ",)" : ")";
            std::printf("  %s %s%s%s", binding_dtype_name(b).c_str(), shape.c_str(), b.is_input ? " input" : "",
                        b.is_output ? " output" : "");
        }
        std::printf("\n");
    }
}

int run(const CliArgs& args)
{
    wrp_options opts;
    wrp_options_init(&opts);
    opts.device = args.device.c_str();
    opts.warp_lib_dir = args.warp_lib_dir.empty() ? nullptr : args.warp_lib_dir.c_str();
    opts.skip_checks = args.skip_checks;
    opts.verify_checksums = args.no_verify ? 0 : 1;
    opts.validate_only = args.list;
    opts.capture_warp_stderr = 1;  // Warp's diagnostics belong in our error message
    Program prog;
    check(wrp_program_open(args.file.c_str(), &opts, &prog.p));
    std::vector<wrp_binding_info> bindings = list_bindings(prog.p);

    std::string head = "{\"file\": " + json_string(args.file) + ", \"device\": " + json_string(wrp_program_device(prog.p)) +
        ", \"warp_version\": " + json_string(wrp_program_warp_version(prog.p)) + ", \"bindings\": " +
        bindings_json(bindings);
    if (args.list) {
        if (args.json)
            std::printf("%s}\n", head.c_str());
        else
            print_bindings_text(bindings);
        return kExitOk;
    }

    for (const NamedPath& o : args.outputs)
        find(bindings, o.name);
    std::string inputs_json = "[";
    for (const NamedPath& in : args.inputs) {
        const wrp_binding_info& b = find(bindings, in.name);
        NpyArray a = read_npy(in.path, b.size);
        check_input_dtype(b, a, in.path);
        check(wrp_program_set(prog.p, b.name, a.data.data(), a.data.size()));
        inputs_json += std::string(inputs_json.size() > 1 ? ", " : "") + "{\"name\": " + json_string(in.name) +
            ", \"path\": " + json_string(in.path) + "}";
    }
    inputs_json += "]";

    if (args.warmup)
        check(wrp_program_run(prog.p, args.warmup));
    std::vector<double> ms;
    for (uint32_t i = 0; i < args.repeat; i++) {
        auto t0 = std::chrono::steady_clock::now();
        check(wrp_program_run(prog.p, 1));
        auto t1 = std::chrono::steady_clock::now();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);

    std::vector<OutputDone> done;
    for (const NamedPath& o : args.outputs) {
        const wrp_binding_info& b = find(bindings, o.name);
        std::vector<uint8_t> region(static_cast<size_t>(b.size));
        check(wrp_program_get(prog.p, b.name, region.data(), region.size()));
        std::vector<uint8_t> view = gather_view(b, region);
        std::vector<uint64_t> shape = binding_shape(b);
        write_npy_atomic(o.path, binding_dtype(b), shape, view.data(), view.size());
        done.push_back({o.name, o.path, binding_dtype(b).descr(), shape});
    }

    if (args.json) {
        std::string t = "{\"repeat\": " + std::to_string(args.repeat) + ", \"warmup\": " + std::to_string(args.warmup) +
            ", \"min_ms\": " + json_number(sorted.front()) + ", \"median_ms\": " + json_number(median) +
            ", \"max_ms\": " + json_number(sorted.back()) + ", \"replays_ms\": [";
        for (size_t i = 0; i < ms.size(); i++)
            t += (i ? ", " : "") + json_number(ms[i]);
        t += "]}";
        std::string outs = "[";
        for (size_t i = 0; i < done.size(); i++)
            outs += std::string(i ? ", " : "") + "{\"name\": " + json_string(done[i].name) + ", \"path\": " +
                json_string(done[i].path) + ", \"dtype\": " + json_string(done[i].dtype) + ", \"shape\": " +
                json_shape(done[i].shape) + "}";
        outs += "]";
        std::printf("%s, \"inputs\": %s, \"timings\": %s, \"outputs\": %s}\n", head.c_str(), inputs_json.c_str(),
                    t.c_str(), outs.c_str());
    } else {
        std::printf("%s on %s (recorded with Warp %s)\n", args.file.c_str(), wrp_program_device(prog.p),
                    wrp_program_warp_version(prog.p));
        std::printf("%u replay(s) after %u warmup: min %.3f ms  median %.3f ms  max %.3f ms (host wall time)\n",
                    args.repeat, args.warmup, sorted.front(), median, sorted.back());
        for (const OutputDone& o : done)
            std::printf("output %s -> %s  shape %s  dtype %s\n", o.name.c_str(), o.path.c_str(),
                        shape_string(o.shape).c_str(), o.dtype.c_str());
    }
    return kExitOk;
}

}  // namespace

int main(int argc, char** argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++)
        json = json || std::string(argv[i]) == "--json";
    int code;
    std::string message;
    try {
        CliArgs args = parse_args(argc, argv);
        if (args.help) {
            std::fputs(kUsage, stdout);
            return kExitOk;
        }
        if (args.version) {
            std::printf("wrp-replay %s\n", wrp_library_version());
            return kExitOk;
        }
        return run(args);
    } catch (const CliError& e) {
        code = e.exit_code();
        message = e.what();
    } catch (const std::exception& e) {
        code = kExitRuntime;
        message = std::string("internal error: ") + e.what();
    }
    std::fflush(stdout);
    std::fprintf(stderr, "wrp-replay: error: %s\n", message.c_str());
    if (code == kExitUsage && message.find("input ") != 0 && message.find("no binding") != 0)
        std::fprintf(stderr, "(run wrp-replay --help for usage)\n");
    if (json)
        std::printf("{\"error\": %s, \"exit_code\": %d}\n", json_string(message).c_str(), code);
    return code;
}
