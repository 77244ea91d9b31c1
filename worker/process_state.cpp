#include "worker/process_state.h"

#include <fstream>

namespace tessera::worker {

std::string KernelState(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::string state = "state unknown";
  if (std::ifstream stat(proc + "/stat"); stat) {
    std::string line;
    std::getline(stat, line);
    // "pid (comm) S ...": comm may hold spaces and parentheses, so read after the last ')'.
    const size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size())
      state = std::string("state ") + line[close + 2];
  }
  if (std::ifstream wchan(proc + "/wchan"); wchan) {
    std::string where;
    std::getline(wchan, where);
    if (!where.empty() && where != "0")
      state += ", in " + where;
  }
  return state;
}

}  // namespace tessera::worker
