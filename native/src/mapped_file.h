// mapped_file.h -- read-only memory maps of untrusted input files.
//
// Files are opened with O_NOFOLLOW (a symbolic link is refused rather than
// followed to somewhere unexpected) and O_NONBLOCK (so a FIFO cannot hang the
// open), and must be non-empty regular files below a size cap.  The bytes are
// then parsed in place, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wrp {

class MappedFile {
public:
    MappedFile() = default;
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    // Map `path`.  `what` names the file in messages ("file", "module file").
    // Throws wrp::Error(WRP_ERR_INVALID_FILE) with a message naming the path.
    // `follow`: follow a final symbolic link (paths the user gave; default: refuse it).
    static MappedFile open(const std::string& path, uint64_t max_bytes, const char* what, bool follow = false);

    // Map `name` inside the directory open as `dirfd` (`display` is the path
    // shown in messages).
    static MappedFile open_at(int dirfd, const std::string& name, const std::string& display, uint64_t max_bytes,
                              const char* what);

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    static MappedFile map_fd(int fd, const std::string& display, uint64_t max_bytes, const char* what);
    // The line a fault in this file prints; guard_range() registers it.
    void guard(const std::string& display, const char* what);
    void reset() noexcept;

    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// True when [data, data + size) lies in one MAP_SHARED mapping (from /proc/self/maps): a
// caller's buffer whose pages a .wrpk's WRP1 image may map rather than copy.
bool is_shared_mapping(const void* data, size_t size);

// A file that changes under its reader.  A mapped file truncated (or rewritten in place) by another
// program while it is read makes the kernel send SIGBUS on the next load from a page past its new end.
// Every MappedFile registers its range here (a small lock-free table, at most kMaxGuardedRanges) with
// one prepared line naming the file; the first registration installs a SIGBUS handler (sigaction,
// SA_SIGINFO, SA_ONSTACK), process-wide.  A fault inside a registered range:
//   * inside `guarded_read` (hashing, validation): siglongjmp back, and the read fails with
//     wrp::Error(WRP_ERR_INVALID_FILE, "<what> <path> changed while being read ...");
//   * anywhere else: the prepared line is written to stderr (write(2) only) and the process ends
//     with _exit(3) (kExitInvalidFile), never a signal death.
// A fault outside every registered range goes to the disposition the handler replaced (a handler
// installed before, or the default action: death by SIGBUS, as without this code).
constexpr int kMaxGuardedRanges = 256;

// Register [data, data + size) with `line` (the whole line written on a fault, "\n" included);
// false when the table is full (the range is then not guarded).  Installs the handler once.
bool guard_range(const void* data, size_t size, const std::string& line);
// Register [data, data + size), a second mapping of pages inside a guarded range (`original`), with
// that range's line.
void guard_alias(const void* data, size_t size, const void* original);
// Remove every registered range that lies inside [data, data + size).
void unguard_range(const void* data, size_t size);
// Async-signal-safe: when `addr` lies in a registered range, write its line to `fd` and _exit(3);
// otherwise return.  For another SIGBUS handler (wrp-replay's crash guard) to consult first.
void exit_if_mapped_fault(const void* addr, int fd);
// Where the line goes: `fd` while fd 2 is redirected (StderrCapture: Warp's stderr captured), -1
// for fd 2 again.
void set_fault_stderr(int fd);
// Put the handler back where another one replaced it without chaining (wrp-replay's crash guard,
// disarmed: it restores what it found before arming); nothing before the first mapping.
void reinstall_fault_handler();
// The line's start for files mapped from now on ("wrp-replay: error: "; the default: "error: ").
void set_fault_prefix(const char* prefix);
// The message of a fault in the file of `addr`'s range ("file X changed while being read ..."), or
// "a mapped file changed while being read".
std::string mapped_fault_message(const void* addr);

// Run `fn(arg)`, a read of mapped bytes with no C++ object to destroy on the way out (a
// siglongjmp skips destructors): returns true when it finished, false when it touched a page of a
// registered file that is gone (the file was truncated); then `*fault_addr` is where.
bool guarded_read(void (*fn)(void*), void* arg, const void** fault_addr);

// "a directory", "a FIFO", ... for a st_mode that is not a regular file's.
const char* file_kind(unsigned mode);

// Open a directory for openat() (a path the user gave or derived from it: a
// symbolic link to the directory is followed).  Returns the fd or throws
// wrp::Error(WRP_ERR_INVALID_FILE) (`fix` is appended as advice).
int open_directory(const std::string& path, const char* what, const std::string& fix);

}  // namespace wrp
