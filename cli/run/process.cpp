#include "cli/run/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>

namespace tessera::cli {

pid_t StartProcessGroup(const ProcessSpec& spec, std::string* error) {
  if (spec.argv.empty()) {
    *error = "no command to run";
    return -1;
  }
  const int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    *error = spec.log_path + ": cannot open the log file: " + std::strerror(errno);
    return -1;
  }
  // Everything the child needs is prepared before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [key, value] : spec.env)
      overridden = overridden || key == name;
    if (!overridden)
      env_strings.push_back(entry);
  }
  for (const auto& [key, value] : spec.env)
    env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& s : env_strings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (std::string& s : args)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  // SIGTERM and SIGINT wait until the child handles them itself: one that came between fork
  // and exec would run the runner's handler there and be lost.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  ::sigprocmask(SIG_BLOCK, &stop_signals, &old_mask);
  const pid_t pid = ::fork();
  if (pid != 0)
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) {
    *error = std::string("fork failed: ") + std::strerror(errno);
    ::close(log_fd);
    return -1;
  }
  if (pid == 0) {
    if (spec.in_child_after_fork)
      spec.in_child_after_fork();
    ::setpgid(0, 0);
    if (spec.inherited_fd >= 0)
      ::fcntl(spec.inherited_fd, F_SETFD, 0);  // no FD_CLOEXEC: kept across exec
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent)
      ::_exit(128 + SIGTERM);  // the runner died before prctl took effect
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0)
      ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    const char* why = std::strerror(errno);
    const char prefix[] = "tessera run: cannot execute ";
    (void)!::write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
    (void)!::write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
    (void)!::write(STDERR_FILENO, ": ", 2);
    (void)!::write(STDERR_FILENO, why, std::strlen(why));
    (void)!::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  // Also set the group from the parent, so that signalling -pid works even before the child
  // has run (both calls racing is harmless).
  ::setpgid(pid, pid);
  ::close(log_fd);
  return pid;
}

void SignalProcessGroup(pid_t pgid, int signal) {
  if (pgid <= 0)
    return;
  ::kill(-pgid, signal);
  if (signal != SIGKILL)
    ::kill(-pgid, SIGCONT);
}

bool ProcessGroupExists(pid_t pgid) {
  return pgid > 0 && (::kill(-pgid, 0) == 0 || errno == EPERM);
}

void BecomeSubreaper() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

std::vector<ReapedChild> ReapExitedChildren() {
  std::vector<ReapedChild> exited;
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
      break;
    if (WIFEXITED(status)) {
      exited.push_back({pid, WEXITSTATUS(status), false});
    } else if (WIFSIGNALED(status)) {
      exited.push_back({pid, 128 + WTERMSIG(status), true});
    }
  }
  return exited;
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

bool PortIsFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return free;
}

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::ifstream in("/dev/urandom", std::ios::binary);
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes));
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : raw) {
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  return hex;
}

std::vector<std::string> TailLines(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > lines)
      tail.pop_front();
  }
  return {tail.begin(), tail.end()};
}

}  // namespace tessera::cli
