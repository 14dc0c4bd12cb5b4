// npy_io.cpp -- see npy_io.h.  The header is a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (8,), }; a tiny parser
// for exactly that grammar is enough and keeps Python out of the picture.
#include "npy_io.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_error.h"

namespace wrpcli {
namespace {

const char kMagic[] = "\x93NUMPY";
constexpr uint32_t kMaxHeaderBytes = 1u << 20;

[[noreturn]] void bad(const std::string& path, const std::string& what)
{
    throw CliError(kExitUsage, "input " + path + ": " + what);
}

// Parser of the header dict.
class HeaderParser {
public:
    HeaderParser(const std::string& text, const std::string& path)
        : s_(text)
        , path_(path)
    {
    }

    void parse(std::string& descr, bool& fortran, std::vector<uint64_t>& shape)
    {
        bool have_descr = false, have_fortran = false, have_shape = false;
        expect('{');
        while (true) {
            skip_space();
            if (peek() == '}') {
                pos_++;
                break;
            }
            std::string key = string_literal();
            expect(':');
            skip_space();
            if (key == "descr") {
                if (peek() == '[')
                    bad(path_, "structured dtypes are not supported; save a plain numeric array");
                descr = string_literal();
                have_descr = true;
            } else if (key == "fortran_order") {
                fortran = boolean();
                have_fortran = true;
            } else if (key == "shape") {
                shape = tuple();
                have_shape = true;
            } else {
                bad(path_, "unexpected header key '" + key + "'");
            }
            skip_space();
            if (peek() == ',')
                pos_++;
            else if (peek() != '}')
                bad(path_, "malformed header dict");
        }
        skip_space();
        if (pos_ != s_.size())
            bad(path_, "trailing characters after the header dict");
        if (!have_descr || !have_fortran || !have_shape)
            bad(path_, "header lacks descr, fortran_order or shape");
    }

private:
    char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
    void skip_space()
    {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t'))
            pos_++;
    }
    void expect(char c)
    {
        skip_space();
        if (peek() != c)
            bad(path_, std::string("malformed header: expected '") + c + "'");
        pos_++;
    }
    std::string string_literal()
    {
        skip_space();
        char q = peek();
        if (q != '\'' && q != '"')
            bad(path_, "malformed header: expected a string");
        size_t end = s_.find(q, pos_ + 1);
        if (end == std::string::npos)
            bad(path_, "malformed header: unterminated string");
        std::string v = s_.substr(pos_ + 1, end - pos_ - 1);
        pos_ = end + 1;
        return v;
    }
    bool boolean()
    {
        if (s_.compare(pos_, 4, "True") == 0) {
            pos_ += 4;
            return true;
        }
        if (s_.compare(pos_, 5, "False") == 0) {
            pos_ += 5;
            return false;
        }
        bad(path_, "malformed header: fortran_order is not True or False");
    }
    std::vector<uint64_t> tuple()
    {
        std::vector<uint64_t> v;
        expect('(');
        while (true) {
            skip_space();
            if (peek() == ')') {
                pos_++;
                return v;
            }
            if (peek() < '0' || peek() > '9')
                bad(path_, "malformed header: shape entries must be non-negative integers");
            uint64_t n = 0;
            while (peek() >= '0' && peek() <= '9') {
                if (n > (UINT64_MAX - 9) / 10)
                    bad(path_, "shape entry is too large");
                n = n * 10 + uint64_t(s_[pos_++] - '0');
                // A trailing 'L' is how Python 2 wrote longs.
            }
            if (peek() == 'L')
                pos_++;
            v.push_back(n);
            if (v.size() > 32)
                bad(path_, "more than 32 dimensions");
            skip_space();
            if (peek() == ',')
                pos_++;
            else if (peek() != ')')
                bad(path_, "malformed shape tuple");
        }
    }

