// locate_from_executable.cpp -- Warp's directory relative to wrp-replay.
//
// Installed as <prefix>/bin/wrp-replay (or site-packages/wrpkit/_native/bin),
// the executable finds warp-lang's warp/bin at WRP_WARP_RELATIVE_DIRS (set by
// CMake, e.g. "../lib/python3.11/site-packages/warp/bin:../../../warp/bin").
#include <climits>
#include <unistd.h>

#include "warp_runtime.h"

#ifndef WRP_WARP_RELATIVE_DIRS
#define WRP_WARP_RELATIVE_DIRS ""
#endif

namespace wrp {

std::vector<std::string> builtin_warp_dirs()
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return {};
    return dirs_relative_to(std::string(buf, static_cast<size_t>(n)), WRP_WARP_RELATIVE_DIRS);
}

}  // namespace wrp
