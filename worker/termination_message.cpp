#include "worker/termination_message.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>

#include "api/progress.h"

namespace tessera::worker {
namespace {

// What the kubelet reads of the file.
constexpr size_t kMaxBytes = 4096;

// Rewrites the message file as `change` says (it returns nullopt to leave the file alone),
// under an exclusive lock: the ranks of a pod and their agent share the file, and a message
// and rank 0's progress line must not overwrite each other. Best effort.
void Update(
    const std::function<std::optional<std::string>(const api::TerminationMessage&)>& change) {
  const std::string path = TerminationMessagePath();
  if (path.empty())
    return;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  // A filesystem that cannot lock still gets the message, unlocked.
  (void)::flock(fd, LOCK_EX);
  std::string current;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      current.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      ::close(fd);  // what is there could not be read: rewriting it could lose it
      return;
    }
  }
  if (std::optional<std::string> next = change(api::SplitTerminationMessage(current));
      next && ::ftruncate(fd, 0) == 0) {
    size_t written = 0;
    while (written < next->size()) {
      const ssize_t w =
          ::pwrite(fd, next->data() + written, next->size() - written, static_cast<off_t>(written));
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        break;
      written += static_cast<size_t>(w);
    }
  }
  ::close(fd);  // releases the lock
}

}  // namespace

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
  Update([&](const api::TerminationMessage& current) -> std::optional<std::string> {
    if (!current.text.empty())
      return std::nullopt;  // an earlier failure of this container said it first
    return api::JoinTerminationMessage(message, current.progress_json, kMaxBytes);
  });
}

void WriteFinalProgressMessage(const std::string& progress_json) {
  Update([&](const api::TerminationMessage& current) -> std::optional<std::string> {
    return api::JoinTerminationMessage(current.text, progress_json, kMaxBytes);
  });
}

}  // namespace tessera::worker
