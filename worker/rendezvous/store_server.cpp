#include "worker/rendezvous/store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <system_error>

#include "worker/rendezvous/socket_io.h"
#include "worker/rendezvous/store_error.h"

namespace tessera::rendezvous {

using io::Clock;

struct StoreServer::Connection {
  int fd = -1;
  std::string peer;
  std::thread thread;
  std::atomic<bool> done{false};
  bool authenticated = false;
  std::vector<std::pair<std::string, std::string>> wills;  // guarded by mu_
};

namespace {

int BindAndListen(const StoreServerOptions& o) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string where = o.host + ":" + std::to_string(o.port);
  const int gai = ::getaddrinfo(o.host.empty() ? nullptr : o.host.c_str(),
                                std::to_string(o.port).c_str(), &hints, &res);
  if (gai != 0) {
    throw StoreError("rendezvous store: cannot resolve listen address " + where + ": " +
                     ::gai_strerror(gai));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 256) == 0)
      break;
    last_error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    throw StoreError("rendezvous store: cannot listen on " + where + ": " + last_error +
                     " (is another process using the port?)");
  }
  return fd;
}

int LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return 0;
  if (ss.ss_family == AF_INET)
    return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

// Compares without an early exit, so the time taken does not reveal the matching prefix.
bool TokensEqual(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) {
    const char other = i < b.size() ? b[i] : '\0';
    diff |= static_cast<unsigned char>(a[i] ^ other);
  }
  return diff == 0;
}

// True when the peer hung up (checked without blocking or consuming data).
bool PeerClosed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool SendResponse(int fd, const Response& r, Clock::time_point deadline) {
  std::vector<uint8_t> out;
  EncodeResponse(r, out);
  return io::SendAll(fd, out.data(), out.size(), deadline) == io::IoResult::kOk;
}

// Reads one frame body; false on close, timeout or a header over the size limit (then
// `oversized` is set).
bool ReadBody(int fd, Clock::time_point deadline, std::vector<uint8_t>& body, bool& oversized) {
  uint8_t header[kFrameHeaderBytes];
  if (io::RecvAll(fd, header, sizeof(header), deadline) != io::IoResult::kOk)
    return false;
  const auto len = DecodeHeader(std::span<const uint8_t, kFrameHeaderBytes>(header));
  if (!len) {
    oversized = true;
    return false;
  }
  body.resize(*len);
  return io::RecvAll(fd, body.data(), body.size(), deadline) == io::IoResult::kOk;
}

}  // namespace

std::unique_ptr<StoreServer> StoreServer::Start(const StoreServerOptions& options) {
  return std::unique_ptr<StoreServer>(new StoreServer(BindAndListen(options), options));
}

std::unique_ptr<StoreServer> StoreServer::Adopt(int listen_fd, const StoreServerOptions& options) {
  return std::unique_ptr<StoreServer>(new StoreServer(listen_fd, options));
}

StoreServer::StoreServer(int listen_fd, const StoreServerOptions& options)
    : options_(options), listen_fd_(listen_fd), port_(LocalPort(listen_fd)) {
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw StoreError(std::string("rendezvous store: pipe: ") + std::strerror(errno));
  }
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

StoreServer::~StoreServer() {
  Stop();
}

int StoreServer::connected_clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  return authenticated_;
}

bool StoreServer::WaitForClientsToLeave(std::chrono::milliseconds timeout, int remaining) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return authenticated_ <= remaining; });
}

void StoreServer::Stop() {
  if (stopping_.exchange(true))
    return;
  const char byte = 1;
  [[maybe_unused]] auto ignored = ::write(wake_pipe_[1], &byte, 1);
  if (acceptor_.joinable())
    acceptor_.join();
  std::list<std::unique_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : connections_)
      ::shutdown(c->fd, SHUT_RDWR);
    conns.swap(connections_);
  }
  changed_.notify_all();
  for (auto& c : conns) {
    if (c->thread.joinable())
      c->thread.join();
    ::close(c->fd);
  }
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void StoreServer::ReapFinished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) {
    c->thread.join();
    ::close(c->fd);
  }
}

void StoreServer::AcceptLoop() {
  bool starved = false;  // the last accept ran out of descriptors or memory (logged once)
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      spdlog::error("rendezvous store: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0)
      return;
    if ((fds[0].revents & POLLIN) == 0)
      continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors or memory: the connection stays queued. Wait a moment (or for a
        // stop) instead of polling a listen socket that stays readable in a busy loop.
        if (!starved)
          spdlog::warn("rendezvous store: cannot accept a client: {}", std::strerror(errno));
        starved = true;
        ReapFinished();
        ::poll(&fds[1], 1, 100);
      }
      continue;  // otherwise the client gave up before we accepted; nothing to serve
    }
    starved = false;
    io::TuneSocket(fd);
    ReapFinished();
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    conn->peer = io::PeerAddress(fd);
    Connection* raw = conn.get();
    std::lock_guard<std::mutex> lock(mu_);
    connections_.push_back(std::move(conn));
    try {
      raw->thread = std::thread([this, raw] { Serve(raw); });
    } catch (const std::system_error& e) {
      // No thread for it (a pids limit): this client is dropped, the store goes on serving.
      spdlog::warn("rendezvous store: dropped client {}: cannot start its thread: {}", raw->peer,
                   e.what());
      ::close(fd);
      connections_.pop_back();
    }
  }
}

