#include "worker/rendezvous/store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "worker/rendezvous/socket_io.h"

namespace tessera::rendezvous {

using io::Clock;
using std::chrono::milliseconds;

namespace {

std::string Seconds(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1fs", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// One non-blocking connect attempt to one address, bounded by `deadline`.
int TryConnect(const addrinfo* a, Clock::time_point deadline, std::string& error) {
  const int fd =
      ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  const int rc = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 5000)));
  int soerr = 0;
  socklen_t len = sizeof(soerr);
  if (rc <= 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
    error = rc == 0 ? "connect timed out" : std::strerror(soerr != 0 ? soerr : errno);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  io::TuneSocket(fd);
  return fd;
}

std::string Describe(const Request& r) {
  std::string s = ToString(r.type);
  if (!r.keys.empty())
    s += " " + r.keys[0] + (r.keys.size() > 1 ? " (and others)" : "");
  return s;
}

}  // namespace

std::optional<std::pair<std::string, int>> ParseEndpoint(const std::string& endpoint) {
  std::string host;
  std::string port;
  if (!endpoint.empty() && endpoint[0] == '[') {
    const auto close = endpoint.find(']');
    if (close == std::string::npos || close + 1 >= endpoint.size() || endpoint[close + 1] != ':') {
      return std::nullopt;
    }
    host = endpoint.substr(1, close - 1);
    port = endpoint.substr(close + 2);
  } else {
    const auto colon = endpoint.rfind(':');
    if (colon == std::string::npos || endpoint.find(':') != colon)
      return std::nullopt;
    host = endpoint.substr(0, colon);
    port = endpoint.substr(colon + 1);
  }
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (host.empty() || ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535) {
    return std::nullopt;
  }
  return std::make_pair(host, p);
}

StoreClientOptions StoreClientOptions::FromEnv() {
  StoreClientOptions o;
  const char* endpoint = std::getenv("TESSERA_RDZV_ENDPOINT");
  if (endpoint == nullptr || *endpoint == '\0') {
    throw StoreError("TESSERA_RDZV_ENDPOINT is not set: expected host:port of rank 0's store");
  }
  auto parsed = ParseEndpoint(endpoint);
  if (!parsed) {
    throw StoreError(std::string("TESSERA_RDZV_ENDPOINT=") + endpoint +
                     ": expected host:port with a port in 1..65535");
  }
  o.host = parsed->first;
  o.port = parsed->second;
  if (const char* token = std::getenv("TESSERA_RDZV_TOKEN"))
    o.token = token;
  if (const char* t = std::getenv("TESSERA_RDZV_TIMEOUT"); t != nullptr && *t != '\0') {
    char* end = nullptr;
    const double seconds = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(seconds > 0) || seconds > 1e7) {
      throw StoreError(std::string("TESSERA_RDZV_TIMEOUT=") + t +
                       ": expected a positive number of seconds");
    }
    o.timeout = o.connect_timeout = milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return o;
}

StoreClient::StoreClient(StoreClientOptions options) : options_(std::move(options)) {
  std::lock_guard<std::mutex> lock(mu_);
  Connect();
}

StoreClient::~StoreClient() {
  std::lock_guard<std::mutex> lock(mu_);
  CloseLocked();
}

std::unique_ptr<StoreClient> StoreClient::Clone() const {
  return std::make_unique<StoreClient>(options_);
}

std::string StoreClient::endpoint() const {
  return options_.host + ":" + std::to_string(options_.port);
}

void StoreClient::CloseLocked() {
  const int fd = fd_.exchange(-1);
  if (fd >= 0)
    ::close(fd);
}

void StoreClient::Interrupt() {
  interrupted_ = true;
  const int fd = fd_.load();
  if (fd >= 0)
    ::shutdown(fd, SHUT_RDWR);
}

