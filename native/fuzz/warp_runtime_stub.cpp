// warp_runtime_stub.cpp -- stands in for warp_runtime.cpp in the fuzz targets.
//
// The fuzzers open every input with validate_only, which never reaches Warp;
// this stub makes that a guarantee: entering the Warp runtime aborts the
// fuzzer (a finding), and no warp.so can ever be loaded by these binaries.
#include <cstdio>
#include <cstdlib>

#include "warp_runtime.h"

namespace wrp {

FairMutex& warp_mutex()
{
    static FairMutex m;
    return m;
}

WarpRuntime& WarpRuntime::acquire(const std::string&, bool, bool)
{
    std::fprintf(stderr, "fuzz target: the Warp runtime was entered; fuzz targets must only validate\n");
    std::abort();
}

std::string WarpRuntime::error_string() const { return ""; }

}  // namespace wrp
