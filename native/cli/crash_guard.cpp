// crash_guard.cpp -- see crash_guard.h.
#include "crash_guard.h"

#include <csignal>
#include <vector>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "cli_error.h"
#include "crash_signals.h"
#include "json_writer.h"
#include "mapped_file.h"

namespace wrpcli {

namespace {

// The signals caught: kCrashSignals (crash_signals.h, generated from wrpkit/errors.py).
// Prepared before the replay: "<prefix>" + signal name + "<suffix>"; the --json line is
// "<prefix>" + name + "<suffix>" + name + "<crash suffix>" (the name again, in its "crash" object).
char g_err_prefix[64];
char g_err_suffix[2048];
char g_json_prefix[64];
char g_json_suffix[2560];
char g_json_crash_suffix[64];
size_t g_err_suffix_len = 0, g_json_suffix_len = 0, g_json_crash_suffix_len = 0;
int g_fd = 2;
bool g_json = false;
bool g_armed = false;
struct sigaction g_old[kNumCrashSignals];
char g_altstack[64 * 1024];
// The locator: argv to exec, prepared before arming; g_sig_arg gets the signal number.
std::vector<std::string> g_locator_args;
std::vector<char*> g_locator_argv;
char g_sig_arg[48];
size_t g_sig_digits_at = 0;
bool g_locate = false;
// The report's stdout while fd 1 is diverted to the kernel output (divert_stdout), else -1.
volatile int g_report_stdout = -1;

void put(int fd, const char* s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= static_cast<size_t>(w);
    }
}

extern "C" void on_crash(int sig, siginfo_t* info, void*)
{
    // A SIGBUS in a mapped input file is that file changing under us (truncated), not a crash.
    if (sig == SIGBUS && info && info->si_code > 0)
        wrp::exit_if_mapped_fault(info->si_addr, g_fd);
    if (g_locate && !g_locator_argv.empty()) {
        // Only async-signal-safe calls: stderr back to the terminal's (Warp may have it redirected),
        // the signal number written in place, then execve.  Returns only if the exec failed.
        dup2(g_fd, 2);
        restore_stdout_in_handler();  // the located crash's --json error goes on the report's stdout
        int n = sig, k = 0;
        char digits[8];
        do {
            digits[k++] = static_cast<char>('0' + n % 10);
            n /= 10;
        } while (n > 0 && k < 7);
        size_t at = g_sig_digits_at;
        while (k > 0)
            g_sig_arg[at++] = digits[--k];
        g_sig_arg[at] = '\0';
        execve("/proc/self/exe", g_locator_argv.data(), ::environ);  // environ: <unistd.h> with _GNU_SOURCE
    }
    const char* name = crash_signal_name(sig);
    if (!name)
        name = "a fatal signal";
    put(g_fd, g_err_prefix, std::strlen(g_err_prefix));
    put(g_fd, name, std::strlen(name));
    put(g_fd, g_err_suffix, g_err_suffix_len);
    if (g_json) {
        restore_stdout_in_handler();
        put(1, g_json_prefix, std::strlen(g_json_prefix));
        put(1, name, std::strlen(name));
        put(1, g_json_suffix, g_json_suffix_len);
        put(1, name, std::strlen(name));
        put(1, g_json_crash_suffix, g_json_crash_suffix_len);
    }
    _exit(kExitCrash);
}

void copy(char* dst, size_t cap, size_t* len, const std::string& s)
{
    size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
    if (len)
        *len = n;
}

}  // namespace

const char* const kLocateCrashFlag = "--locate-crash=";

const char* crash_signal_name(int sig)
{
    for (const CrashSignal& s : kCrashSignals)
        if (s.number == sig)
            return s.name;
    return nullptr;
}

void set_crash_locator(int argc, char** argv)
{
    g_locator_args.assign(argv, argv + argc);
    std::strcpy(g_sig_arg, kLocateCrashFlag);
    g_sig_digits_at = std::strlen(g_sig_arg);
    g_locator_argv.clear();
    for (std::string& a : g_locator_args)
        g_locator_argv.push_back(&a[0]);
    g_locator_argv.push_back(g_sig_arg);
    g_locator_argv.push_back(nullptr);
}

void arm_crash_guard(const CrashStage& stage, const std::string& context, bool json, bool locate)
{
    g_locate = locate;
    const std::string what =
        std::string(" ") + stage.words + "; nothing was written." + (context.empty() ? "" : " " + context);
    copy(g_err_prefix, sizeof(g_err_prefix), nullptr, "wrp-replay: error: the replay crashed with ");
    copy(g_err_suffix, sizeof(g_err_suffix), &g_err_suffix_len, what + "\n");
    // The signal's name needs no escaping.
    std::string quoted = json_string(what);  // "..." with the escapes
    copy(g_json_prefix, sizeof(g_json_prefix), nullptr, "{\"error\": \"the replay crashed with ");
    // {"error": "the replay crashed with SIG...", "exit_code": 4, "crash": {"signal": "SIG...", "stage": ...}}
    copy(g_json_suffix, sizeof(g_json_suffix), &g_json_suffix_len,
         quoted.substr(1) + ", \"exit_code\": " + std::to_string(kExitCrash) + ", \"crash\": {\"signal\": \"");
    copy(g_json_crash_suffix, sizeof(g_json_crash_suffix), &g_json_crash_suffix_len,
         std::string("\", \"stage\": ") + json_string(stage.key) + "}}\n");
    g_json = json;
    // While Warp runs, fd 2 may point at the library's stderr capture: keep our own copy.
    if (g_fd == 2) {
        int fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
        g_fd = fd >= 0 ? fd : 2;
    }
    stack_t ss;
    std::memset(&ss, 0, sizeof(ss));
    ss.ss_sp = g_altstack;
    ss.ss_size = sizeof(g_altstack);
    sigaltstack(&ss, nullptr);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kNumCrashSignals; i++)
        sigaction(kCrashSignals[i].number, &sa, g_armed ? nullptr : &g_old[i]);
    g_armed = true;
}

void divert_stdout(int fd)
{
    if (fd == 1 || g_report_stdout >= 0)
        return;
    std::fflush(stdout);
    int saved = fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (saved < 0)
        return;  // best effort: the kernels then print on stdout, as without the option
    if (dup2(fd, 1) < 0) {
        close(saved);
        return;
    }
    g_report_stdout = saved;
}

void restore_stdout()
{
    if (g_report_stdout < 0)
        return;
    std::fflush(stdout);  // the kernels' printf lines, buffered by C stdio
    int saved = g_report_stdout;
    dup2(saved, 1);
    g_report_stdout = -1;
    close(saved);
}

void restore_stdout_in_handler()
{
    int saved = g_report_stdout;
    if (saved >= 0)
        dup2(saved, 1);  // the descriptor stays open: the handler _exits or execs
}

void disarm_crash_guard()
{
    if (!g_armed)
        return;
    for (size_t i = 0; i < kNumCrashSignals; i++)
        sigaction(kCrashSignals[i].number, &g_old[i], nullptr);
    g_armed = false;
    wrp::reinstall_fault_handler();  // g_old may predate the first mapped file: its SIGBUS handler comes back
}

}  // namespace wrpcli
