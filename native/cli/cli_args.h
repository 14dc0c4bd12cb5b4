// cli_args.h -- the command line of wrp-replay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wrpcli {

struct NamedPath {
    std::string name;
    std::string path;
};

struct CliArgs {
    std::string file;
    std::string device = "auto";
    std::vector<NamedPath> inputs;
    std::vector<NamedPath> outputs;
    uint32_t repeat = 1;
    uint32_t warmup = 0;
    uint64_t max_memory = 0;  // --max-memory: bytes the load may allocate, 0 = the device's free memory
    double timeout_s = 0;  // --timeout: wall-time limit of loading + replaying, 0 = none
    bool json = false;
    bool raw_times = false;  // --raw-times: every replay's time in the --json report
    bool stats = false;  // --stats: every binding's summary (min, max, mean, NaN, Inf) in the --json report
    bool list = false;
    bool help = false;
    bool version = false;
    bool skip_checks = false;
    bool no_verify = false;
    bool verify = false;  // --verify: --list of a .wrpk also checks every blob's SHA-256
    bool allow_raw_pointers = false;
    std::string warp_lib_dir;
    std::string modules_dir;  // --modules-dir: a .wrp's module files ("" = <stem>_modules/)
    std::vector<std::string> trusted_keys;  // --trusted-key PEM / --trusted-keys DIR, in the order given
    std::string signature;  // --signature: the signature file ("" = <stem>.sig beside FILE)
    int kernel_output_fd = -1;  // --kernel-output-fd: where the kernels' printf goes (-1: stdout, stderr with --json)
    int approve_fd = -1;  // --approve-fd: wait for the caller's go-ahead on this fd before allocating
    uint64_t approve_above = 0;  // --approve-above: ... only when the file declares more than this
};

// Throws CliError(kExitUsage) on a malformed command line.
CliArgs parse_args(int argc, char** argv);

extern const char* const kUsage;

}  // namespace wrpcli
