// fuzz_wrp1.cpp -- libFuzzer target: the input is the bytes of a .wrp.
//
// Runs the WRP1 parser and validator (header, section table, metadata,
// memory, operations, annotations) with semantic checks on and then off, as
// wrp_program_open_memory(validate_only) does for an in-memory .wrp.  No
// module files are given, so a file that passes validation then fails on its
// first missing module: module ELF checks are fuzzed through fuzz_wrpk.
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size == 0)
        return 0;
    wrpfuzz::open_and_check(data, size, nullptr, 0, /*skip_checks=*/false, /*verify_checksums=*/true);
    wrpfuzz::open_and_check(data, size, nullptr, 0, /*skip_checks=*/true, /*verify_checksums=*/true);
    return 0;
}
