// cli_error.h -- errors of the wrp-replay command line, carrying its exit code.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace wrpcli {

// Exit codes of wrp-replay: the one table of wrp and wrp-replay (its Python twin is
// wrpkit/errors.py EXIT_CODES; README "Exit codes" documents both).  Each failure class
// has one code in every route.
enum ExitCode {
    kExitOk = 0,            // success
    kExitRuntime = 1,       // replay/runtime failed, or an I/O error (cannot read or write a file)
    kExitUsage = 2,         // bad option, path not found, unknown binding, wrong input, wrong device
    kExitInvalidFile = 3,   // invalid, corrupted, unsafe, incomplete, another Warp/format version, out of memory,
                            // or (with trusted keys) unsigned, signed by no trusted key, or changed after signing
    kExitCrash = 4,         // the replay crashed (a fatal signal); nothing written
    kExitInternal = 70,     // a bug
    kExitTimeout = 124,     // --timeout ran out; nothing written
    kExitInterrupted = 130,  // Ctrl-C (128 + SIGINT)
    kExitPipe = 141          // stdout closed (128 + SIGPIPE, as a shell reports a tool that SIGPIPE ended)
};

class CliError : public std::runtime_error {
public:
    CliError(int exit_code, const std::string& message, uint64_t requested_bytes = 0)
        : std::runtime_error(message)
        , exit_code_(exit_code)
        , requested_bytes_(requested_bytes)
    {
    }
    int exit_code() const { return exit_code_; }
    // Out of memory: the bytes asked for (wrp_last_error_bytes), printed as --json's "requested_bytes"; 0: none.
    uint64_t requested_bytes() const { return requested_bytes_; }

private:
    int exit_code_;
    uint64_t requested_bytes_;
};

}  // namespace wrpcli
