// main.cpp -- wrp-replay: replay a .wrp or .wrpk with Warp's native runtime, no Python.
//
// Uses only the public C API (wrp_replay.h), statically linked.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "binding_stats.h"
#include "cli_args.h"
#include "cli_error.h"
#include "crash_guard.h"
#include "json_writer.h"
#include "locate_crash.h"
#include "mapped_file.h"
#include "npy_io.h"
#include "program_setup.h"
#include "typed_view.h"
#include "wrp_replay.h"

using namespace wrpcli;

namespace {

struct OutputDone {
    std::string name, path, dtype;
    std::vector<uint64_t> shape;
};

// Ctrl-C or SIGTERM: one line on stderr (and the JSON error with --json), then exit 130, the same as wrp's.
// Only async-signal-safe calls; outputs are written atomically, so none is left half-written.
const char kInterruptedStderr[] = "wrp-replay: error: interrupted; nothing was written\n";
char g_interrupted_stdout[256];
size_t g_interrupted_stdout_len = 0;
int g_interrupted_fd = 2;

extern "C" void on_interrupt(int)
{
    restore_stdout_in_handler();  // fd 1 may be the kernels' output (--kernel-output-fd): the error goes on stdout
    (void)write_all(g_interrupted_fd, kInterruptedStderr, sizeof(kInterruptedStderr) - 1);
    if (g_interrupted_stdout_len)
        (void)write_all(1, g_interrupted_stdout, g_interrupted_stdout_len);
    _exit(kExitInterrupted);
}

void arm_interrupt(bool json)
{
    if (json) {
        std::string text = error_json("interrupted; nothing was written", kExitInterrupted);
        g_interrupted_stdout_len = std::min(text.size(), sizeof(g_interrupted_stdout));
        std::memcpy(g_interrupted_stdout, text.data(), g_interrupted_stdout_len);
    }
    // While Warp runs, fd 2 may point at the library's stderr capture (a memory file): keep our own copy.
    int fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
    g_interrupted_fd = fd >= 0 ? fd : 2;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);  // ends a replay as Ctrl-C does: the same line and code (130)
}

// --timeout: a real-time interval timer whose SIGALRM handler writes a message prepared in advance and
// _exits with 124, using only async-signal-safe calls, so it works while Warp's native code runs (a WHILE
// loop that does not end).  It covers opening, loading and replaying; it is disarmed before any output is
// written (outputs are written only after the last replay, each atomically through a temp file), and
// nothing before that point writes a file, so an expired timeout leaves no output and no temp file.
char g_timeout_stderr[512];
size_t g_timeout_stderr_len = 0;
char g_timeout_stdout[512];
size_t g_timeout_stdout_len = 0;
int g_timeout_fd = 2;

extern "C" void on_timeout(int)
{
    // Nothing more can be done if a write fails: the exit status still says it.
    restore_stdout_in_handler();
    (void)write_all(g_timeout_fd, g_timeout_stderr, g_timeout_stderr_len);
    if (g_timeout_stdout_len)
        (void)write_all(1, g_timeout_stdout, g_timeout_stdout_len);
    _exit(kExitTimeout);
}

// The same words as wrp's (wrpkit/errors.py timeout_message): with more than one replay asked for,
// the count is named as a cause too, not only WHILE loops.
std::string timeout_message(double seconds, uint64_t replays)
{
    char num[64];
    std::snprintf(num, sizeof(num), "%g", seconds);
    std::string cause = replays > 1 ? std::to_string(replays) + " replays (--repeat, --warmup) take longer, or a "
                                      "WHILE loop does not end?"
                                    : "a WHILE loop that does not end?";
    return std::string(replays > 1 ? "the replays did not finish within " : "the replay did not finish within ") +
        num + " s (" + cause + "); no output was written";
}

void copy_message(char* dst, size_t cap, size_t* len, const std::string& text)
{
    *len = std::min(text.size(), cap);
    std::memcpy(dst, text.data(), *len);
}