    const std::string& s_;
    const std::string& path_;
    size_t pos_ = 0;
};

NpyDtype parse_descr(const std::string& descr, const std::string& path)
{
    if (descr.size() < 3)
        bad(path, "unsupported dtype '" + descr + "'");
    char order = descr[0];
    char kind = descr[1];
    std::string digits = descr.substr(2);
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos)
        bad(path, "unsupported dtype '" + descr + "'");
    NpyDtype d;
    d.kind = kind;
    d.size = static_cast<uint32_t>(std::stoul(digits));
    if (kind == 'O')
        bad(path, "object arrays are not supported");
    bool ok = false;
    switch (kind) {
    case 'b': ok = d.size == 1; break;
    case 'i': case 'u': ok = d.size == 1 || d.size == 2 || d.size == 4 || d.size == 8; break;
    case 'f': ok = d.size == 2 || d.size == 4 || d.size == 8; break;
    case 'c': ok = d.size == 8 || d.size == 16; break;
    case 'V': ok = d.size >= 1; break;
    default: break;
    }
    if (!ok)
        bad(path, "dtype '" + descr + "' is not a plain numeric or void dtype");
    if (order == '>' && d.size > 1 && kind != 'V')
        bad(path, "big-endian dtype '" + descr + "' is not supported; save it as little-endian");
    if (order != '<' && order != '|' && order != '=' && order != '>')
        bad(path, "unsupported dtype '" + descr + "'");
    return d;
}

void read_all(int fd, uint8_t* out, size_t n, const std::string& path)
{
    while (n > 0) {
        ssize_t got = ::read(fd, out, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            bad(path, got == 0 ? "file is truncated" : std::string("read failed: ") + std::strerror(errno));
        out += got;
        n -= static_cast<size_t>(got);
    }
}

// 0666 minus the umask, as a plain open() would create (mkstemp uses 0600).
mode_t file_mode()
{
    mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

struct Fd {
    int fd;
    ~Fd()
    {
        if (fd >= 0)
            close(fd);
    }
};

}  // namespace

std::string NpyDtype::descr() const
{
    char order = (size == 1 || kind == 'V') ? '|' : '<';
    return std::string(1, order) + kind + std::to_string(size);
}

bool write_all(int fd, const void* data, size_t n)
{
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

std::string shape_string(const std::vector<uint64_t>& shape)
{
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); i++)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() == 1)
        s += ",";
    return s + ")";
}

