// locate_crash.h -- name the op a crashed replay was running.
//
// Warp replays the whole graph in one call, so when a replay dies of a fatal
// signal nothing in the process knows which op ran.  The crash guard then
// re-executes wrp-replay with --locate-crash=SIGNUM (crash_guard.h), and this
// fresh process, which has not loaded Warp, bisects on prefixes of the graph:
// each probe is a child that opens the program with wrp_options.op_limit = k,
// sets the same inputs and runs the same number of replays.  The first
// prefix that crashes ends with the op that crashed (log2(ops) children).
// The same search as `wrp replay` (wrpkit.run.crash.identify_crash).
#pragma once

#include "cli_args.h"

namespace wrpcli {

// Print the crash report (stderr, and the --json error line on stdout) and
// return kExitCrash.  `signum` is the signal the replay died of.
int locate_crash(const CliArgs& args, int signum);

}  // namespace wrpcli
