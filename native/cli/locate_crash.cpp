// locate_crash.cpp -- see locate_crash.h.
#include "locate_crash.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_error.h"
#include "crash_guard.h"
#include "json_writer.h"
#include "program_setup.h"

namespace wrpcli {

namespace {

// Without --timeout the search gets as long as `wrp replay` gives it (wrpkit.run.crash.IDENTIFY_BUDGET_S).
constexpr double kSearchBudgetS = 120.0;

enum class Probe { Ran, Crashed, Failed, OutOfTime };

// The child: open the first `count` ops, set the inputs, run the replays; exit 0 if all ran.
[[noreturn]] void probe_child(const CliArgs& args, uint64_t count)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the search
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // the crash is expected: no core file per probe
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    try {
        wrp_options opts = options_for(args);
        opts.op_limit = count;
        opts.before_allocate = nullptr;  // --approve-fd: the caller approved the first open already
        Program prog;
        check(wrp_program_open(args.file.c_str(), &opts, &prog.p));
        apply_inputs(prog.p, list_bindings(prog.p), args);
        uint32_t replays = args.warmup + args.repeat;
        check(wrp_program_run(prog.p, replays));
    } catch (...) {
        _exit(3);
    }
    _exit(0);
}

Probe probe(const CliArgs& args, uint64_t count, std::chrono::steady_clock::time_point deadline)
{
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0)
        return Probe::Failed;
    if (pid == 0)
        probe_child(args, count);
    int status = 0;
    for (;;) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid)
            break;
        if (done < 0 && errno != EINTR)
            return Probe::Failed;
        if (std::chrono::steady_clock::now() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return Probe::OutOfTime;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (WIFSIGNALED(status) && crash_signal_name(WTERMSIG(status)))
        return Probe::Crashed;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return Probe::Ran;
    return Probe::Failed;
}

// The remaining time of --timeout, which the exec kept running; the timer is stopped (this process
// keeps its own deadline, and SIGALRM's default action would kill it).
double take_remaining_timeout()
{
    signal(SIGALRM, SIG_IGN);
    struct itimerval left;
    std::memset(&left, 0, sizeof(left));
    getitimer(ITIMER_REAL, &left);
    struct itimerval off;
    std::memset(&off, 0, sizeof(off));
    setitimer(ITIMER_REAL, &off, nullptr);
    return static_cast<double>(left.it_value.tv_sec) + static_cast<double>(left.it_value.tv_usec) * 1e-6;
}

std::string json_or_null(bool known, const std::string& s) { return known ? json_string(s) : "null"; }

}  // namespace

int locate_crash(const CliArgs& args, int signum)
{
    // The exec kept the handler's blocked signal in the mask: a probe's crash must be deliverable.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    double remaining = args.timeout_s > 0 ? take_remaining_timeout() : 0;
    double budget = args.timeout_s > 0 ? remaining : kSearchBudgetS;
    auto deadline = std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(budget));

    // The parent only validates (it never loads Warp): each probe starts from a clean process.
    CliArgs listing = args;
    listing.list = true;
    wrp_options opts = options_for(listing);
    opts.modules_optional = 0;
    Program prog;
    check(wrp_program_open(args.file.c_str(), &opts, &prog.p));
    uint64_t n = wrp_program_num_ops(prog.p);

    // Bisect: the empty prefix runs, the whole graph crashed.
    uint64_t lo = 0, hi = n;
    const char* unknown = n == 0 ? "the graph has no ops" : nullptr;
    while (!unknown && hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        switch (probe(args, mid, deadline)) {
        case Probe::Ran: lo = mid; break;
        case Probe::Crashed: hi = mid; break;
        case Probe::OutOfTime: unknown = "the search for it ran out of time"; break;
        case Probe::Failed: unknown = "a prefix of the graph failed for another reason"; break;
        }
    }

    const char* sig = crash_signal_name(signum) ? crash_signal_name(signum) : "a fatal signal";
    std::string message = std::string("the replay crashed with ") + sig + " ";
    wrp_op_info info{};
    bool known = !unknown && wrp_program_op_info(prog.p, hi - 1, &info) == WRP_OK;
    if (known) {
        message += std::string("in ") + info.summary;
        if (hi - 1 > 0)
            message += " (found by replaying prefixes of the graph: ops 0.." + std::to_string(hi - 2) +
                " replay without crashing)";
        message += "; nothing was written. " + std::string(info.note);
    } else {
        message += std::string("in an op that could not be identified (") +
            (unknown ? unknown : "its description failed") + "); nothing was written. " +
            wrp_program_crash_context(prog.p);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "wrp-replay: error: %s\n", message.c_str());
    if (args.json) {
        std::string crash = "{\"signal\": " + json_string(sig) + ", \"op_index\": " +
            (known ? std::to_string(hi - 1) : std::string("null")) + ", \"op_kind\": " + json_or_null(known, info.kind) +
            ", \"kernel\": " + json_or_null(known && *info.kernel, known ? info.kernel : "") + ", \"module\": " +
            json_or_null(known && *info.module, known ? info.module : "") + ", \"digest_verified\": " +
            (known && *info.module ? (info.module_verified ? "true" : "false") : "null") + "}";
        std::fputs(error_json(message, kExitCrash, ", \"crash\": " + crash).c_str(), stdout);
    }
    return kExitCrash;
}

}  // namespace wrpcli
