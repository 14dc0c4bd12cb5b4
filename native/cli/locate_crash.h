// locate_crash.h -- name the op a crashed replay was running.
//
// Warp replays the whole graph in one call, so when a replay dies of a fatal
// signal nothing in the process knows which op ran.  The crash guard then
// re-executes wrp-replay with --locate-crash=SIGNUM (crash_guard.h), and this
// fresh process, which has not loaded Warp, runs one child that opens the
// program with wrp_options.op_slots (wrp1_op_slots.h), guards the slot into a
// memory file (wrp_guard_op_slot), sets the same inputs and runs the same
// number of replays; the slot the crash leaves names the op and its path.
// The same run as `wrp replay`'s (wrpkit.run.contain.crash.located_crash).
#pragma once

#include "cli_args.h"

namespace wrpcli {

// Print the crash report (stderr, and the --json error line on stdout) and
// return kExitCrash.  `signum` is the signal the replay died of.
int locate_crash(const CliArgs& args, int signum);

}  // namespace wrpcli
