#include "worker/termination_message.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

namespace tessera::worker {

std::string TerminationMessagePath() {
  if (const char* path = std::getenv("TESSERA_TERMINATION_MESSAGE_PATH");
      path != nullptr && *path != '\0') {
    return path;
  }
  struct stat st {};
  if (::stat("/dev/termination-log", &st) == 0 && S_ISREG(st.st_mode))
    return "/dev/termination-log";
  return "";
}

void WriteTerminationMessage(const std::string& message) {
  constexpr size_t kMaxBytes = 4096;
  const std::string path = TerminationMessagePath();
  if (path.empty())
    return;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_size > 0)
    return;  // an earlier failure of this container said it first
  std::ofstream out(path, std::ios::trunc);
  out << message.substr(0, kMaxBytes);
}

}  // namespace tessera::worker
