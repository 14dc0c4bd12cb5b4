// mapped_file.cpp -- see mapped_file.h.
#include "mapped_file.h"

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <csetjmp>
#include <csignal>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

namespace wrp {

const char* file_kind(unsigned mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    return "not a regular file";
}

namespace {

[[noreturn]] void fail_open(const std::string& display, const char* what, int err)
{
    if (err == ELOOP)
        fail(WRP_ERR_INVALID_FILE, "%s %s is a symbolic link; symbolic links are refused, pass the real path", what,
             display.c_str());
    fail_if_resource_limit(err, std::string("open ") + what + " " + display);  // ulimit -n: exit 1, in words
    // A file that exists but cannot be read is an I/O error (exit 1), as in every wrp command: the
    // file itself may be fine.  What it holds being wrong is WRP_ERR_INVALID_FILE (exit 3).
    if (err == EACCES || err == EPERM || err == EIO)
        fail(WRP_ERR_RUNTIME, "cannot read %s %s: %s", what, display.c_str(), std::strerror(err));
    fail(WRP_ERR_INVALID_FILE, "cannot open %s %s: %s", what, display.c_str(), std::strerror(err));
}

}  // namespace

// ---------------------------------------------------------------------------
// Files that change under the reader: the registry of guarded ranges and the SIGBUS handler.
// ---------------------------------------------------------------------------
namespace {

struct GuardSlot {
    std::atomic<int> state{0};  // 0 free, 1 being written or removed, 2 live
    uintptr_t lo = 0, hi = 0;   // written before state becomes 2 (release), read after (acquire)
    size_t prefix_len = 0, len = 0;
    char line[1024];
};

GuardSlot g_slots[kMaxGuardedRanges];
std::atomic<int> g_used{0};  // slots ever claimed: the handler scans these
std::mutex g_install_mutex;
std::atomic<bool> g_installed{false};
struct sigaction g_prev_bus;
char g_prefix[64] = "error: ";
std::atomic<int> g_stderr_fd{-1};  // the real stderr while fd 2 is redirected
constexpr int kExitFileChanged = 3;  // kExitInvalidFile: the file cannot be used

// The guarded_read() of this thread, if any (initial-exec: no allocation on first use in the handler).
__thread sigjmp_buf* g_jump __attribute__((tls_model("initial-exec"))) = nullptr;
__thread const void* g_fault_addr __attribute__((tls_model("initial-exec"))) = nullptr;

const GuardSlot* find_slot(uintptr_t a)
{
    int n = g_used.load(std::memory_order_acquire);
    for (int i = 0; i < n && i < kMaxGuardedRanges; i++) {
        const GuardSlot& s = g_slots[i];
        if (s.state.load(std::memory_order_acquire) == 2 && s.lo <= a && a < s.hi)
            return &s;
    }
    return nullptr;
}

void put_all(int fd, const char* p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return;
        p += w;
        n -= static_cast<size_t>(w);
    }
}

extern "C" void wrp_on_sigbus(int sig, siginfo_t* info, void* uc)
{
    const GuardSlot* s = info && info->si_code > 0 ? find_slot(reinterpret_cast<uintptr_t>(info->si_addr)) : nullptr;
    if (s) {
        if (g_jump) {
            sigjmp_buf* j = g_jump;
            g_jump = nullptr;
            g_fault_addr = info->si_addr;
            siglongjmp(*j, 1);
        }
        int fd = g_stderr_fd.load(std::memory_order_relaxed);
        put_all(fd >= 0 ? fd : 2, s->line, s->len);
        _exit(kExitFileChanged);
    }
    // Not one of our files: what was there before.
    if ((g_prev_bus.sa_flags & SA_SIGINFO) && g_prev_bus.sa_sigaction) {
        g_prev_bus.sa_sigaction(sig, info, uc);
        return;
    }
    if (g_prev_bus.sa_handler != SIG_DFL && g_prev_bus.sa_handler != SIG_IGN) {
        g_prev_bus.sa_handler(sig);
        return;
    }
    // The default action: returning re-runs the faulting load, which now kills the process as it
    // would have without this handler; a SIGBUS that was sent, not a fault, is sent again.
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, nullptr);
    if (!info || info->si_code <= 0)
        raise(sig);
}

// Make wrp_on_sigbus SIGBUS's handler, keeping the one it replaces in g_prev_bus for faults outside
// the registered files.
bool take_sigbus()
{
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = wrp_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, &g_prev_bus) == 0;
}

