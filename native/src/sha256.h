// sha256.h -- SHA-256 (FIPS 180-4), used to check module files against the
// digests wrpkit records in a capture's annotations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wrp {

void sha256(const uint8_t* data, size_t size, uint8_t out[32]);
std::string to_hex(const uint8_t* bytes, size_t n);

}  // namespace wrp
