// crash_guard.h -- contain a replay that dies of a fatal signal.
//
// A file can pass every record check and still crash the process that
// replays it: it runs machine code on data.  While armed, SIGSEGV, SIGBUS,
// SIGILL, SIGFPE and SIGABRT (in kernel code or in Warp's runtime) end
// wrp-replay with a message prepared in advance, written with async-signal-safe
// calls only (write, then _exit(kExitCrash)), on an alternate signal stack so
// that a stack overflow is reported too.  It is armed only while Warp replays:
// outputs are written after it is disarmed, so a crash leaves none.
#pragma once

#include <string>

namespace wrpcli {

// `stage`: "while replaying", ...; `context`: what is known about the program
// (wrp_program_crash_context()).  `json`: also print the one --json error line on stdout.
// Arming again replaces the message.
void arm_crash_guard(const std::string& stage, const std::string& context, bool json);
void disarm_crash_guard();

}  // namespace wrpcli
