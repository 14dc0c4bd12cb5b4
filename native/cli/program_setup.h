// program_setup.h -- what wrp-replay does to a program before it replays it,
// shared by the replay (main.cpp) and the crash locator (locate_crash.cpp).
#pragma once

#include <string>
#include <vector>

#include "cli_args.h"
#include "wrp_replay.h"

namespace wrpcli {

// The exit code of a failed library call (cli_error.h's table).
int exit_code_for(wrp_status s);

// Throws CliError with the library's last error when `s` is not WRP_OK.
void check(wrp_status s);

// A program that is destroyed with its scope.
struct Program {
    wrp_program* p = nullptr;
    Program() = default;
    Program(const Program&) = delete;
    Program& operator=(const Program&) = delete;
    ~Program() { wrp_program_destroy(p); }
};

std::vector<wrp_binding_info> list_bindings(wrp_program* p);

// The binding called `name`; CliError(kExitUsage) naming the file's bindings if none.
const wrp_binding_info& find(const std::vector<wrp_binding_info>& bindings, const std::string& name);

// The library options the command line asks for (with --list: validation only).  Its trusted_keys
// point into `args`, which must outlive it.
wrp_options options_for(const CliArgs& args);

// Copy the --input arrays into their bindings; returns the "inputs" list of the --json report.
std::string apply_inputs(wrp_program* p, const std::vector<wrp_binding_info>& bindings, const CliArgs& args);

}  // namespace wrpcli