void StoreClient::Connect() {
  const auto deadline = Clock::now() + options_.connect_timeout;
  auto backoff = milliseconds(20);
  std::string error;
  for (int attempt = 1;; ++attempt) {
    if (interrupted_)
      throw StoreConnectionError("rendezvous store " + endpoint() + ": interrupted");
    const io::Resolved resolved =
        io::Resolve(options_.host, options_.port, deadline, options_.resolver);
    int fd = -1;
    if (!resolved.list) {
      error = resolved.error;
    } else {
      for (const addrinfo* a = resolved.list.get(); a != nullptr && fd < 0; a = a->ai_next)
        fd = TryConnect(a, deadline, error);
    }
    if (fd >= 0) {
      fd_ = fd;
      Request auth;
      auth.type = RequestType::kAuth;
      auth.value = options_.token;
      try {
        Call(auth, Clock::now() + std::min(options_.timeout, milliseconds(30000)));
        return;
      } catch (const StoreAuthError&) {
        throw;
      } catch (const StoreError& e) {
        error = e.what();  // the server went away during the handshake: retry
      }
    }
    if (options_.on_retry)
      options_.on_retry(error);
    const auto now = Clock::now();
    if (now >= deadline) {
      throw StoreTimeoutError("rendezvous store " + endpoint() + ": not reachable after " +
                              Seconds(options_.connect_timeout) + " (" + std::to_string(attempt) +
                              " attempts; last error: " + error +
                              "); check TESSERA_RDZV_ENDPOINT and that rank 0 is running");
    }
    // Back off between attempts; the store may simply not be listening yet.
    std::this_thread::sleep_for(
        std::min(backoff, std::chrono::duration_cast<milliseconds>(deadline - now)));
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
}

Response StoreClient::Call(const Request& request, Clock::time_point deadline) {
  if (interrupted_) {
    throw StoreConnectionError("rendezvous store " + endpoint() + ": interrupted");
  }
  if (fd_.load() < 0)
    Connect();
  std::vector<uint8_t> out;
  EncodeRequest(request, out);
  // The store drops a client whose frame is over the limit while it is still sending, which
  // would read as a lost connection; say what is wrong before sending anything.
  if (out.size() - kFrameHeaderBytes > kMaxFrameBody) {
    throw StoreError("rendezvous store " + endpoint() + ": " + Describe(request) + " is " +
                     std::to_string(out.size() - kFrameHeaderBytes) +
                     " bytes, over the store's limit of " + std::to_string(kMaxFrameBody) +
                     " bytes a request");
  }
  const int fd = fd_.load();
  auto fail = [&](io::IoResult r) -> Response {
    CloseLocked();
    if (r == io::IoResult::kTimeout) {
      throw StoreTimeoutError("rendezvous store " + endpoint() + ": " + Describe(request) +
                              " timed out");
    }
    throw StoreConnectionError("rendezvous store " + endpoint() + ": connection lost during " +
                               Describe(request) +
                               " (rank 0, which hosts the store, may have exited)");
  };
  if (auto r = io::SendAll(fd, out.data(), out.size(), deadline); r != io::IoResult::kOk) {
    return fail(r);
  }
  uint8_t header[kFrameHeaderBytes];
  if (auto r = io::RecvAll(fd, header, sizeof(header), deadline); r != io::IoResult::kOk) {
    return fail(r);
  }
  const auto len = DecodeHeader(std::span<const uint8_t, kFrameHeaderBytes>(header));
  if (!len) {
    CloseLocked();
    throw StoreError("rendezvous store " + endpoint() + ": response frame too large");
  }
  std::vector<uint8_t> body(*len);
  if (auto r = io::RecvAll(fd, body.data(), body.size(), deadline); r != io::IoResult::kOk) {
    return fail(r);
  }
  Response resp;
  const auto d = DecodeResponseBody(body, resp);
  if (d.status != DecodeStatus::kOk) {
    CloseLocked();
    throw StoreError("rendezvous store " + endpoint() + ": malformed response: " + d.error);
  }
  switch (resp.status) {
    case Status::kAuthFailed:
      CloseLocked();
      throw StoreAuthError("rendezvous store " + endpoint() +
                           " refused this client: " + resp.message + " (check TESSERA_RDZV_TOKEN)");
    case Status::kBadRequest:
      throw StoreError("rendezvous store " + endpoint() + ": " + Describe(request) +
                       " refused: " + resp.message);
    default:
      return resp;
  }
}

void StoreClient::Set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Call({RequestType::kSet, {key}, value, std::nullopt, 0}, Clock::now() + options_.timeout);
}

