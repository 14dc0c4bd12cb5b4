// host_memory.cpp -- see host_memory.h: MemAvailable, the memory cgroup's room (v1 and v2, the
// cgroup and its ancestors) and RLIMIT_AS, as wrpkit.limits.host_memory reads them.
#include "host_memory.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>

namespace wrp {
namespace {

bool read_text(const std::string& path, std::string& out)
{
    std::ifstream f(path);
    if (!f)
        return false;
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    while (!all.empty() && std::isspace(static_cast<unsigned char>(all.back())))
        all.pop_back();
    out = all;
    return true;
}

bool read_u64(const std::string& path, uint64_t& v)
{
    std::string t;
    if (!read_text(path, t) || t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 19)
        return false;
    v = std::stoull(t);
    return true;
}

uint64_t stat_key(const std::string& path, const std::string& key)
{
    std::ifstream f(path);
    std::string k;
    uint64_t v = 0;
    while (f >> k >> v)
        if (k == key)
            return v;
    return 0;
}

std::string size_text(uint64_t n)
{
    const char* units[] = {"TiB", "GiB", "MiB", "KiB"};
    int shifts[] = {40, 30, 20, 10};
    for (int i = 0; i < 4; i++)
        if (n >= (uint64_t(1) << shifts[i])) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "%.1f %s (%llu bytes)", double(n) / double(uint64_t(1) << shifts[i]),
                          units[i], static_cast<unsigned long long>(n));
            return buf;
        }
    return std::to_string(n) + " bytes";
}

// The tightest memory cgroup limit: found from /proc/self/cgroup and /proc/self/mountinfo.
bool cgroup_room(uint64_t& limit_out, uint64_t& usage_out, std::string& folder_out)
{
    std::map<std::string, std::string> paths;
    {
        std::ifstream f("/proc/self/cgroup");
        std::string line;
        while (std::getline(f, line)) {
            size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
            if (b == std::string::npos)
                continue;
            std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
            paths[ctrls] = path;
            size_t at = 0;
            while (at <= ctrls.size()) {
                size_t comma = ctrls.find(',', at);
                std::string c = ctrls.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
                paths.emplace(c, path);
                if (comma == std::string::npos)
                    break;
                at = comma + 1;
            }
        }
    }
    struct Dir { int version; std::string folder, point; };
    std::vector<Dir> dirs;
    {
        std::ifstream f("/proc/self/mountinfo");
        std::string line;
        while (std::getline(f, line)) {
            size_t sep = line.find(" - ");
            if (sep == std::string::npos)
                continue;
            std::istringstream left(line.substr(0, sep)), right(line.substr(sep + 3));
            std::string id, parent, dev, root, point, fstype, source, opts;
            if (!(left >> id >> parent >> dev >> root >> point) || !(right >> fstype >> source >> opts))
                continue;
            int version = 0;
            std::string path;
            if (fstype == "cgroup2" && paths.count("")) {
                version = 2;
                path = paths[""];
            } else if (fstype == "cgroup" && ("," + opts + ",").find(",memory,") != std::string::npos &&
                       paths.count("memory")) {
                version = 1;
                path = paths["memory"];
            } else {
                continue;
            }
            std::string folder = point;
            if (path.compare(0, root.size(), root) == 0) {
                std::string rel = path.substr(root.size());
                while (!rel.empty() && rel.front() == '/')
                    rel.erase(0, 1);
                while (!rel.empty() && rel.back() == '/')
                    rel.pop_back();
                if (!rel.empty())
                    folder = point + "/" + rel;
            }
            struct stat st;
            if (stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
                folder = point;  // another cgroup namespace: the mount's root is ours
            dirs.push_back({version, folder, point});
        }
    }
    std::stable_sort(dirs.begin(), dirs.end(), [](const Dir& a, const Dir& b) { return a.version > b.version; });
    for (const Dir& d : dirs) {
        bool found = false;
        uint64_t best_room = 0;
        std::string at = d.folder;
        for (;;) {
            uint64_t limit = 0, usage = 0;
            bool v2 = d.version == 2;
            if (read_u64(at + (v2 ? "/memory.max" : "/memory.limit_in_bytes"), limit) &&
                read_u64(at + (v2 ? "/memory.current" : "/memory.usage_in_bytes"), usage) &&
                limit < (uint64_t(1) << 60)) {
                uint64_t inactive = stat_key(at + "/memory.stat", v2 ? "inactive_file" : "total_inactive_file");
                usage = usage > inactive ? usage - inactive : 0;
                uint64_t room = limit > usage ? limit - usage : 0;
                if (!found || room < best_room) {
                    found = true;
                    best_room = room;
                    limit_out = limit;
                    usage_out = usage;
                    folder_out = at;
                }
            }
            if (at.size() <= d.point.size())
                break;
            size_t slash = at.rfind('/');
            if (slash == std::string::npos || slash < d.point.size())
                at = d.point;
            else
                at = at.substr(0, slash);
        }
        if (found)
            return true;
    }
    return false;
}

}  // namespace

HostMemory host_memory()
{
    HostMemory h;
    uint64_t meminfo = 0;
    bool have_meminfo = false;
    {
        std::ifstream f("/proc/meminfo");
        std::string key, unit;
        uint64_t kb = 0;
        while (f >> key >> kb >> unit)
            if (key == "MemAvailable:") {
                meminfo = kb * 1024;
                have_meminfo = true;
                break;
            }
    }
    if (have_meminfo) {
        h.available = meminfo;
        h.known = true;
    }
    uint64_t limit = 0, usage = 0;
    std::string folder;
    if (cgroup_room(limit, usage, folder)) {
        uint64_t room = limit > usage ? limit - usage : 0;
        if (!h.known || room < h.available) {
            h.available = room;
            h.known = true;
            h.bound = "the memory cgroup " + folder + " limit of " + size_text(limit) + ", of which " +
                      size_text(usage) + " is in use";
        }
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t used = 0;
        std::ifstream f("/proc/self/status");
        std::string line;
        while (std::getline(f, line))
            if (line.compare(0, 7, "VmSize:") == 0) {
                used = std::strtoull(line.c_str() + 7, nullptr, 10) * 1024;
                break;
            }
        uint64_t cap = rl.rlim_cur, room = cap > used ? cap - used : 0;
        if (!h.known || room <= h.available) {
            h.available = room;
            h.known = true;
            h.bound = "the address-space limit (ulimit -v, RLIMIT_AS) of " + size_text(cap) +
                      ", of which this process uses " + size_text(used);
        }
    }
    return h;
}

}  // namespace wrp
