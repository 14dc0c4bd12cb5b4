// npy_io.h -- NumPy .npy files (format versions 1.0, 2.0 and 3.0), read and
// written without NumPy.
//
// Only plain little-endian numeric dtypes and raw void bytes are accepted:
// object, string, datetime, structured and big-endian dtypes are refused, as
// are Fortran-ordered arrays unless their memory order is also C order.
#pragma once

#include <functional>
#include <memory>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace wrpcli {

struct NpyDtype {
    char kind = 'u';    // 'b', 'i', 'u', 'f', 'c' or 'V'
    uint32_t size = 1;  // bytes per element
    std::string descr() const;  // e.g. "<f4", "|u1", "|V12"
};

struct NpyArray {
    NpyDtype dtype;
    std::vector<uint64_t> shape;
    // The data, C order: `size` bytes at `bytes`, in the file's read-only mapping (`mapping` keeps it;
    // no copy of a large input) or, where the file cannot be mapped, in `copy`.
    const uint8_t* bytes = nullptr;
    size_t size = 0;
    std::shared_ptr<const void> mapping;
    std::vector<uint8_t> copy;
};

// Read `path`.  `expected_bytes` is the data size the caller needs: a file
// whose data is any other size is refused before its data is read.  Throws
// CliError(kExitUsage) naming the file.
// `check_header`, when given, sees the array's dtype and shape (no data yet) before the size is
// compared with `expected_bytes`: a wrong dtype is then named as such, not as a byte count.
NpyArray read_npy(const std::string& path, uint64_t expected_bytes,
                  const std::function<void(const NpyArray&)>& check_header = nullptr);

// Write atomically: a temporary file in the same directory, fsync, rename.
// Throws CliError(kExitRuntime) on I/O failure.
// Before any long work: create the missing parent folders of an output and check, with a real
// temporary file, that the folder takes new files (CliError, exit 1, when not).
void prepare_output(const std::string& path);

// True for "/dev/fd/N": an open file the caller passed (wrp's memory files), which
// write_npy_atomic writes in place and no one reads unless the run succeeds.
bool is_passed_fd(const std::string& path);

void write_npy_atomic(const std::string& path, const NpyDtype& dtype, const std::vector<uint64_t>& shape,
                      const uint8_t* data, size_t size);

// write(2) until all `n` bytes are written, retrying on EINTR; false on any
// other failure.  Async-signal-safe (the timeout handler uses it).
bool write_all(int fd, const void* data, size_t n);

// "(8,)", "(2, 3)", "()" -- as NumPy prints shapes.
std::string shape_string(const std::vector<uint64_t>& shape);

}  // namespace wrpcli