std::optional<std::string> StoreClient::TryGet(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Response r =
      Call({RequestType::kGet, {key}, "", std::nullopt, 0}, Clock::now() + options_.timeout);
  if (r.status == Status::kNotFound)
    return std::nullopt;
  return std::move(r.value);
}

std::string StoreClient::Get(const std::string& key, std::optional<milliseconds> timeout) {
  return Wait({key}, timeout).at(0);
}

std::vector<std::string> StoreClient::Wait(const std::vector<std::string>& keys,
                                           std::optional<milliseconds> timeout) {
  const milliseconds t =
      std::clamp(timeout.value_or(options_.timeout), milliseconds(0), milliseconds(kLongestWaitMs));
  std::lock_guard<std::mutex> lock(mu_);
  // The server answers at its own deadline; allow for the round trip on top.
  Response r = Call({RequestType::kWait, keys, "", std::nullopt, t.count()},
                    Clock::now() + t + milliseconds(5000));
  if (r.status == Status::kTimeout) {
    std::string missing;
    for (size_t i = 0; i < r.keys.size() && i < 8; ++i)
      missing += (i ? ", " : "") + r.keys[i];
    if (r.keys.size() > 8)
      missing += ", ...";
    throw StoreTimeoutError("rendezvous store " + endpoint() + ": still missing after " +
                            Seconds(t) + ": " + missing);
  }
  if (r.keys.size() != keys.size()) {
    throw StoreError("rendezvous store " + endpoint() + ": wait returned " +
                     std::to_string(r.keys.size()) + " values for " + std::to_string(keys.size()) +
                     " keys");
  }
  return std::move(r.keys);
}

int64_t StoreClient::Add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  return Call({RequestType::kAdd, {key}, "", std::nullopt, delta}, Clock::now() + options_.timeout)
      .number;
}

bool StoreClient::CompareSet(const std::string& key, const std::optional<std::string>& expected,
                             const std::string& desired, std::optional<std::string>* current) {
  std::lock_guard<std::mutex> lock(mu_);
  Response r = Call({RequestType::kCompareSet, {key}, desired, expected, 0},
                    Clock::now() + options_.timeout);
  if (r.status == Status::kOk)
    return true;
  if (current != nullptr) {
    *current = r.number != 0 ? std::optional<std::string>(r.value) : std::nullopt;
  }
  return false;
}

bool StoreClient::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return Call({RequestType::kDelete, {key}, "", std::nullopt, 0}, Clock::now() + options_.timeout)
             .number != 0;
}

std::vector<std::string> StoreClient::List(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  return Call({RequestType::kList, {}, prefix, std::nullopt, 0}, Clock::now() + options_.timeout)
      .keys;
}

void StoreClient::AddWill(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Call({RequestType::kAddWill, {key}, value, std::nullopt, 0}, Clock::now() + options_.timeout);
}

void StoreClient::ClearWills(milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_.load() < 0)
    return;
  Call({RequestType::kClearWills, {}, "", std::nullopt, 0}, Clock::now() + timeout);
}

void StoreBarrier(StoreClient& client, const std::string& name, int size, milliseconds timeout) {
  const int64_t arrived = client.Add(name + "/arrived", 1);
  if (arrived == size)
    client.Set(name + "/done", "1");
  try {
    client.Wait({name + "/done"}, timeout);
  } catch (const StoreTimeoutError&) {
    const auto now = client.TryGet(name + "/arrived").value_or("0");
    throw StoreTimeoutError("barrier " + name + ": " + now + " of " + std::to_string(size) +
                            " participants arrived within " + Seconds(timeout));
  }
}

}  // namespace tessera::rendezvous
