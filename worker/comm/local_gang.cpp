#include "worker/comm/local_gang.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "worker/comm/gloo_process_group.h"
#include "worker/rendezvous/store_server.h"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::runtime_error SysError(const std::string& what) {
  return std::runtime_error("local gang: " + what + ": " + std::strerror(errno));
}

std::string ReadAll(int fd) {
  std::string out;
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof(buf));
    if (k <= 0)
      break;
    out.append(buf, static_cast<size_t>(k));
  }
  return out;
}

}  // namespace

std::vector<RankExit> RunLocalGang(int ranks, const RankMain& main,
                                   std::chrono::milliseconds deadline) {
  const int listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd < 0)
    throw SysError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd, 256) != 0 ||
      ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw SysError("binding a loopback port");
  }
  const int port = ntohs(addr.sin_port);

  std::vector<RankExit> results(static_cast<size_t>(ranks));
  std::vector<pid_t> pids(static_cast<size_t>(ranks), -1);
  std::vector<int> pidfds(static_cast<size_t>(ranks), -1);
  std::vector<int> outputs(static_cast<size_t>(ranks), -1);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < ranks; ++r) {
    char path[] = "/tmp/tessera-gang-XXXXXX";
    const int out = ::mkstemp(path);
    if (out < 0)
      throw SysError("mkstemp");
    ::unlink(path);
    outputs[r] = out;
    const pid_t pid = ::fork();
    if (pid < 0)
      throw SysError("fork");
    if (pid == 0) {
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
      if (r != 0)
        ::close(listen_fd);
      int code = 1;
      try {
        code = main(r, r == 0 ? listen_fd : -1, port);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids[r] = pid;
    results[r].rank = r;
    pidfds[r] = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfds[r] < 0)
      throw SysError("pidfd_open");
  }
  ::close(listen_fd);

  const auto end = Clock::now() + deadline;
  int running = ranks;
  while (running > 0) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int r = 0; r < ranks; ++r) {
      if (pidfds[r] >= 0) {
        fds.push_back({pidfds[r], POLLIN, 0});
        which.push_back(r);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    const int rc =
        ::poll(fds.data(), fds.size(), left.count() > 0 ? static_cast<int>(left.count()) : 0);
    if (rc < 0 && errno == EINTR)
      continue;
    const bool timed_out = rc == 0;
    for (size_t i = 0; i < fds.size(); ++i) {
      const int r = which[i];
      if (!timed_out && (fds[i].revents & POLLIN) == 0)
        continue;
      if (timed_out) {
        ::kill(pids[r], SIGKILL);
        results[r].killed_at_deadline = true;
      }
      int status = 0;
      ::waitpid(pids[r], &status, 0);
      results[r].ended = Clock::now();
      if (WIFSIGNALED(status)) {
        results[r].signaled = true;
        results[r].signal = WTERMSIG(status);
      } else {
        results[r].exit_code = WEXITSTATUS(status);
      }
      ::close(pidfds[r]);
      pidfds[r] = -1;
      --running;
    }
  }
  for (int r = 0; r < ranks; ++r) {
    results[r].output = ReadAll(outputs[r]);
    ::close(outputs[r]);
  }
  return results;
}

void RunThreadGang(int ranks,
                   const std::function<void(int rank, std::shared_ptr<ProcessGroup> group)>& fn,
                   std::chrono::milliseconds timeout) {
  rendezvous::StoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  auto server = rendezvous::StoreServer::Start(so);
  std::mutex mu;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        rendezvous::StoreClientOptions co;
        co.port = server->port();
        co.connect_timeout = co.timeout = timeout;
        rendezvous::StoreClient client(co);
        GlooOptions go;
        go.host = "127.0.0.1";
        go.comm.timeout = timeout;
        fn(r, CreateGlooProcessGroup(client, r, ranks, go));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error)
          first_error = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  if (first_error)
    std::rethrow_exception(first_error);
}

}  // namespace tessera::comm