NpyArray read_npy(const std::string& path, uint64_t expected_bytes,
                  const std::function<void(const NpyArray&)>& check_header)
{
    Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
    if (f.fd < 0)
        bad(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st;
    if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
        bad(path, "not a regular file");
    uint64_t file_size = static_cast<uint64_t>(st.st_size);
    uint8_t pre[12];
    if (file_size < 10)
        bad(path, "too small to be a .npy file");
    read_all(f.fd, pre, 10, path);
    if (std::memcmp(pre, kMagic, 6) != 0)
        bad(path, "not a .npy file (bad magic)");
    uint8_t major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        bad(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
    uint64_t header_len;
    uint64_t prefix = 10;
    if (major == 1) {
        header_len = uint64_t(pre[8]) | uint64_t(pre[9]) << 8;
    } else {
        if (file_size < 12)
            bad(path, "file is truncated");
        read_all(f.fd, pre + 10, 2, path);
        header_len = uint64_t(pre[8]) | uint64_t(pre[9]) << 8 | uint64_t(pre[10]) << 16 | uint64_t(pre[11]) << 24;
        prefix = 12;
    }
    if (header_len > kMaxHeaderBytes || prefix + header_len > file_size)
        bad(path, "header length " + std::to_string(header_len) + " is invalid");
    std::string header(static_cast<size_t>(header_len), '\0');
    read_all(f.fd, reinterpret_cast<uint8_t*>(&header[0]), header.size(), path);
    if (header.find('\0') != std::string::npos)
        bad(path, "header contains a NUL byte");

    NpyArray a;
    std::string descr;
    bool fortran = false;
    HeaderParser(header, path).parse(descr, fortran, a.shape);
    a.dtype = parse_descr(descr, path);
    uint64_t count = 1;
    size_t big_dims = 0;
    for (uint64_t d : a.shape) {
        if (d != 0 && count > UINT64_MAX / d)
            bad(path, "shape " + shape_string(a.shape) + " is too large");
        count *= d;
        big_dims += d > 1;
    }
    // Fortran order is the same memory order as C order when at most one
    // dimension exceeds 1.
    if (fortran && big_dims > 1)
        bad(path, "Fortran-ordered arrays are not supported; save np.ascontiguousarray(a)");
    if (count > UINT64_MAX / a.dtype.size)
        bad(path, "shape " + shape_string(a.shape) + " is too large");
    uint64_t bytes = count * a.dtype.size;
    if (bytes != file_size - prefix - header_len)
        bad(path, "holds " + std::to_string(file_size - prefix - header_len) + " data bytes, but shape " +
                      shape_string(a.shape) + " of " + a.dtype.descr() + " needs " + std::to_string(bytes));
    if (check_header)
        check_header(a);
    if (bytes != expected_bytes)
        bad(path, "holds " + std::to_string(bytes) + " bytes (" + a.dtype.descr() + " " + shape_string(a.shape) +
                      "), but the binding is " + std::to_string(expected_bytes) + " bytes");
    // Mapped where the file allows it (a regular file, wrp's memory files): the size was checked
    // against the file's above, so the mapping holds every byte the view promises.
    const uint64_t offset = prefix + header_len;
    a.size = static_cast<size_t>(bytes);
    if (bytes) {
        void* p = mmap(nullptr, static_cast<size_t>(file_size), PROT_READ, MAP_PRIVATE, f.fd, 0);
        if (p != MAP_FAILED) {
            size_t length = static_cast<size_t>(file_size);
            a.mapping = std::shared_ptr<const void>(p, [length](const void* q) { munmap(const_cast<void*>(q), length); });
            a.bytes = static_cast<const uint8_t*>(p) + offset;
            return a;
        }
    }
    a.copy.resize(a.size);
    read_all(f.fd, a.copy.data(), a.copy.size(), path);
    a.bytes = a.copy.data();
    return a;
}

// /dev/fd/N: an open file the caller passed (wrp replay hands a memory file), not a path to create.
static int passed_fd(const std::string& path)
{
    if (path.compare(0, 8, "/dev/fd/") != 0 || path.size() <= 8 ||
        path.find_first_not_of("0123456789", 8) != std::string::npos)
        return -1;
    return std::atoi(path.c_str() + 8);
}

bool is_passed_fd(const std::string& path)
{
    return passed_fd(path) >= 0;
}

// A destination that is not a regular file to replace: a character or block device (/dev/null,
// /dev/full), a FIFO or a socket (a symbolic link to one too), or /dev/stdout and /dev/stderr.
// Those are written in place: an atomic rename would replace the device node with a regular file.
static bool is_special_output(const std::string& path)
{
    if (path == "/dev/stdout" || path == "/dev/stderr")
        return true;
    struct stat st;
    return stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

// Write the whole of `head` then `data` to an open destination; false with errno set on failure.
static bool write_npy_to(int fd, const std::string& head, const uint8_t* data, size_t size)
{
    return write_all(fd, head.data(), head.size()) && write_all(fd, data, size);
}

void prepare_output(const std::string& path)
{
    int passed = passed_fd(path);
    if (passed >= 0) {
        if (fcntl(passed, F_GETFD) == -1)
            throw CliError(kExitRuntime, "cannot write " + path + ": file descriptor " + std::to_string(passed) +
                                             " is not open");
        return;  // written in place by write_npy_atomic: no folder to make, nothing to probe
    }
    if (is_special_output(path))
        return;  // a device, FIFO or /dev/stdout: written in place, never replaced
    size_t slash = path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    // Missing parent folders are created, as wrp's commands create them (mkdir -p).
    for (size_t at = 1; at <= dir.size(); at++) {
        if (at != dir.size() && dir[at] != '/')
            continue;
        std::string part = dir.substr(0, at);
        struct stat st;
        if (stat(part.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                throw CliError(kExitRuntime, "cannot write " + path + ": " + part + " is a file, not a folder");
            continue;
        }
        if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
            throw CliError(kExitRuntime, "cannot write " + path + ": cannot create folder " + part + ": " +
                                             std::strerror(errno));
    }
    // A real file, not access(2): root passes access() on a read-only mount.
    std::string probe = dir + "/.wrp-replay-probe.XXXXXX";
    std::vector<char> tmpl(probe.begin(), probe.end());
    tmpl.push_back('\0');
    int fd = mkstemp(tmpl.data());
    if (fd < 0)
        throw CliError(kExitRuntime, "cannot write " + path + ": cannot create a file in " + dir + ": " +
                                         std::strerror(errno));
    close(fd);
    unlink(tmpl.data());
}

void write_npy_atomic(const std::string& path, const NpyDtype& dtype, const std::vector<uint64_t>& shape,
                      const uint8_t* data, size_t size)
{
    std::string dict = "{'descr': '" + dtype.descr() + "', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
    // Pad with spaces so that magic + length + header is a multiple of 64, as
    // NumPy does; version 2.0 only when the header does not fit a u16 length.
    bool v2 = dict.size() + 1 + 10 > 65535;
    size_t prefix = v2 ? 12 : 10;
    size_t total = prefix + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    dict += '\n';
    std::string head(kMagic, 6);
    head += static_cast<char>(v2 ? 2 : 1);
    head += '\0';
    uint32_t len = static_cast<uint32_t>(dict.size());
    for (size_t i = 0; i < (v2 ? 4u : 2u); i++)
        head += static_cast<char>((len >> (8 * i)) & 0xff);
    head += dict;

    // /dev/fd/N: an open file the caller passed.  A memory file (wrp replay's) is written from its
    // start; a pipe or a device as it comes.
    if (int fd = passed_fd(path); fd >= 0) {
        struct stat st;
        bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
        bool ok = (!regular || (ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0)) &&
            write_npy_to(fd, head, data, size);
        if (!ok)
            throw CliError(kExitRuntime, "cannot write " + path + ": " + std::strerror(errno));
        return;
    }
    // A device, a FIFO or /dev/stdout: opened as it is (no O_CREAT, no O_TRUNC) and written in place.
    if (is_special_output(path)) {
        // A FIFO whose reader left: EPIPE, an error naming the path, not death by SIGPIPE (which
        // is held while writing and the one it raised taken back).
        sigset_t pipe_set, old_set;
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
        int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        bool ok = fd >= 0 && write_npy_to(fd, head, data, size);
        int err = errno;
        if (fd >= 0 && close(fd) != 0 && ok) {
            ok = false;
            err = errno;
        }
        struct timespec now = {0, 0};
        while (sigtimedwait(&pipe_set, nullptr, &now) == SIGPIPE) {
        }
        pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
        if (!ok)
            throw CliError(kExitRuntime, "cannot write " + path + ": " + std::strerror(err) +
                                             (err == EPIPE ? " (its reader closed it before the end)" : ""));
        return;
    }
    size_t slash = path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    std::string tmp = dir + "/." + base + ".tmp.XXXXXX";
    std::vector<char> tmpl(tmp.begin(), tmp.end());
    tmpl.push_back('\0');
    int fd = mkstemp(tmpl.data());
    if (fd < 0)
        throw CliError(kExitRuntime, "cannot write " + path + ": cannot create a file in " + dir + ": " +
                                         std::strerror(errno));
    std::string tmp_path(tmpl.data());
    bool ok = write_all(fd, head.data(), head.size()) && write_all(fd, data, size)
        && fchmod(fd, file_mode()) == 0 && fsync(fd) == 0;
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok || rename(tmp_path.c_str(), path.c_str()) != 0) {
        if (ok)
            err = errno;
        unlink(tmp_path.c_str());
        throw CliError(kExitRuntime, "cannot write " + path + ": " + std::strerror(err));
    }
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);  // make the rename itself durable
        close(dfd);
    }
}

}  // namespace wrpcli
