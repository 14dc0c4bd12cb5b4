// op_slot_guard.cpp -- wrp_guard_op_slot(): the op slot copied out as a process dies.
//
// The slot (op_slot.h) lives in Warp's memory, which dies with the process; the
// parent can read only what was written somewhere it shares.  The handler copies
// the slot with pwrite() (async-signal-safe) into the caller's shared memory file
// and hands the signal on: to the handler that was installed before (wrp-replay's
// crash guard, the mapped-file guard, Python's faulthandler) or the default action.
#include <csignal>
#include <cstring>

#include <signal.h>
#include <unistd.h>

#include "../cli/crash_signals.h"
#include "op_slot.h"
#include "wrp_replay.h"

namespace {

using wrpcli::kCrashSignals;
using wrpcli::kNumCrashSignals;

const void* volatile g_slot = nullptr;
volatile int g_fd = -1;
struct sigaction g_previous[kNumCrashSignals];
bool g_installed = false;
char g_altstack[64 * 1024];

extern "C" void on_fatal_signal(int sig, siginfo_t* info, void*)
{
    const void* slot = g_slot;
    int fd = g_fd;
    if (slot && fd >= 0) {
        ssize_t put = pwrite(fd, slot, wrp::kOpSlotSize, 0);
        (void)put;
    }
    for (size_t i = 0; i < kNumCrashSignals; i++)
        if (kCrashSignals[i].number == sig)
            sigaction(sig, &g_previous[i], nullptr);
    // A signal that was sent (kill, raise, abort) is sent again now, to what was there before; a
    // fault re-runs its instruction on return and faults into it.
    if (!info || info->si_code <= 0)
        raise(sig);
}

}  // namespace

wrp_status wrp_guard_op_slot(const void* slot, int fd)
{
    if (!slot) {
        if (g_installed)
            for (size_t i = 0; i < kNumCrashSignals; i++)
                sigaction(kCrashSignals[i].number, &g_previous[i], nullptr);
        g_installed = false;
        g_slot = nullptr;
        g_fd = -1;
        return WRP_OK;
    }
    g_slot = slot;
    g_fd = fd;
    if (g_installed)
        return WRP_OK;
    stack_t current;
    if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
        stack_t ss;
        std::memset(&ss, 0, sizeof(ss));
        ss.ss_sp = g_altstack;  // a stack overflow is reported too
        ss.ss_size = sizeof(g_altstack);
        sigaltstack(&ss, nullptr);
    }
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kNumCrashSignals; i++)
        sigaction(kCrashSignals[i].number, &sa, &g_previous[i]);
    g_installed = true;
    return WRP_OK;
}
