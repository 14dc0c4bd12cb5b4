// sha256.h -- SHA-256 (FIPS 180-4), used to check module files against the
// digests wrpkit records in a capture's annotations and a .wrpk's blobs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wrp {

// On x86 CPUs with the SHA extensions this runs on them; elsewhere portably.
void sha256(const uint8_t* data, size_t size, uint8_t out[32]);
// Always the portable code (tests compare the two).
void sha256_portable(const uint8_t* data, size_t size, uint8_t out[32]);
// Whether sha256() runs on the CPU's SHA extensions.
bool sha256_uses_cpu_extensions();
std::string to_hex(const uint8_t* bytes, size_t n);

}  // namespace wrp