void install_handler()
{
    if (g_installed.load(std::memory_order_acquire))
        return;
    std::lock_guard<std::mutex> lock(g_install_mutex);
    if (g_installed.load(std::memory_order_relaxed))
        return;
    if (take_sigbus())
        g_installed.store(true, std::memory_order_release);
}

bool claim(uintptr_t lo, uintptr_t hi, const char* line, size_t len, size_t prefix_len)
{
    for (int i = 0; i < kMaxGuardedRanges; i++) {
        GuardSlot& s = g_slots[i];
        int expected = 0;
        if (!s.state.compare_exchange_strong(expected, 1, std::memory_order_acquire))
            continue;
        len = len < sizeof(s.line) ? len : sizeof(s.line) - 1;
        std::memcpy(s.line, line, len);
        if (len && s.line[len - 1] != '\n')
            s.line[len - 1] = '\n';
        s.len = len;
        s.prefix_len = prefix_len < len ? prefix_len : 0;
        s.lo = lo;
        s.hi = hi;
        int used = g_used.load(std::memory_order_relaxed);
        while (used < i + 1 && !g_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
        }
        s.state.store(2, std::memory_order_release);
        return true;
    }
    return false;
}

}  // namespace

void reinstall_fault_handler()
{
    if (!g_installed.load(std::memory_order_acquire))
        return;
    std::lock_guard<std::mutex> lock(g_install_mutex);
    struct sigaction cur;
    if (sigaction(SIGBUS, nullptr, &cur) != 0 || ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == wrp_on_sigbus))
        return;
    take_sigbus();
}

void set_fault_stderr(int fd) { g_stderr_fd.store(fd, std::memory_order_relaxed); }

void set_fault_prefix(const char* prefix)
{
    size_t n = std::strlen(prefix);
    n = n < sizeof(g_prefix) - 1 ? n : sizeof(g_prefix) - 1;
    std::memcpy(g_prefix, prefix, n);
    g_prefix[n] = '\0';
}

bool guard_range(const void* data, size_t size, const std::string& line)
{
    if (!data || !size)
        return false;
    install_handler();
    uintptr_t lo = reinterpret_cast<uintptr_t>(data);
    std::string full = line;
    if (full.empty() || full.back() != '\n')
        full += '\n';
    return claim(lo, lo + size, full.data(), full.size(), 0);
}

void guard_alias(const void* data, size_t size, const void* original)
{
    const GuardSlot* s = find_slot(reinterpret_cast<uintptr_t>(original));
    if (!s || !data || !size)
        return;
    uintptr_t lo = reinterpret_cast<uintptr_t>(data);
    claim(lo, lo + size, s->line, s->len, s->prefix_len);
}

void unguard_range(const void* data, size_t size)
{
    uintptr_t lo = reinterpret_cast<uintptr_t>(data), hi = lo + size;
    int n = g_used.load(std::memory_order_acquire);
    for (int i = 0; i < n && i < kMaxGuardedRanges; i++) {
        GuardSlot& s = g_slots[i];
        int expected = 2;
        if (s.state.load(std::memory_order_acquire) != 2 || s.lo < lo || s.hi > hi)
            continue;
        if (s.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel))
            s.state.store(0, std::memory_order_release);
    }
}

void exit_if_mapped_fault(const void* addr, int fd)
{
    const GuardSlot* s = find_slot(reinterpret_cast<uintptr_t>(addr));
    if (!s)
        return;
    put_all(fd, s->line, s->len);
    _exit(kExitFileChanged);
}

std::string mapped_fault_message(const void* addr)
{
    const GuardSlot* s = find_slot(reinterpret_cast<uintptr_t>(addr));
    if (!s || s->len <= s->prefix_len)
        return "a mapped file changed while being read (it was truncated or rewritten by another program)";
    return std::string(s->line + s->prefix_len, s->len - s->prefix_len - 1);
}

bool guarded_read(void (*fn)(void*), void* arg, const void** fault_addr)
{
    sigjmp_buf here;
    sigjmp_buf* outer = g_jump;
    if (sigsetjmp(here, 1) != 0) {
        g_jump = outer;
        if (fault_addr)
            *fault_addr = g_fault_addr;
        return false;
    }
    g_jump = &here;
    fn(arg);
    g_jump = outer;
    return true;
}

