// mapped_file.cpp -- see mapped_file.h.
#include "mapped_file.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
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
    fail(WRP_ERR_INVALID_FILE, "cannot open %s %s: %s", what, display.c_str(), std::strerror(err));
}

}  // namespace

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
    if (data_)
        munmap(const_cast<uint8_t*>(data_), size_);
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
    // these pages a second time (mremap in wrpk_reader.cpp) instead of copying them.
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
