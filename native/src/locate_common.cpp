// locate_common.cpp -- shared part of the two builtin_warp_dirs() variants.
#include <filesystem>

#include "warp_runtime.h"

namespace wrp {

std::vector<std::string> dirs_relative_to(const std::string& binary_path, const std::string& relative_dirs)
{
    std::filesystem::path base = std::filesystem::path(binary_path).parent_path();
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= relative_dirs.size()) {
        size_t end = relative_dirs.find(':', start);
        if (end == std::string::npos)
            end = relative_dirs.size();
        if (end > start)
            out.push_back((base / relative_dirs.substr(start, end - start)).lexically_normal().string());
        start = end + 1;
    }
    return out;
}

}  // namespace wrp
