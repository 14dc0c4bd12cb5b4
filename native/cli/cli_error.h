// cli_error.h -- errors of the wrp-replay command line, carrying its exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace wrpcli {

// Exit codes of wrp-replay.
enum ExitCode { kExitOk = 0, kExitRuntime = 1, kExitUsage = 2, kExitInvalidFile = 3, kExitCrash = 4,
                kExitTimeout = 124 };

class CliError : public std::runtime_error {
public:
    CliError(int exit_code, const std::string& message)
        : std::runtime_error(message)
        , exit_code_(exit_code)
    {
    }
    int exit_code() const { return exit_code_; }

private:
    int exit_code_;
};

}  // namespace wrpcli
