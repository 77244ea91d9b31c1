// The cpprestsdk transport refuses unusable configuration up front, with one line naming the
// field, and returns a redirect instead of following it. (Its TLS and streaming are exercised
// against a real server in tests/cluster/k8s.)
#include "controller/k8s/transport_cpprest.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::k8s {
namespace {

TEST(K8sCpprestTransportTest, RejectsUnusableConfigurationWithTheFieldNamed) {
  struct Case {
    const char* name;
    ClientConfig config;
    std::string error;  // substring; "" = accepted
  };
  auto with = [](auto change) {
    ClientConfig c;
    c.server = "https://127.0.0.1:6443";
    change(c);
    return c;
  };
  const Case cases[] = {
      {"plain https, system CAs", with([](ClientConfig&) {}), ""},
      {"plain http", with([](ClientConfig& c) { c.server = "http://127.0.0.1:8080"; }), ""},
      {"no scheme", with([](ClientConfig& c) { c.server = "127.0.0.1:6443"; }),
       "must start with https://"},
      {"garbage CA", with([](ClientConfig& c) { c.ca_pem = "not a certificate"; }),
       "certificate-authority: not a PEM certificate"},
      {"garbage client certificate", with([](ClientConfig& c) {
         c.client_cert_pem = "not a certificate";
         c.client_key_pem = "not a key";
       }),
       "client-certificate: not a PEM certificate"},
      {"tls-server-name", with([](ClientConfig& c) { c.tls_server_name = "kubernetes"; }),
       "tls-server-name is not supported"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto transport = NewCpprestTransport(c.config);
    if (c.error.empty()) {
      EXPECT_TRUE(transport.ok()) << transport.error();
    } else {
      ASSERT_FALSE(transport.ok());
      EXPECT_NE(transport.error().find(c.error), std::string::npos) << transport.error();
      EXPECT_EQ(transport.error().find('\n'), std::string::npos);
    }
  }
}

// Each case in a child process: SSL_CERT_FILE is process-wide and set at most once.
std::string CaFileAfter(const char* preset, const std::vector<ClientConfig>& configs) {
  if (preset == nullptr)
    unsetenv("SSL_CERT_FILE");
  else
    setenv("SSL_CERT_FILE", preset, 1);
  for (const ClientConfig& c : configs) {
    if (!NewCpprestTransport(c).ok())
      return "refused";
  }
  const char* now = std::getenv("SSL_CERT_FILE");
  return now == nullptr ? "unset" : now;
}

TEST(K8sCpprestTransportTest, SystemCaBundleIsSkippedOnlyWhenNoConnectionCanUseIt) {
  ClientConfig system_cas;  // https without a CA of its own: the system's bundle is its trust
  system_cas.server = "https://127.0.0.1:6443";
  ClientConfig insecure = system_cas;
  insecure.insecure_skip_tls_verify = true;
  ClientConfig plain;
  plain.server = "http://127.0.0.1:8080";
  auto expect = [](const char* preset, std::vector<ClientConfig> configs, const char* want) {
    EXPECT_EXIT(std::exit(CaFileAfter(preset, configs) == want ? 0 : 1), testing::ExitedWithCode(0),
                "")
        << "want SSL_CERT_FILE " << want;
  };
  expect(nullptr, {system_cas}, "unset");
  expect(nullptr, {plain}, "unset");
  expect(nullptr, {insecure}, "/dev/null");
  expect(nullptr, {insecure, system_cas}, "/dev/null");
  expect("/etc/my-cas.pem", {insecure}, "/dev/null");
  expect("/etc/my-cas.pem", {system_cas}, "/etc/my-cas.pem");
}

// A plain-HTTP server on 127.0.0.1 that answers `/start` with a 302 to `/elsewhere` on
// itself and anything else with 200, one request per connection, and records each path.
class RedirectingServer {
 public:
  RedirectingServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 8) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RedirectingServer() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> paths() {
    std::lock_guard<std::mutex> lock(mu_);
    return paths_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0)
        continue;
      int conn = accept(fd_, nullptr, nullptr);
      if (conn < 0)
        continue;
      std::string request;
      char buf[4096];
      for (ssize_t n;
           request.find("\r\n\r\n") == std::string::npos && (n = read(conn, buf, sizeof buf)) > 0;)
        request.append(buf, static_cast<size_t>(n));
      const size_t start = request.find(' ') + 1;
      const std::string path = request.substr(start, request.find(' ', start) - start);
      {
        std::lock_guard<std::mutex> lock(mu_);
        paths_.push_back(path);
      }
      const std::string response =
          path == "/start" ? "HTTP/1.1 302 Found\r\nLocation: " + url() +
                                 "/elsewhere\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                           : std::string(
                                 "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: "
                                 "close\r\n\r\nfollowed");
      for (size_t sent = 0; sent < response.size();) {
        ssize_t n = write(conn, response.data() + sent, response.size() - sent);
        if (n <= 0)
          break;
        sent += static_cast<size_t>(n);
      }
      close(conn);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> paths_;
};

// An API server never redirects; following one would send the Authorization header wherever
// the Location points (and cpprestsdk's follower races with its own I/O thread).
TEST(K8sCpprestTransportTest, ReturnsARedirectInsteadOfFollowingIt) {
  RedirectingServer server;
  ClientConfig config;
  config.server = server.url();
  auto transport = NewCpprestTransport(config);
  ASSERT_TRUE(transport.ok()) << transport.error();
  HttpRequest request;
  request.path = "/start";
  request.headers["Authorization"] = "Bearer not-for-elsewhere";
  request.timeout = std::chrono::milliseconds(10000);
  auto response = (*transport)->Send(request);
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 302);
  EXPECT_EQ(response->headers["location"], server.url() + "/elsewhere");
  EXPECT_EQ(response->body, "");
  EXPECT_EQ(server.paths(), std::vector<std::string>{"/start"});
}

}  // namespace
}  // namespace tessera::k8s
