// error.cpp -- message formatting helpers for wrp::Error.
#include <sys/resource.h>
#include <cstring>
#include <cerrno>
#include "error.h"

#include <cstdio>
#include <vector>

namespace wrp {
namespace {

thread_local const char* t_offset_note = nullptr;

}  // namespace

OffsetNote::OffsetNote(const char* note)
    : previous_(t_offset_note)
{
    t_offset_note = note;
}

OffsetNote::~OffsetNote() { t_offset_note = previous_; }

std::string vformat(const char* fmt, va_list args)
{
    va_list copy;
    va_copy(copy, args);
    int n = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    if (n < 0)
        return fmt;
    std::vector<char> buf(static_cast<size_t>(n) + 1);
    std::vsnprintf(buf.data(), buf.size(), fmt, args);
    return std::string(buf.data(), static_cast<size_t>(n));
}

std::string format(const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    std::string s = vformat(fmt, args);
    va_end(args);
    return s;
}

std::string printable(const std::string& s, size_t max_len)
{
    std::string out;
    for (size_t i = 0; i < s.size() && i < max_len; i++) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
            out += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        }
    }
    if (s.size() > max_len)
        out += "...";
    return out;
}

std::string quoted(const std::string& s) { return "\"" + printable(s) + "\""; }

void fail(wrp_status status, const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    std::string s = vformat(fmt, args);
    va_end(args);
    throw Error(status, s);
}

void fail_out_of_memory(uint64_t requested_bytes, const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    std::string s = vformat(fmt, args);
    va_end(args);
    throw Error(WRP_ERR_OUT_OF_MEMORY, s, requested_bytes);
}

void fail_if_resource_limit(int err, const std::string& doing, uint64_t requested_bytes)
{
    if (err == EMFILE) {
        struct rlimit rl;
        std::string limit;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            limit = " (this process may open " + std::to_string(rl.rlim_cur) + ": ulimit -n)";
        fail(WRP_ERR_RUNTIME, "cannot %s: too many open files%s; raise the limit on open files (ulimit -n)",
             doing.c_str(), limit.c_str());
    }
    if (err == ENFILE)
        fail(WRP_ERR_RUNTIME, "cannot %s: too many open files in the system (the kernel's file table is full)",
             doing.c_str());
    if (err == EAGAIN)
        fail(WRP_ERR_RUNTIME, "cannot %s: no new process or thread can be started: the limit on processes is "
             "reached (ulimit -u, RLIMIT_NPROC, or the cgroup's pids.max)", doing.c_str());
    if (err == ENOMEM)
        fail_out_of_memory(requested_bytes, "out of memory on the host: cannot %s: %s", doing.c_str(),
                           std::strerror(err));
}

void fail_invalid_at(const std::string& where, uint64_t at, const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    std::string what = vformat(fmt, args);
    va_end(args);
    std::string note = t_offset_note ? std::string(" ") + t_offset_note : std::string();
    throw Error(WRP_ERR_INVALID_FILE, where + " at byte " + std::to_string(at) + note + ": " + what);
}

}  // namespace wrp
