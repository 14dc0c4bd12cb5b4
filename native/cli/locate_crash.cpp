// locate_crash.cpp -- see locate_crash.h.
#include "locate_crash.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_error.h"
#include "crash_guard.h"
#include "json_writer.h"
#include "op_slot.h"
#include "program_setup.h"

namespace wrpcli {

namespace {

// Without --timeout the second run gets as long as `wrp replay` gives it (wrpkit.run.contain.crash.IDENTIFY_BUDGET_S).
constexpr double kSecondRunBudgetS = 120.0;

enum class Probe { Ran, Crashed, Failed, OutOfTime };

// Where a crash came when the second run's every op ran (op_slot.h, from wrpkit/op_slots.py).
const std::string kAfterLastOp = wrp::kOpSlotAfterLastOp;

// The child: open the graph with op slots, guard the slot into `slot_fd`, set the inputs, run the
// replays; exit 0 if all ran.  A crash leaves the op's slot record in `slot_fd`.
[[noreturn]] void slotted_child(const CliArgs& args, int slot_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the report
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // the crash is expected: no core file
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    try {
        wrp_options opts = options_for(args);
        opts.op_slots = 1;
        opts.before_allocate = nullptr;  // --approve-fd: the caller approved the first open already
        Program prog;
        check(wrp_program_open(args.file.c_str(), &opts, &prog.p));
        const void* slot = wrp_program_op_slot(prog.p);
        if (!slot || wrp_guard_op_slot(slot, slot_fd) != WRP_OK)
            _exit(3);
        apply_inputs(prog.p, list_bindings(prog.p), args);
        uint32_t replays = args.warmup + args.repeat;
        check(wrp_program_run(prog.p, replays));
        // Every op ran: a crash from here on comes while Warp releases the graph's memory (a heap
        // that a launch past its arrays corrupted), and the slot file says so.
        wrp_guard_op_slot(nullptr, -1);
        if (pwrite(slot_fd, wrp::kOpSlotAllRanRecord, wrp::kOpSlotSize, 0) != static_cast<ssize_t>(wrp::kOpSlotSize))
            _exit(3);
    } catch (...) {
        _exit(3);
    }
    _exit(0);
}

Probe run_slotted(const CliArgs& args, int slot_fd, std::chrono::steady_clock::time_point deadline)
{
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0)
        return Probe::Failed;
    if (pid == 0)
        slotted_child(args, slot_fd);
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

// The slot record a crashed child left.
struct SlotRecord {
    int64_t seq = -1;    // the op's number in file order; kOpSlotAllRan: every op had run
    int64_t index = -1;  // its top-level op; -1: no op had run
    std::string path;
};

SlotRecord read_slot(int fd)
{
    uint8_t rec[wrp::kOpSlotSize] = {};
    SlotRecord out;
    if (pread(fd, rec, sizeof(rec), 0) != static_cast<ssize_t>(sizeof(rec)))
        return out;
    std::memcpy(&out.seq, rec + wrp::kOpSlotSeqAt, 8);
    std::memcpy(&out.index, rec + wrp::kOpSlotIndexAt, 8);
    if (out.seq < 0)
        out.index = -1;
    if (out.index >= 0) {
        const char* path = reinterpret_cast<const char*>(rec + wrp::kOpSlotPathAt);
        out.path.assign(path, strnlen(path, wrp::kOpSlotPathBytes));
    }
    return out;
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
    double budget = args.timeout_s > 0 ? remaining : kSecondRunBudgetS;
    auto deadline = std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(budget));

    // This process only validates (it never loads Warp): the second run is a clean child.
    CliArgs listing = args;
    listing.list = true;
    // A .wrpk's blobs are checked as the replay checked them, so that the report says what the replay
    // verified (a module's checksum) rather than what a listing skips; only on this crash path.
    listing.verify = !args.no_verify;
    wrp_options opts = options_for(listing);
    opts.modules_optional = 0;
    opts.op_slots = 1;  // only to learn whether the graph can hold them
    Program prog;
    check(wrp_program_open(args.file.c_str(), &opts, &prog.p));
    uint64_t n = wrp_program_num_ops(prog.p);

    // One more run, with op slots: its slot names the op it died in.
    std::string missing = wrp_program_op_slots_missing(prog.p);
    std::string unknown = n == 0 ? "the graph has no ops" : missing;
    SlotRecord slot;
    int64_t& index = slot.index;
    std::string& path = slot.path;
    if (unknown.empty()) {
        int slot_fd = memfd_create("wrp-op-slot", MFD_CLOEXEC);
        if (slot_fd < 0 || ftruncate(slot_fd, static_cast<off_t>(wrp::kOpSlotSize)) != 0) {
            unknown = "no memory file for its op slot";
        } else {
            switch (run_slotted(args, slot_fd, deadline)) {
            case Probe::Crashed:
                slot = read_slot(slot_fd);
                if (slot.seq == wrp::kOpSlotAllRan)
                    unknown = kAfterLastOp;
                else if (index < 0)
                    unknown = "the second run, with op slots, crashed before any op ran";
                else if (static_cast<uint64_t>(index) >= n || path.substr(0, path.find('.')) != std::to_string(index))
                    unknown = "the crash overwrote the op slot of the second run";
                break;
            case Probe::Ran: unknown = "the second run, with op slots, did not crash"; break;
            case Probe::OutOfTime: unknown = "the second run, with op slots, ran out of time"; break;
            case Probe::Failed: unknown = "the second run, with op slots, failed for another reason"; break;
            }
        }
        if (slot_fd >= 0)
            close(slot_fd);
    }

    const char* sig = crash_signal_name(signum) ? crash_signal_name(signum) : "a fatal signal";
    std::string message = std::string("the replay crashed with ") + sig + " ";
    wrp_op_info info{};
    bool known = unknown.empty() && wrp_program_slot_op_info(prog.p, static_cast<size_t>(index),
                                                             static_cast<size_t>(slot.seq), &info) == WRP_OK;
    if (unknown == kAfterLastOp) {
        message += unknown + "; nothing was written. " + wrp_program_crash_context(prog.p);
    } else if (known) {
        message += std::string("in ") + info.summary;
        if (path != std::to_string(index))
            message += " at path " + path;
        message += std::string(" (") + wrp::kOpSlotSecondRun + ")";
        message += "; nothing was written. " + std::string(info.note);
    } else {
        message += std::string("in an op that could not be identified (") +
            (unknown.empty() ? "its description failed" : unknown) + "); nothing was written. " +
            wrp_program_crash_context(prog.p);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "wrp-replay: error: %s\n", message.c_str());
    if (args.json) {
        std::string crash = "{\"signal\": " + json_string(sig) + ", \"stage\": " +
            json_string(kCrashStageReplaying.key) + ", \"op_index\": " +
            (known ? std::to_string(index) : std::string("null")) + ", \"path\": " + json_or_null(known, path) +
            ", \"unknown\": " + json_or_null(!known, unknown.empty() ? "its description failed" : unknown) +
            ", \"op_kind\": " + json_or_null(known, known ? info.kind : "") +
            ", \"kernel\": " + json_or_null(known && *info.kernel, known ? info.kernel : "") + ", \"module\": " +
            json_or_null(known && *info.module, known ? info.module : "") + ", \"digest_verified\": " +
            (known && *info.module ? (info.module_verified ? "true" : "false") : "null") + "}";
        std::fputs(error_json(message, kExitCrash, ", \"crash\": " + crash).c_str(), stdout);
    }
    return kExitCrash;
}

}  // namespace wrpcli
