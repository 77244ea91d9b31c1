// The cpprestsdk transport refuses unusable configuration up front, with one line naming the
// field, returns a redirect instead of following it, and cuts a streamed body into lines
// however it is split, against a plain-HTTP server in the test. (TLS and watches are
// exercised against a real API server in tests/cluster/k8s.)
#include "controller/k8s/transport_cpprest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "controller/k8s/rest.h"
#include "tests/unit/k8s/loopback_server.h"

namespace tessera::k8s {
namespace {

using testing::LoopbackServer;

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
  // Each child runs this binary afresh: a child forked from a process whose cpprestsdk threads
  // are running (another test of this binary ran first) deadlocks in cpprestsdk's exit handler.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ClientConfig system_cas;  // https without a CA of its own: the system's bundle is its trust
  system_cas.server = "https://127.0.0.1:6443";
  ClientConfig insecure = system_cas;
  insecure.insecure_skip_tls_verify = true;
  ClientConfig plain;
  plain.server = "http://127.0.0.1:8080";
  auto expect = [](const char* preset, std::vector<ClientConfig> configs, const char* want) {
    EXPECT_EXIT(std::exit(CaFileAfter(preset, configs) == want ? 0 : 1),
                ::testing::ExitedWithCode(0), "")
        << "want SSL_CERT_FILE " << want;
  };
  expect(nullptr, {system_cas}, "unset");
  expect(nullptr, {plain}, "unset");
  expect(nullptr, {insecure}, "/dev/null");
  expect(nullptr, {insecure, system_cas}, "/dev/null");
  expect("/etc/my-cas.pem", {insecure}, "/dev/null");
  expect("/etc/my-cas.pem", {system_cas}, "/etc/my-cas.pem");
}

Result<std::unique_ptr<HttpTransport>, std::string> TransportTo(const LoopbackServer& server) {
  ClientConfig config;
  config.server = server.url();
  return NewCpprestTransport(config);
}

// An API server never redirects; following one would send the Authorization header wherever
// the Location points (and cpprestsdk's follower races with its own I/O thread).
TEST(K8sCpprestTransportTest, ReturnsARedirectInsteadOfFollowingIt) {
  const std::string location = "/elsewhere";  // cpprestsdk would resolve it against the request
  LoopbackServer server([&location](int conn, const LoopbackServer::Request& r) {
    LoopbackServer::Write(conn, r.path != location
                                    ? "HTTP/1.1 302 Found\r\nLocation: " + location +
                                          "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                                    : std::string("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n"
                                                  "Connection: close\r\n\r\nfollowed"));
  });
  auto transport = TransportTo(server);
  ASSERT_TRUE(transport.ok()) << transport.error();
  HttpRequest request;
  request.path = "/start";
  request.headers["Authorization"] = "Bearer not-for-elsewhere";
  request.timeout = std::chrono::milliseconds(10000);
  auto response = (*transport)->Send(request);
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 302);
  EXPECT_EQ(response->headers["location"], location);
  EXPECT_EQ(response->body, "");
  EXPECT_EQ(server.paths(), std::vector<std::string>{"/start"});

  // The REST client turns it into one error naming where it pointed.
  ClientConfig config;
  config.server = server.url();
  RestClient client(**transport, config);
  auto discovered = client.Discover("", "v1");
  ASSERT_FALSE(discovered.ok());
  EXPECT_EQ(discovered.error().reason, "Redirect");
  EXPECT_NE(discovered.error().message.find(location), std::string::npos)
      << discovered.error().message;
}

// A request to a server that never answers ends when its cancellation fires (shutdown) or its
// deadline passes (leader election's renew deadline), long before its own timeout.
TEST(K8sCpprestTransportTest, SendToAServerThatNeverAnswersEndsOnCancelOrDeadline) {
  using namespace std::chrono_literals;
  struct Case {
    const char* name;
    bool cancel;  // else a deadline 300 ms after the send
    std::string reason;
  };
  const Case cases[] = {{"cancelled", true, "Cancelled"}, {"deadline", false, "Timeout"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LoopbackServer server(
        [](int conn, const LoopbackServer::Request&) { LoopbackServer::HoldUntilClosed(conn); });
    auto transport = TransportTo(server);
    ASSERT_TRUE(transport.ok()) << transport.error();
    Cancellation cancel;
    HttpRequest request;
    request.method = "PUT";
    request.path = "/hangs";
    request.body = "{}";
    request.timeout = 30s;
    request.cancel = &cancel;
    const auto sent = std::chrono::steady_clock::now();
    if (!c.cancel)
      request.deadline = sent + 300ms;
    auto result = std::async(std::launch::async, [&] { return (*transport)->Send(request); });
    if (c.cancel) {
      // Cancel once the server holds the request: the exchange is in flight.
      const auto limit = sent + 10s;
      while (server.paths().empty() && std::chrono::steady_clock::now() < limit)
        std::this_thread::yield();
      ASSERT_EQ(server.paths(), std::vector<std::string>{"/hangs"});
      cancel.Cancel();
    }
    ASSERT_EQ(result.wait_for(5s), std::future_status::ready) << "still waiting for an answer";
    const auto response = result.get();
    EXPECT_LT(std::chrono::steady_clock::now() - sent, 2s);
    ASSERT_FALSE(response.ok());
    EXPECT_EQ(response.error().code, 0);
    EXPECT_EQ(response.error().reason, c.reason) << response.error().message;
  }
}

// A watch body arrives in whatever pieces the network makes: the reader hands over every line
// whole and once, however the bytes were split, including lines longer than its 64 KiB chunk,
// a burst of many lines at once, CRLF endings, empty lines (skipped) and a last line without
// a newline.
TEST(K8sCpprestTransportTest, StreamCutsLinesAcrossAnyChunking) {
  const std::string long_line(200 * 1024, 'x');
  std::string burst;
  std::vector<std::string> want = {"first", "split across writes", long_line};
  for (int i = 0; i < 2000; ++i) {
    want.push_back("line " + std::to_string(i));
    burst += want.back() + (i % 2 == 0 ? "\n" : "\r\n");
  }
  want.push_back("last, no newline");
  const std::vector<std::string> pieces = {"first\nsplit ",
                                           "across",
                                           " writes\r",
                                           "\n\n",
                                           long_line.substr(0, 70000),
                                           long_line.substr(70000) + "\n",
                                           burst,
                                           "last, no newline"};
  LoopbackServer server([&pieces](int conn, const LoopbackServer::Request&) {
    // No Content-Length and no chunked encoding: the body ends when the connection closes.
    LoopbackServer::Write(conn, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    for (const std::string& piece : pieces) {
      LoopbackServer::Write(conn, piece);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto transport = TransportTo(server);
  ASSERT_TRUE(transport.ok()) << transport.error();
  HttpRequest request;
  request.path = "/watch";
  request.timeout = std::chrono::milliseconds(10000);
  std::vector<std::string> got;
  Cancellation cancel;
  auto response = (*transport)
                      ->Stream(
                          request,
                          [&got](std::string_view line) {
                            got.emplace_back(line);
                            return true;
                          },
                          cancel);
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 200);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "line " << i;
}

}  // namespace
}  // namespace tessera::k8s