void arm_timeout(double seconds, bool json, uint64_t replays)
{
    if (seconds <= 0)
        return;
    std::string message = timeout_message(seconds, replays);
    copy_message(g_timeout_stderr, sizeof(g_timeout_stderr), &g_timeout_stderr_len,
                 "wrp-replay: error: " + message + "\n");
    if (json)
        copy_message(g_timeout_stdout, sizeof(g_timeout_stdout), &g_timeout_stdout_len,
                     error_json(message, kExitTimeout));
    // While Warp runs, fd 2 may point at the library's stderr capture (a memory file): keep our own copy.
    int fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
    g_timeout_fd = fd >= 0 ? fd : 2;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_timeout;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, nullptr) != 0)
        throw CliError(kExitRuntime, std::string("cannot set up --timeout: ") + std::strerror(errno));
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    struct itimerval it;
    std::memset(&it, 0, sizeof(it));
    double whole = std::floor(seconds);
    it.it_value.tv_sec = static_cast<time_t>(whole);
    it.it_value.tv_usec = static_cast<suseconds_t>((seconds - whole) * 1e6);
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
        it.it_value.tv_usec = 1;
    if (setitimer(ITIMER_REAL, &it, nullptr) != 0)
        throw CliError(kExitRuntime, std::string("cannot set up --timeout: ") + std::strerror(errno));
}

void disarm_timeout()
{
    struct itimerval it;
    std::memset(&it, 0, sizeof(it));
    setitimer(ITIMER_REAL, &it, nullptr);  // a no-op when never armed
}

