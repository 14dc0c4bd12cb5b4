// error.h -- the one exception type used inside libwrp_replay.
//
// Every failure inside the library is thrown as wrp::Error carrying a status
// (which the C API returns and the CLI maps to an exit code) and a complete,
// human-readable message.  The C API boundary catches it (and everything
// else), so no exception ever crosses into C.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "wrp_replay.h"

namespace wrp {

class Error : public std::runtime_error {
public:
    Error(wrp_status status, const std::string& message, uint64_t requested_bytes = 0)
        : std::runtime_error(message)
        , status_(status)
        , requested_bytes_(requested_bytes)
    {
    }
    wrp_status status() const { return status_; }
    // WRP_ERR_OUT_OF_MEMORY: the bytes asked for (wrp_last_error_bytes); 0 when unknown.
    uint64_t requested_bytes() const { return requested_bytes_; }

private:
    wrp_status status_;
    uint64_t requested_bytes_;
};

// printf-style formatting into a std::string (messages are built in many
// places; this keeps each site to one readable line).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list args);

// File-derived text made safe for a message: bytes outside printable ASCII
// become \xNN, and long strings are cut.  quoted() adds double quotes.
std::string printable(const std::string& s, size_t max_len = 200);
std::string quoted(const std::string& s);

[[noreturn]] void fail(wrp_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// WRP_ERR_OUT_OF_MEMORY, with the bytes asked for (the capture's declared total, or the
// allocation or mapping that failed), which the message names too.
[[noreturn]] void fail_out_of_memory(uint64_t requested_bytes, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// A resource limit met while `doing` (errno `err`): too many open files (EMFILE, ENFILE) or no process or
// thread (EAGAIN) is WRP_ERR_RUNTIME (exit 1) in words; ENOMEM is fail_out_of_memory (exit 3). Returns when
// `err` is none of those, for the caller's own message (as wrpkit.limits.resource_error).
void fail_if_resource_limit(int err, const std::string& doing, uint64_t requested_bytes = 0);

// A validation failure of the .wrp (or a module file): "<where> at byte <at>: <what>".
[[noreturn]] void fail_invalid_at(const std::string& where, uint64_t at, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// While one is alive, fail_invalid_at() on this thread says which bytes its
// offsets count ("<where> at byte <at> <note>: <what>").  Used when a .wrpk
// bundle is validated through the WRP1 image rebuilt from its manifest.
class OffsetNote {
public:
    explicit OffsetNote(const char* note);
    ~OffsetNote();
    OffsetNote(const OffsetNote&) = delete;
    OffsetNote& operator=(const OffsetNote&) = delete;

private:
    const char* previous_;
};

}  // namespace wrp
