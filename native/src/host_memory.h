// host_memory.h -- how many bytes a new host allocation can take here, and what bounds them (the
// check a CPU load makes before Warp allocates anything: program.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace wrp {

// Bytes a new host allocation can take, and what bounds them (as wrpkit.limits.host_memory, the same
// figures): MemAvailable; the room under this process's memory cgroup (v2 memory.max - memory.current,
// v1 memory.limit_in_bytes - memory.usage_in_bytes, less the inactive page cache of memory.stat, the
// least over the cgroup and its ancestors); and RLIMIT_AS less VmSize. 0 when none is known.
struct HostMemory {
    uint64_t available = 0;
    bool known = false;
    std::string bound;  // words for the figure that set `available`, "" for MemAvailable
};

HostMemory host_memory();

}  // namespace wrp
