// crash_guard.h -- contain a replay that dies of a fatal signal.
//
// A file can pass every record check and still crash the process that
// replays it: it runs machine code on data.  While armed, the signals of
// crash_signals.h (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT: in kernel code or in Warp's runtime) end
// wrp-replay with a message prepared in advance, written with async-signal-safe
// calls only (write, then _exit(kExitCrash)), on an alternate signal stack so
// that a stack overflow is reported too.  It is armed only while Warp replays:
// outputs are written after it is disarmed, so a crash leaves none.
//
// Which op crashed is not known inside Warp's one-call replay.  With a locator
// set, the handler instead execs wrp-replay again (the same command line plus
// --locate-crash=SIGNUM; execve is async-signal-safe), and that fresh process
// names the op by one more run with op slots (locate_crash.h).  If the exec
// fails, the prepared message is printed as before.
#pragma once

#include <string>

#include "crash_signals.h"

namespace wrpcli {

// `stage`: where the replay is (crash_signals.h: its words follow "the replay crashed with SIG...");
// `context`: what is known about the program (wrp_program_crash_context()).  `json`: also print the
// one --json error line on stdout, with a "crash" object naming the signal and the stage's key for a
// program to read.  Arming again replaces the message.
void arm_crash_guard(const CrashStage& stage, const std::string& context, bool json, bool locate = false);
void disarm_crash_guard();

// The command line a crash while replaying re-executes (argv[0..argc-1] plus
// --locate-crash=SIGNUM), or none after clear_crash_locator().  Takes effect
// at the next arm_crash_guard() whose `locate` is true.
void set_crash_locator(int argc, char** argv);

// "SIGSEGV", ... for the signals the guard catches; nullptr for any other.  Async-signal-safe.
const char* crash_signal_name(int sig);

// The flag the re-executed process is given, "--locate-crash=".
extern const char* const kLocateCrashFlag;

// Kernel output (printf in kernel code, C stdio's stdout): while diverted, file descriptor 1 is a
// copy of `fd` (--kernel-output-fd, or stderr with --json), so that the report written on stdout
// stays exactly what it is.  divert_stdout() flushes C stdio first; restore_stdout() flushes the
// kernels' buffered lines to where they go, then points fd 1 back at the report's stdout (a no-op
// when not diverted).  restore_stdout_in_handler() does the same with async-signal-safe calls only
// (no flush: what C stdio still buffers is lost, as on any crash): a crash, timeout or interrupt
// handler calls it before it writes --json's error on fd 1 (or re-executes wrp-replay).
void divert_stdout(int fd);
void restore_stdout();
void restore_stdout_in_handler();

}  // namespace wrpcli
