// How much memory this process can still have: read from the kernel before training starts, so
// a configuration that cannot fit is refused with its numbers instead of failing an allocation
// (or being killed) in the first step.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera::train {

// MemAvailable plus SwapFree of a /proc/meminfo text, in bytes; nullopt without MemAvailable.
std::optional<int64_t> ParseMeminfoAvailable(std::string_view meminfo);

// The room a cgroup v2 memory limit leaves: memory.max minus memory.current, in bytes (0 when
// the group is already over its limit); nullopt when memory.max is "max" (no limit) or either
// text is not a number.
std::optional<int64_t> CgroupRoom(std::string_view memory_max, std::string_view memory_current);

// What this process can still allocate, in bytes: /proc/meminfo's available memory and swap,
// bounded by the room the process's cgroup (/sys/fs/cgroup, as a container sees its own) leaves.
// nullopt when /proc/meminfo cannot be read.
std::optional<int64_t> AvailableMemoryBytes();

}  // namespace tessera::train
