// locate_from_library.cpp -- Warp's directory relative to libwrp_replay.so.
//
// Installed as site-packages/wrpkit/_native/lib/libwrp_replay.so, the library
// finds warp-lang's site-packages/warp/bin at WRP_WARP_RELATIVE_DIRS (set by
// CMake: "../../../warp/bin").
#include <dlfcn.h>

#include "warp_runtime.h"

#ifndef WRP_WARP_RELATIVE_DIRS
#define WRP_WARP_RELATIVE_DIRS ""
#endif

namespace wrp {

std::vector<std::string> builtin_warp_dirs()
{
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&builtin_warp_dirs), &info) || !info.dli_fname)
        return {};
    return dirs_relative_to(info.dli_fname, WRP_WARP_RELATIVE_DIRS);
}

}  // namespace wrp
