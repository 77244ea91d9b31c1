#include "worker/train/memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::train {
namespace {

std::optional<int64_t> ParseInt(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.remove_suffix(1);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return std::nullopt;
  return v;
}

// The value of a "Key:   1234 kB" line, in bytes.
std::optional<int64_t> MeminfoField(std::string_view meminfo, std::string_view key) {
  std::istringstream in{std::string(meminfo)};
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ':')
      continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t kib = 0;
    if (fields >> kib)
      return kib * 1024;
  }
  return std::nullopt;
}

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<int64_t> ParseMeminfoAvailable(std::string_view meminfo) {
  const std::optional<int64_t> available = MeminfoField(meminfo, "MemAvailable");
  if (!available)
    return std::nullopt;
  return *available + MeminfoField(meminfo, "SwapFree").value_or(0);
}

std::optional<int64_t> CgroupRoom(std::string_view memory_max, std::string_view memory_current) {
  const std::optional<int64_t> max = ParseInt(memory_max);
  const std::optional<int64_t> current = ParseInt(memory_current);
  if (!max || !current)
    return std::nullopt;
  return std::max<int64_t>(0, *max - *current);
}

std::optional<int64_t> AvailableMemoryBytes() {
  std::optional<int64_t> available = ParseMeminfoAvailable(ReadFile("/proc/meminfo"));
  if (!available)
    return std::nullopt;
  if (const std::optional<int64_t> room = CgroupRoom(ReadFile("/sys/fs/cgroup/memory.max"),
                                                     ReadFile("/sys/fs/cgroup/memory.current"))) {
    available = std::min(*available, *room);
  }
  return available;
}

}  // namespace tessera::train
