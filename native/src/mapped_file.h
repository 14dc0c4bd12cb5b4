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
    void reset() noexcept;

    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// True when [data, data + size) lies in one MAP_SHARED mapping (from /proc/self/maps): a
// caller's buffer whose pages a .wrpk's WRP1 image may map rather than copy.
bool is_shared_mapping(const void* data, size_t size);

// "a directory", "a FIFO", ... for a st_mode that is not a regular file's.
const char* file_kind(unsigned mode);

// Open a directory for openat() (a path the user gave or derived from it: a
// symbolic link to the directory is followed).  Returns the fd or throws
// wrp::Error(WRP_ERR_INVALID_FILE) (`fix` is appended as advice).
int open_directory(const std::string& path, const char* what, const std::string& fix);

}  // namespace wrp