// The q-quantile of sorted values, interpolated linearly between ranks (numpy's default).
double percentile(const std::vector<double>& sorted, double q)
{
    double pos = q * static_cast<double>(sorted.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
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

// `text` on stdout, its lines broken at spaces to at most `width` columns where a word allows.
void print_wrapped(const std::string& text, size_t width)
{
    size_t start = 0;
    while (start <= text.size()) {
        size_t nl = text.find('\n', start);
        std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        while (line.size() > width) {
            size_t cut = line.rfind(' ', width);
            if (cut == std::string::npos || cut == 0)
                break;
            std::printf("%s\n", line.substr(0, cut).c_str());
            line = "  " + line.substr(cut + 1);
        }
        std::printf("%s\n", line.c_str());
        if (nl == std::string::npos)
            break;
        start = nl + 1;
    }
}

std::string warnings_json(const wrp_program* p)
{
    std::string s = "[";
    for (size_t i = 0; i < wrp_program_num_warnings(p); i++)
        s += std::string(i ? ", " : "") + json_string(wrp_program_warning(p, i));
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
    wrp_options opts = options_for(args);
    // A FILE that does not exist is a usage error (exit 2) here as in wrp, not an invalid file.
    struct stat st;
    if (stat(args.file.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
        throw CliError(kExitUsage, "file not found: " + args.file);
    // The same classes as wrp: a directory is a usage error (2), a file that cannot be read an I/O error (1).
    if (S_ISDIR(st.st_mode))
        throw CliError(kExitUsage, "FILE is a directory, not a file: " + args.file);
    if (!S_ISREG(st.st_mode))
        throw CliError(kExitUsage, "FILE is not a regular file (a FIFO, socket or device): " + args.file);
    {
        int fd = open(args.file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            throw CliError(kExitRuntime, "cannot read " + args.file + ": " + std::strerror(errno));
        close(fd);
    }
    if (!args.signature.empty() && args.trusted_keys.empty()) {
        const char* env = std::getenv("WRPKIT_TRUSTED_KEYS");
        if (!env || !*env)
            throw CliError(kExitUsage, "--signature needs the keys to check it with: --trusted-key PEM, "
                           "--trusted-keys DIR or $WRPKIT_TRUSTED_KEYS");
    }
    Program prog;
    for (const NamedPath& o : args.outputs)
        prepare_output(o.path);  // every output place is checked before the file is even opened
    arm_timeout(args.timeout_s, args.json, args.list ? 1 : uint64_t(args.repeat) + args.warmup);
    if (!args.list)
        arm_crash_guard(kCrashStageLoading, "", args.json);
    check(wrp_program_open(args.file.c_str(), &opts, &prog.p));
    std::vector<wrp_binding_info> bindings = list_bindings(prog.p);

    std::string upgrade = wrp_program_upgrade_message(prog.p);
    std::string head = "{\"file\": " + json_string(args.file) + ", \"device\": " + json_string(wrp_program_device(prog.p)) +
        ", \"warp_version\": " + json_string(wrp_program_warp_version(prog.p)) + ", \"format_version\": " +
        std::to_string(wrp_program_format_version(prog.p)) + ", \"format\": " +
        json_string(wrp_program_format_description(prog.p)) + ", \"upgrade\": " +
        (upgrade.empty() ? std::string("null") : json_string(upgrade)) + ", \"warnings\": " + warnings_json(prog.p) +
        ", \"bindings\": " + bindings_json(bindings);
    // Lint findings (a launch past its arrays): said, never refused; the replay may still crash on them.
    for (size_t i = 0; i < wrp_program_num_warnings(prog.p); i++)
        std::fprintf(stderr, "wrp-replay: warning: %s\n", wrp_program_warning(prog.p, i));
    if (args.list) {
        disarm_timeout();
        if (args.json) {
            std::printf("%s}\n", head.c_str());
        } else {
            // Who wrote it; an older format is valid, and replayed only after `wrp upgrade`.
            std::string what = wrp_program_format_description(prog.p);
            if (upgrade.empty())
                std::printf("format %u, recorded with Warp %s\n", wrp_program_format_version(prog.p),
                            wrp_program_warp_version(prog.p));
            else  // the message starts with the description: one line each, wrapped at 80 columns
                print_wrapped(what + "\n" + (upgrade.compare(0, what.size() + 2, what + ": ") == 0
                                                 ? upgrade.substr(what.size() + 2) : upgrade), 80);
            print_bindings_text(bindings);
        }
        return kExitOk;
    }

    for (const NamedPath& o : args.outputs)
        find(bindings, o.name);
    std::string inputs_json = apply_inputs(prog.p, bindings, args);

    // A crash from here on re-executes wrp-replay to find the op (see locate_crash).
    arm_crash_guard(kCrashStageReplaying, std::string("Warp runs the whole graph in one call, so the op that crashed "
                    "is not known here. ") + wrp_program_crash_context(prog.p), args.json, /*locate=*/true);
    // Kernel output (printf in kernel code, which C stdio writes to fd 1): to --kernel-output-fd, else
    // stderr with --json (stdout then carries exactly one JSON object), else stdout.  Every line is out
    // before anything of the report is printed.
    struct KernelOutput {
        explicit KernelOutput(int fd) { divert_stdout(fd); }
        ~KernelOutput() { restore_stdout(); }  // also when a replay fails: the error goes on stdout
    } kernel_output(args.kernel_output_fd >= 0 ? args.kernel_output_fd : args.json ? 2 : 1);
    if (args.warmup)
        check(wrp_program_run(prog.p, args.warmup));
    std::vector<double> ms;
    for (uint32_t i = 0; i < args.repeat; i++) {
        auto t0 = std::chrono::steady_clock::now();
        check(wrp_program_run(prog.p, 1));
        auto t1 = std::chrono::steady_clock::now();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    restore_stdout();
    // Read the outputs, then release Warp's memory, still guarded: a replay that wrote outside its
    // arrays may have corrupted the heap, which free() then detects (SIGABRT, malloc's "invalid
    // pointer"): that is reported as the crash it is, before any output exists.
    // --stats: each binding summarised where it is (a CPU program's memory in place; a CUDA one's copied
    // to the host one binding at a time), before anything is released.
    std::string stats_json;
    if (args.stats) {
        stats_json = "{";
        for (size_t i = 0; i < bindings.size(); i++) {
            const wrp_binding_info& b = bindings[i];
            void* ptr = nullptr;
            size_t size = 0;
            std::vector<uint8_t> host;
            const uint8_t* data = nullptr;
            if (std::string(wrp_program_device(prog.p)).compare(0, 3, "cpu") == 0 && b.size) {
                check(wrp_program_data_ptr(prog.p, b.name, &ptr, &size));
                data = static_cast<const uint8_t*>(ptr);
            } else {
                host.resize(static_cast<size_t>(b.size));
                if (b.size)
                    check(wrp_program_get(prog.p, b.name, host.data(), host.size()));
                data = host.data();
            }
            stats_json += std::string(i ? ", " : "") + json_string(b.name) + ": " + binding_stats_json(b, data);
        }
        stats_json += "}";
    }
    // Outputs: a memory file the caller passed (/dev/fd/N, how wrp hands them over) is written now,
    // straight from a CPU program's memory: no copy here, and the caller reads it only if this run
    // succeeds. A file by path is written only after the program is released (above), so its bytes
    // are taken out first: one copy of the view, gathered from the memory in place (CPU) or from
    // the one host copy of the region (CUDA, which is the view itself when it is the whole region).
    struct PendingOutput {
        std::string name, path;
        NpyDtype dtype;
        std::vector<uint64_t> shape;
        std::vector<uint8_t> view;  // a file by path: its bytes, written once the program is released
    };
    std::vector<PendingOutput> pending;
    const bool on_cpu = std::string(wrp_program_device(prog.p)).compare(0, 3, "cpu") == 0;
    for (const NamedPath& o : args.outputs) {
        const wrp_binding_info& b = find(bindings, o.name);
        PendingOutput out{o.name, o.path, binding_dtype(b), binding_shape(b), {}};
        std::vector<uint8_t> host;
        const uint8_t* region = nullptr;
        size_t region_size = static_cast<size_t>(b.size);
        if (on_cpu && region_size) {
            void* ptr = nullptr;
            check(wrp_program_data_ptr(prog.p, b.name, &ptr, &region_size));
            region = static_cast<const uint8_t*>(ptr);
        } else {
            host.resize(region_size);
            if (region_size)
                check(wrp_program_get(prog.p, b.name, host.data(), host.size()));
            region = host.data();
        }
        // The view in C order: the region itself when the view is all of it, else gathered from it.
        const bool whole = view_is_whole(b);
        std::vector<uint8_t> gathered;
        const uint8_t* bytes = region;
        size_t nbytes = region_size;
        if (!whole) {
            gathered.resize(static_cast<size_t>(input_bytes(b)));
            gather_view_into(b, region, region_size, gathered.data());
            bytes = gathered.data();
            nbytes = gathered.size();
        }
        if (is_passed_fd(o.path))
            write_npy_atomic(o.path, out.dtype, out.shape, bytes, nbytes);
        else if (!whole)
            out.view = std::move(gathered);
        else if (!host.empty())
            out.view = std::move(host);  // the host copy is the view itself
        else
            out.view.assign(bytes, bytes + nbytes);  // the one copy of a CPU program's memory
        pending.push_back(std::move(out));
    }
    const std::string device = wrp_program_device(prog.p), warp_version = wrp_program_warp_version(prog.p);
    bindings.clear();  // their strings belong to the program
    wrp_program_destroy(prog.p);
    prog.p = nullptr;
    disarm_timeout();  // replayed in time: from here on, outputs are written and never cut short
    disarm_crash_guard();
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    double median = percentile(sorted, 0.5);
    double mean = 0;
    for (double v : ms)
        mean += v / static_cast<double>(n);

    std::vector<OutputDone> done;
    for (const PendingOutput& o : pending) {
        if (!is_passed_fd(o.path))  // written above, before the program was released
            write_npy_atomic(o.path, o.dtype, o.shape, o.view.data(), o.view.size());
        done.push_back({o.name, o.path, o.dtype.descr(), o.shape});
    }

    if (args.json) {
        std::string t = "{\"repeat\": " + std::to_string(args.repeat) + ", \"warmup\": " + std::to_string(args.warmup) +
            ", \"count\": " + std::to_string(n) + ", \"mean_ms\": " + json_number(mean) +
            ", \"min_ms\": " + json_number(sorted.front()) + ", \"p5_ms\": " + json_number(percentile(sorted, 0.05)) +
            ", \"median_ms\": " + json_number(median) + ", \"p95_ms\": " + json_number(percentile(sorted, 0.95)) +
            ", \"max_ms\": " + json_number(sorted.back());
        if (args.raw_times) {  // every replay's time only on request: --repeat 200000 stays a short report
            t += ", \"replays_ms\": [";
            for (size_t i = 0; i < ms.size(); i++)
                t += (i ? ", " : "") + json_number(ms[i]);
            t += "]";
        }
        t += "}";
        std::string outs = "[";
        for (size_t i = 0; i < done.size(); i++)
            outs += std::string(i ? ", " : "") + "{\"name\": " + json_string(done[i].name) + ", \"path\": " +
                json_string(done[i].path) + ", \"dtype\": " + json_string(done[i].dtype) + ", \"shape\": " +
                json_shape(done[i].shape) + "}";
        outs += "]";
        if (args.stats)
            outs += ", \"stats\": " + stats_json;
        std::printf("%s, \"inputs\": %s, \"timings\": %s, \"outputs\": %s}\n", head.c_str(), inputs_json.c_str(),
                    t.c_str(), outs.c_str());
    } else {
        std::printf("%s on %s (recorded with Warp %s)\n", args.file.c_str(), device.c_str(), warp_version.c_str());
        std::printf("%u %s after %u warmup: min %.3f ms  median %.3f ms  mean %.3f ms  max %.3f ms (host wall time)\n",
                    args.repeat, args.repeat == 1 ? "replay" : "replays", args.warmup, sorted.front(), median, mean,
                    sorted.back());
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
    uint64_t requested_bytes = 0;  // out of memory: the size asked for, in --json's error
    // An input file truncated while it is read: this line, exit 3 (mapped_file.h), never SIGBUS.
    wrp::set_fault_prefix("wrp-replay: error: ");
    try {
        // --locate-crash=SIGNUM (last, never typed by a user): the crash guard re-executed us after a
        // replay died of SIGNUM; find the op (locate_crash.h).
        int locate_signal = 0;
        size_t flag_len = std::strlen(kLocateCrashFlag);
        if (argc > 1 && std::strncmp(argv[argc - 1], kLocateCrashFlag, flag_len) == 0) {
            locate_signal = std::atoi(argv[argc - 1] + flag_len);
            argc--;
        }
        CliArgs args = parse_args(argc, argv);
        if (locate_signal > 0)
            return locate_crash(args, locate_signal);
        arm_interrupt(json);
        set_crash_locator(argc, argv);
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
        requested_bytes = e.requested_bytes();
    } catch (const std::exception& e) {
        code = kExitInternal;
        message = std::string("internal error: ") + e.what();
    }
    disarm_timeout();  // this failure is reported as it is, not overtaken by the timeout
    disarm_crash_guard();
    restore_stdout();  // a no-op unless the kernels' output was diverted
    std::fflush(stdout);
    std::fprintf(stderr, "wrp-replay: error: %s\n", message.c_str());
    if (code == kExitUsage && message.find("input ") != 0 && message.find("no binding") != 0)
        std::fprintf(stderr, "(run wrp-replay --help for usage)\n");
    if (json)
        std::fputs(error_json(message, code, requested_bytes ? ", \"requested_bytes\": " + std::to_string(requested_bytes)
                                                             : std::string()).c_str(),
                   stdout);
    return code;
}
