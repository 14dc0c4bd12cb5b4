// fuzz_wrpk.cpp -- libFuzzer target: the input is the bytes of a .wrpk.
//
// Each input is opened twice with wrp_program_open_memory(validate_only):
//   1. as it is, blob checksums verified: the header checks, the manifest's
//      SHA-256, and for intact bundles everything below;
//   2. with the header's manifest SHA-256 recomputed over the (mutated)
//      manifest and blob checksums off, so that mutations reach the
//      FlatBuffer verifier, the manifest rules, the blob layout, the rebuilt
//      WRP1 image's validation and the module ELF checks instead of all
//      stopping at the checksum.
// The second run decodes from an odd address, which also exercises the
// aligned copy of the manifest.
#include <cstring>

#include "fuzz_common.h"
#include "sha256.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size == 0)
        return 0;
    wrpfuzz::open_and_check(data, size, nullptr, 0, false, true);

    std::vector<uint8_t> copy(size + 1);
    std::memcpy(copy.data() + 1, data, size);
    uint8_t* bytes = copy.data() + 1;  // odd address
    if (size >= 128 && std::memcmp(bytes, "WRPK", 4) == 0) {
        uint64_t msize;
        std::memcpy(&msize, bytes + 24, 8);
        if (msize <= size - 128)
            wrp::sha256(bytes + 128, static_cast<size_t>(msize), bytes + 48);
    }
    wrpfuzz::open_and_check(bytes, size, nullptr, 0, false, false);
    return 0;
}
