// cli_args.cpp -- see cli_args.h.
#include "cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cctype>
#include <cstring>

#include <fcntl.h>

#include "cli_error.h"

namespace wrpcli {

const char* const kUsage =
    "usage: wrp-replay FILE [--device cpu|cuda:N] [--input NAME=x.npy]...\n"
    "                  [--output NAME=y.npy]... [--repeat N] [--warmup N]\n"
    "                  [--timeout SECONDS] [--json [--raw-times] [--stats]]\n"
    "                  [--max-memory SIZE] [--warp-lib-dir DIR] [--list [--verify]]\n"
    "                  [--modules-dir DIR] [--trusted-key PEM]...\n"
    "                  [--trusted-keys DIR] [--signature PATH]\n"
    "                  [--kernel-output-fd FD]\n"
    "\n"
    "Replay a Warp captured graph without Python: a .wrp written by wp.capture_save\n"
    "(with the module files in <stem>_modules/ beside it) or a single-file .wrpk\n"
    "bundle (wrp convert X.wrp X.wrpk), told apart by their magic bytes.  Everything\n"
    "is validated before Warp sees it; a .wrpk's header and manifest are checked, and\n"
    "before a replay every blob's SHA-256 (not by --list without --verify); it is\n"
    "read in place.\n"
    "Captures of Warp 1.13-1.18 (formats 3, 10, 14-16) are validated under their own\n"
    "format's rules and listed with --list; a replay of one exits 3 and names the\n"
    "`wrp upgrade IN OUT` command that converts it to format 18.\n"
    "\n"
    "options:\n"
    "  --device DEV         cpu or cuda:N (default: the file's own, cpu or cuda:0);\n"
    "                       must match how the file was captured\n"
    "  --input NAME=PATH    set binding NAME from a .npy file before replaying; its\n"
    "                       byte size must equal the binding's (and its dtype match\n"
    "                       the binding's signature, if any)\n"
    "  --output NAME=PATH   write binding NAME to a .npy file after replaying\n"
    "                       (atomically); typed when the file carries a signature for\n"
    "                       it, else raw uint8 bytes.  /dev/fd/N writes into an open\n"
    "                       file N (a memory file a caller passed) in place\n"
    "  --repeat N           timed replays (default 1)\n"
    "  --warmup N           untimed replays before the timed ones (default 0)\n"
    "  --max-memory SIZE    memory the load may allocate (e.g. 64G); by default the\n"
    "                       file's declared memory is checked against the device's\n"
    "                       free memory before anything is allocated, and a file that\n"
    "                       does not fit exits 3 (out of memory)\n"
    "  --timeout SECONDS    give up when loading and replaying take longer than\n"
    "                       SECONDS of wall time (fractional allowed): exit status\n"
    "                       124, no output written.  Bounds a WHILE loop that does\n"
    "                       not end (nested loops multiply Warp's 2^24-iteration\n"
    "                       guard)\n"
    "  --json               print one JSON object (bindings, timings, outputs) on\n"
    "                       stdout; a failure prints {\"error\": ..., \"exit_code\":\n"
    "                       ...}.  Timings are summary statistics (count, mean, min,\n"
    "                       p5, median, p95, max, in ms)\n"
    "  --kernel-output-fd FD\n"
    "                       write what the kernels print (printf in kernel code) to\n"
    "                       the open file descriptor FD; by default it goes to\n"
    "                       stdout, or to stderr with --json (stdout then carries\n"
    "                       the JSON object only)\n"
    "  --raw-times          with --json, also every replay's time\n"
    "                       (timings.replays_ms)\n"
    "  --stats              with --json, also every binding's shape, dtype, min, max,\n"
    "                       mean, NaN and Inf counts (\"stats\"), computed over the\n"
    "                       program's memory in place\n"
    "  --warp-lib-dir DIR   directory holding warp.so / warp-clang.so (warp-lang's\n"
    "                       warp/bin); default: $WRP_WARP_LIB_DIR, then the warp-lang\n"
    "                       installed beside wrp-replay\n"
    "  --modules-dir DIR    a .wrp's module files (default: <stem>_modules/ beside\n"
    "                       FILE, or beside the target when FILE is a symbolic link)\n"
    "  --trusted-key PEM    refuse FILE (exit 3, before it is decoded or Warp is\n"
    "                       loaded) unless its signature verifies with an EC public\n"
    "                       key or a CA certificate of PEM and covers FILE and a\n"
    "                       .wrp's module files unchanged (schema/SIGNATURE-RULES.md;\n"
    "                       signatures of wrp sign or model_signing sign).\n"
    "                       Repeatable.  Default: $WRPKIT_TRUSTED_KEYS (PEM files or\n"
    "                       directories, separated by ':'; unset or empty: no check)\n"
    "  --trusted-keys DIR   the same with every *.pem file in DIR\n"
    "  --signature PATH     the signature file (default: <stem>.sig beside FILE)\n"
    "  --list               validate the file and list its format, who wrote it and\n"
    "                       its bindings without loading Warp (a .wrp whose modules\n"
    "                       directory is absent is still listed, as wrp inspect\n"
    "                       does); a .wrpk's records only: its blobs are not read or\n"
    "                       hashed (--verify hashes them)\n"
    "  --verify             with --list, also check every .wrpk blob's SHA-256 (a\n"
    "                       replay always does)\n"
    "  --skip-checks        skip semantic validation (trusted files only)\n"
    "  --no-verify          .wrpk only: skip the blobs' SHA-256 checks (trusted files\n"
    "                       only); the header, the manifest's checksum and all\n"
    "                       structure are still checked\n"
    "  --allow-raw-pointers\n"
    "                       replay a file whose kernel arguments hold live process\n"
    "                       pointers (HashGrid, Bvh or Volume ids passed as uint64),\n"
    "                       refused by default\n"
    "  --approve-fd N       for a calling program: once the file is validated and its\n"
    "                       memory checked, before anything is allocated, read one\n"
    "                       byte from file descriptor N; 'y' goes on, anything else\n"
    "                       or end of file withdraws (exit 1, nothing allocated).\n"
    "                       wrp replay starts wrp-replay this way while it checks the\n"
    "                       file itself\n"
    "  --approve-above SIZE\n"
    "                       with --approve-fd: wait only when the file declares more\n"
    "                       than SIZE\n"
    "  --version            print the version and exit\n"
    "  -h, --help           show this help and exit\n"
    "\n"
    "A replay that dies of a fatal signal (bad kernel code, a launch past its arrays)\n"
    "exits 4 and names the op that was running: wrp-replay re-runs itself and replays\n"
    "the graph once more in a child process, as a copy that writes an op slot (the\n"
    "op's index and its path inside IF/WHILE bodies) before every op; the slot the\n"
    "crash leaves names the op (--json: crash.op_index, crash.path).\n"
    "\n"
    "exit status (the same table as wrp's):\n"
    "  0    success\n"
    "  1    a check or replay failed, or an I/O error (cannot read/write a file)\n"
    "  2    usage: bad option, path not found, unknown binding, bad input, device\n"
    "  3    file invalid, unsafe, incomplete, other version, or too big for memory\n"
    "  4    the replay crashed (a fatal signal); contained, nothing was written\n"
    "  70   internal error (a bug)\n"
    "  124  --timeout ran out; nothing was written\n"
    "  130  interrupted (Ctrl-C or SIGTERM); no output is left half-written\n"
    "  141  stdout was closed (a reader such as head quit); output stopped quietly\n";

namespace {

[[noreturn]] void usage_error(const std::string& message) { throw CliError(kExitUsage, message); }

uint32_t parse_count(const std::string& flag, const std::string& text, uint32_t min)
{
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end || errno || v < min || v > 1000000000ull)
        usage_error(flag + " needs an integer between " + std::to_string(min) + " and 1000000000, got \"" + text + "\"");
    return static_cast<uint32_t>(v);
}

// "512M", "16G", "1.5GiB", "1000000": bytes (powers of 1024), as wrpkit's parse_size.
uint64_t parse_size(const std::string& flag, const std::string& text)
{
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    std::string unit = end ? std::string(end) : "";
    while (!unit.empty() && unit.back() == ' ')
        unit.pop_back();
    std::string lower;
    for (char c : unit)
        lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string units = "kmgtp";
    double scale = 1;
    if (!lower.empty()) {
        size_t k = units.find(lower[0]);
        std::string rest = lower.substr(1);
        if (k == std::string::npos || !(rest.empty() || rest == "b" || rest == "ib"))
            usage_error(flag + " needs a size such as 512M or 16G, got \"" + text + "\"");
        scale = std::ldexp(1.0, 10 * static_cast<int>(k + 1));
    }
    if (text.empty() || text[0] == '-' || errno || !std::isfinite(v) || v < 0 || v * scale >= 1.8e19)
        usage_error(flag + " needs a size such as 512M or 16G, got \"" + text + "\"");
    return static_cast<uint64_t>(v * scale);
}

double parse_seconds(const std::string& flag, const std::string& text)
{
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    bool plain = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
    if (!plain || *end || errno || !std::isfinite(v) || v <= 0 || v > 1e9)
        usage_error(flag + " needs a number of seconds above 0 (at most 1e9), got \"" + text + "\"");
    return v;
}

NamedPath parse_named(const std::string& flag, const std::string& text)
{
    size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
        usage_error(flag + " needs NAME=PATH, got \"" + text + "\"");
    return {text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace

CliArgs parse_args(int argc, char** argv)
{
    CliArgs a;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        std::string value;
        bool has_inline = false;
        if (arg.compare(0, 2, "--") == 0 && arg.find('=') != std::string::npos) {
            value = arg.substr(arg.find('=') + 1);
            arg = arg.substr(0, arg.find('='));
            has_inline = true;
        }
        auto next = [&]() -> std::string {
            if (has_inline)
                return value;
            if (i + 1 >= argc)
                usage_error(arg + " needs a value");
            return argv[++i];
        };
        auto no_value = [&]() {
            if (has_inline)
                usage_error(arg + " takes no value");
        };
        if (arg == "-h" || arg == "--help") {
            no_value();
            a.help = true;
        } else if (arg == "--version") {
            no_value();
            a.version = true;
        } else if (arg == "--json") {
            no_value();
            a.json = true;
        } else if (arg == "--raw-times") {
            no_value();
            a.raw_times = true;
        } else if (arg == "--stats") {
            no_value();
            a.stats = true;
        } else if (arg == "--list") {
            no_value();
            a.list = true;
        } else if (arg == "--skip-checks") {
            no_value();
            a.skip_checks = true;
        } else if (arg == "--no-verify") {
            no_value();
            a.no_verify = true;
        } else if (arg == "--verify") {
            no_value();
            a.verify = true;
        } else if (arg == "--allow-raw-pointers") {
            no_value();
            a.allow_raw_pointers = true;
        } else if (arg == "--device") {
            a.device = next();
        } else if (arg == "--input") {
            a.inputs.push_back(parse_named(arg, next()));
        } else if (arg == "--output") {
            a.outputs.push_back(parse_named(arg, next()));
        } else if (arg == "--repeat") {
            a.repeat = parse_count(arg, next(), 1);
        } else if (arg == "--warmup") {
            a.warmup = parse_count(arg, next(), 0);
        } else if (arg == "--max-memory") {
            a.max_memory = parse_size(arg, next());
            if (!a.max_memory)
                usage_error("--max-memory needs a size above 0");
        } else if (arg == "--timeout") {
            a.timeout_s = parse_seconds(arg, next());
        } else if (arg == "--modules-dir") {
            a.modules_dir = next();
            if (a.modules_dir.empty())
                usage_error("--modules-dir needs a directory");
        } else if (arg == "--trusted-key" || arg == "--trusted-keys") {
            std::string path = next();
            if (path.empty())
                usage_error(arg + (arg == "--trusted-key" ? " needs a PEM file" : " needs a directory"));
            a.trusted_keys.push_back(path);
        } else if (arg == "--signature") {
            a.signature = next();
            if (a.signature.empty())
                usage_error("--signature needs a file");
        } else if (arg == "--approve-fd") {
            uint32_t fd = parse_count(arg, next(), 0);
            if (fd > (1u << 20))
                usage_error("--approve-fd needs an open file descriptor number");
            a.approve_fd = static_cast<int>(fd);
        } else if (arg == "--kernel-output-fd") {
            uint32_t fd = parse_count(arg, next(), 0);
            if (fd > (1u << 20) || fcntl(static_cast<int>(fd), F_GETFL) < 0)
                usage_error("--kernel-output-fd needs an open file descriptor number");
            a.kernel_output_fd = static_cast<int>(fd);
        } else if (arg == "--approve-above") {
            a.approve_above = parse_size(arg, next());
        } else if (arg == "--warp-lib-dir") {
            a.warp_lib_dir = next();
            if (a.warp_lib_dir.empty())
                usage_error("--warp-lib-dir needs a directory");
        } else if (arg.size() > 1 && arg[0] == '-') {
            usage_error("unknown option " + arg);
        } else if (a.file.empty()) {
            a.file = arg;
        } else {
            usage_error("only one FILE may be given (got \"" + a.file + "\" and \"" + arg + "\")");
        }
    }
    if (!a.help && !a.version && a.file.empty())
        usage_error("no FILE given");
    if (a.approve_above && a.approve_fd < 0)
        usage_error("--approve-above needs --approve-fd");
    if (a.verify && a.no_verify)
        usage_error("--verify and --no-verify contradict each other: give one");
    for (size_t i = 0; i < a.outputs.size(); i++)
        for (size_t j = 0; j < i; j++)
            if (a.outputs[i].path == a.outputs[j].path)
                usage_error("two outputs write " + a.outputs[i].path);
    return a;
}

}  // namespace wrpcli