void MappedFile::guard(const std::string& display, const char* what)
{
    std::string msg = std::string(what) + " " + display
        + " changed while being read (it was truncated or rewritten by another program); run again once it is complete";
    std::string line = std::string(g_prefix) + msg + "\n";
    if (!data_ || !size_)
        return;
    install_handler();
    uintptr_t lo = reinterpret_cast<uintptr_t>(data_);
    claim(lo, lo + size_, line.data(), line.size(), std::strlen(g_prefix));
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_)
    , size_(other.size_)
{
    other.data_ = nullptr;
    other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept
{
    if (this != &other) {
        reset();
        data_ = other.data_;
        size_ = other.size_;
        other.data_ = nullptr;
        other.size_ = 0;
    }
    return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() noexcept
{
    if (data_) {
        unguard_range(data_, size_);
        munmap(const_cast<uint8_t*>(data_), size_);
    }
    data_ = nullptr;
    size_ = 0;
}

MappedFile MappedFile::map_fd(int fd, const std::string& display, uint64_t max_bytes, const char* what)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        fail(WRP_ERR_INVALID_FILE, "cannot stat %s %s: %s", what, display.c_str(), std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        fail(WRP_ERR_INVALID_FILE, "%s %s is %s; a regular file is required", what, display.c_str(),
             file_kind(st.st_mode));
    }
    if (st.st_size <= 0) {
        close(fd);
        fail(WRP_ERR_INVALID_FILE, "%s %s is empty (0 bytes)", what, display.c_str());
    }
    if (static_cast<uint64_t>(st.st_size) > max_bytes) {
        close(fd);
        fail(WRP_ERR_INVALID_FILE, "%s %s is %llu bytes, larger than the limit of %llu bytes", what, display.c_str(),
             static_cast<unsigned long long>(st.st_size), static_cast<unsigned long long>(max_bytes));
    }
    size_t size = static_cast<size_t>(st.st_size);
    // MAP_SHARED (read-only, so no different for reading): a .wrpk image can then map
    // these pages a second time (mremap in wrpk_blobs.cpp) instead of copying them.
    void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED && (err == ENOMEM || err == EAGAIN))  // the file is fine: the address space is not
        fail_out_of_memory(size, "out of memory on the host: cannot map %s %s (%zu bytes): %s", what,
             display.c_str(), size, std::strerror(err));
    if (p == MAP_FAILED)
        fail(WRP_ERR_INVALID_FILE, "cannot map %s %s: %s", what, display.c_str(), std::strerror(err));
    MappedFile m;
    m.data_ = static_cast<const uint8_t*>(p);
    m.size_ = size;
    m.guard(display, what);
    return m;
}

MappedFile MappedFile::open(const std::string& path, uint64_t max_bytes, const char* what, bool follow)
{
    int fd = ::open(path.c_str(), O_RDONLY | (follow ? 0 : O_NOFOLLOW) | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        fail_open(path, what, errno);
    return map_fd(fd, path, max_bytes, what);
}

MappedFile MappedFile::open_at(int dirfd, const std::string& name, const std::string& display, uint64_t max_bytes,
                               const char* what)
{
    int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        fail_open(display, what, errno);
    return map_fd(fd, display, max_bytes, what);
}

int open_directory(const std::string& path, const char* what, const std::string& fix)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    int err = errno;
    if (err == ENOTDIR)
        fail(WRP_ERR_INVALID_FILE, "%s %s is not a directory. %s", what, path.c_str(), fix.c_str());
    fail(WRP_ERR_INVALID_FILE, "cannot open %s %s: %s. %s", what, path.c_str(), std::strerror(err), fix.c_str());
}

bool is_shared_mapping(const void* data, size_t size)
{
    // /proc/self/maps: "start-end perms offset dev inode path", perms like "r--s".
    FILE* maps = std::fopen("/proc/self/maps", "re");
    if (!maps)
        return false;
    uintptr_t begin = reinterpret_cast<uintptr_t>(data), end = begin + size;
    bool shared = false;
    char line[512];
    while (std::fgets(line, sizeof line, maps)) {
        uintptr_t lo = 0, hi = 0;
        char perms[5] = {};
        if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s", &lo, &hi, perms) != 3)
            continue;
        if (lo <= begin && begin < hi) {
            shared = perms[3] == 's' && end <= hi && end >= begin;
            break;
        }
        if (!std::strchr(line, '\n'))  // a long path: skip the rest of this line
            for (int c = std::fgetc(maps); c != EOF && c != '\n'; c = std::fgetc(maps)) {
            }
    }
    std::fclose(maps);
    return shared;
}

}  // namespace wrp