void StoreServer::Serve(Connection* conn) {
  const int fd = conn->fd;
  std::vector<uint8_t> body;
  bool oversized = false;
  // Authentication: the first frame, within auth_timeout.
  {
    const auto deadline = Clock::now() + options_.auth_timeout;
    Request req;
    const bool read = ReadBody(fd, deadline, body, oversized);
    const bool decoded = read && DecodeRequestBody(body, req).status == DecodeStatus::kOk;
    if (!decoded || req.type != RequestType::kAuth || !TokensEqual(req.value, options_.token)) {
      if (read || oversized) {
        refused_.fetch_add(1);
        const char* why = !decoded || req.type != RequestType::kAuth
                              ? "the first frame is not an authentication request"
                              : "wrong token";
        spdlog::warn("rendezvous store: refused client {}: {}", conn->peer, why);
        SendResponse(fd, {Status::kAuthFailed, "", 0, {}, why},
                     Clock::now() + std::chrono::seconds(1));
      }
      ::shutdown(fd, SHUT_RDWR);  // the fd itself is closed when the thread is reaped
      conn->done = true;
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      conn->authenticated = true;
      ++authenticated_;
    }
    SendResponse(fd, {}, Clock::now() + options_.auth_timeout);
  }
  for (;;) {
    if (!ReadBody(fd, Clock::time_point::max(), body, oversized)) {
      if (oversized) {
        spdlog::warn("rendezvous store: dropped client {}: frame larger than {} bytes", conn->peer,
                     kMaxFrameBody);
        SendResponse(fd, {Status::kBadRequest, "", 0, {}, "frame too large"},
                     Clock::now() + std::chrono::seconds(1));
      }
      break;
    }
    Request req;
    const DecodeResult d = DecodeRequestBody(body, req);
    if (d.status != DecodeStatus::kOk) {
      spdlog::warn("rendezvous store: dropped client {}: malformed frame: {}", conn->peer, d.error);
      SendResponse(fd, {Status::kBadRequest, "", 0, {}, d.error},
                   Clock::now() + std::chrono::seconds(1));
      break;
    }
    const Response resp = Handle(req, *conn);
    if (!SendResponse(fd, resp, Clock::time_point::max()))
      break;
  }
  ApplyWills(*conn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --authenticated_;
  }
  changed_.notify_all();
  ::shutdown(fd, SHUT_RDWR);  // the fd itself is closed when the thread is reaped
  conn->done = true;
}

void StoreServer::ApplyWills(Connection& conn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_.load() || conn.wills.empty())
    return;
  // First death wins: a will never overwrites a key (a later failure is a consequence).
  for (auto& [key, value] : conn.wills)
    data_.emplace(key, value);
  spdlog::warn(
      "rendezvous store: client {} disconnected without saying goodbye; set {} key(s), "
      "first {}",
      conn.peer, conn.wills.size(), conn.wills.front().first);
  conn.wills.clear();
  changed_.notify_all();
}

Response StoreServer::Handle(const Request& req, Connection& conn) {
  Response r;
  std::unique_lock<std::mutex> lock(mu_);
  const std::string* key = req.keys.empty() ? nullptr : &req.keys[0];
  switch (req.type) {
    case RequestType::kAuth:
      break;  // re-authentication with the right token is harmless
    case RequestType::kSet:
      data_[*key] = req.value;
      changed_.notify_all();
      break;
    case RequestType::kGet: {
      auto it = data_.find(*key);
      if (it == data_.end()) {
        r.status = Status::kNotFound;
      } else {
        r.value = it->second;
      }
      break;
    }
    case RequestType::kWait: {
      const auto deadline = Clock::now() + std::chrono::milliseconds(
                                               std::clamp<int64_t>(req.number, 0, kLongestWaitMs));
      auto all_present = [&] {
        for (const auto& k : req.keys) {
          if (data_.find(k) == data_.end())
            return false;
        }
        return true;
      };
      // Wake up now and then to notice a client that went away while waiting, so its
      // connection (and WaitForClientsToLeave) does not linger until the deadline.
      bool ready = all_present();
      while (!ready && !stopping_.load() && Clock::now() < deadline && !PeerClosed(conn.fd)) {
        changed_.wait_until(lock,
                            std::min(deadline, Clock::now() + std::chrono::milliseconds(200)));
        ready = all_present();
      }
      if (!ready) {
        r.status = Status::kTimeout;
        for (const auto& k : req.keys) {
          if (data_.find(k) == data_.end())
            r.keys.push_back(k);
        }
      } else {
        for (const auto& k : req.keys)
          r.keys.push_back(data_.at(k));
      }
      break;
    }
    case RequestType::kAdd: {
      int64_t current = 0;
      auto it = data_.find(*key);
      if (it != data_.end()) {
        const auto& s = it->second;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), current);
        if (ec != std::errc() || p != s.data() + s.size()) {
          r.status = Status::kBadRequest;
          r.message = "key " + *key + " holds a non-integer value";
          break;
        }
      }
      current += req.number;
      data_[*key] = std::to_string(current);
      r.number = current;
      changed_.notify_all();
      break;
    }
    case RequestType::kCompareSet: {
      auto it = data_.find(*key);
      const bool matches =
          req.expected ? (it != data_.end() && it->second == *req.expected) : it == data_.end();
      if (matches) {
        data_[*key] = req.value;
        r.value = req.value;
        changed_.notify_all();
      } else {
        r.status = Status::kMismatch;
        if (it != data_.end())
          r.value = it->second;
        r.number = it != data_.end() ? 1 : 0;
      }
      break;
    }
    case RequestType::kDelete:
      r.number = static_cast<int64_t>(data_.erase(*key));
      break;
    case RequestType::kList:
      for (auto it = data_.lower_bound(req.value);
           it != data_.end() && it->first.compare(0, req.value.size(), req.value) == 0; ++it) {
        r.keys.push_back(it->first);
      }
      break;
    case RequestType::kAddWill:
      conn.wills.emplace_back(*key, req.value);
      break;
    case RequestType::kClearWills:
      conn.wills.clear();
      break;
  }
  return r;
}

}  // namespace tessera::rendezvous
