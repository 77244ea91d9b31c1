// The worker's small HTTP server over real loopback sockets.
#include "worker/train/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "tests/unit/train/loopback_http.h"

namespace tessera::train {
namespace {

std::string Exchange(int port, const std::string& request) {
  return test::LoopbackExchange(port, request);
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status st = HttpServer::Start(
        0, {{"/metrics", "text/plain", [this] { return "calls " + std::to_string(++calls_); }}},
        &server_);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_GT(server_->port(), 0);
  }
  std::atomic<int> calls_{0};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, AnswersARouteWithItsBodyComputedPerRequest) {
  const std::string first = Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(first.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << first;
  EXPECT_NE(first.find("Content-Type: text/plain\r\n"), std::string::npos) << first;
  EXPECT_NE(first.find("Content-Length: 7\r\n"), std::string::npos) << first;
  EXPECT_EQ(first.substr(first.size() - 7), "calls 1");
  // A query string is ignored; the body is computed again.
  const std::string second = Exchange(server_->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
  EXPECT_EQ(second.substr(second.size() - 7), "calls 2") << second;
  // HEAD: the headers of a GET, no body.
  const std::string head = Exchange(server_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 7\r\n"), std::string::npos) << head;  // the GET's
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;
  // A request line without a version is still read up to its end.
  const std::string bare = Exchange(server_->port(), "GET /metrics\r\n\r\n");
  EXPECT_EQ(bare.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << bare;
  EXPECT_EQ(bare.substr(bare.size() - 7), "calls 4") << bare;
}

TEST_F(HttpServerTest, UnknownPathsMethodsAndGarbageGetErrorsAndTheServerKeepsServing) {
  EXPECT_EQ(Exchange(server_->port(), "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  const std::string head_nope = Exchange(server_->port(), "HEAD /nope HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head_nope.rfind("HTTP/1.1 404", 0), 0u) << head_nope;
  EXPECT_EQ(head_nope.substr(head_nope.size() - 4), "\r\n\r\n") << head_nope;  // no body
  EXPECT_EQ(Exchange(server_->port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0),
            0u);
  EXPECT_EQ(Exchange(server_->port(), "garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  // A client that connects and sends nothing is dropped after the request timeout.
  EXPECT_EQ(Exchange(server_->port(), ""), "");
  EXPECT_EQ(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

// A request head is read up to 16 KiB: one that reaches it without its blank line is answered
// from what came, not waited on (the client sends exactly that much, so none is left unread).
TEST_F(HttpServerTest, AHeadOfTheSizeLimitIsAnsweredWithoutWaitingForMore) {
  std::string request = "GET /metrics HTTP/1.1\r\nX-Padding: ";
  request.resize(16 * 1024, 'x');
  const std::string answer = Exchange(server_->port(), request);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer.substr(0, 200);
}

// A client that sends its request one byte at a time, slower than the server waits for a
// whole request. Counts the bytes the server took before it closed the connection.
class TricklingClient {
 public:
  explicit TricklingClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    thread_ = std::thread([this] { Trickle(); });
  }
  ~TricklingClient() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  bool connected() const { return connected_; }
  size_t sent() const { return sent_; }
  bool closed_by_server() const { return closed_by_server_; }
  static constexpr char kRequest[] =
      "GET /metrics HTTP/1.1\r\nHost: a-client-that-takes-its-time\r\n\r\n";
  static constexpr size_t kRequestBytes = sizeof(kRequest) - 1;

 private:
  void Trickle() {
    for (size_t i = 0; connected_ && i < kRequestBytes && !stop_; ++i) {
      // The slowness being simulated, not a wait for a condition.
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      char probe;
      if (recv(fd_, &probe, 1, MSG_DONTWAIT | MSG_PEEK) == 0 ||
          send(fd_, &kRequest[i], 1, MSG_NOSIGNAL) != 1) {
        closed_by_server_ = true;
        return;
      }
      sent_ = i + 1;
    }
  }
  int fd_ = -1;
  bool connected_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> sent_{0};
  std::atomic<bool> closed_by_server_{false};
  std::thread thread_;
};

// The request deadline is for the whole request: a client trickling a byte every 250 ms (its
// request would take about 15 s) is dropped before it finishes, and the next scrape is answered.
TEST_F(HttpServerTest, ATricklingClientIsDroppedBeforeItsRequestIsWhole) {
  TricklingClient slow(server_->port());
  ASSERT_TRUE(slow.connected());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!slow.closed_by_server() && slow.sent() < TricklingClient::kRequestBytes &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(slow.closed_by_server());
  EXPECT_LT(slow.sent(), TricklingClient::kRequestBytes);
  EXPECT_EQ(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

// Stopping the server (the worker's exit) does not wait for a client in the middle of a request.
TEST_F(HttpServerTest, StoppingDoesNotWaitForAClientMidRequest) {
  TricklingClient slow(server_->port());
  ASSERT_TRUE(slow.connected());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (slow.sent() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(slow.sent(), 2u);
  server_.reset();
  // Had the destructor waited for the request (or for the 2 s deadline), the client would have
  // sent several more bytes by now.
  EXPECT_LE(slow.sent(), 3u);
}

TEST_F(HttpServerTest, ATakenPortIsAnIoErrorNamingIt) {
  std::unique_ptr<HttpServer> second;
  const Status st = HttpServer::Start(server_->port(), {}, &second);
  EXPECT_EQ(st.exit_code(), 4);
  EXPECT_NE(st.message().find("metrics.port " + std::to_string(server_->port())), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("Address already in use"), std::string::npos) << st.message();
}

// Every answer, error or not, says the connection closes (one request per connection).
TEST_F(HttpServerTest, EveryAnswerSaysTheConnectionCloses) {
  for (const char* request : {"GET /metrics HTTP/1.1\r\n\r\n", "GET /nope HTTP/1.1\r\n\r\n",
                              "POST /metrics HTTP/1.1\r\n\r\n", "garbage\r\n\r\n"}) {
    const std::string answer = Exchange(server_->port(), request);
    const std::string head = answer.substr(0, answer.find("\r\n\r\n") + 2);
    EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos) << request << answer;
  }
}

// A route is its exact path: neither a prefix of it nor a longer path is served.
TEST_F(HttpServerTest, OnlyTheExactPathIsARoute) {
  for (const char* path : {"/", "/metric", "/metricsx", "/metrics/"}) {
    const std::string answer =
        Exchange(server_->port(), std::string("GET ") + path + " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << path << "\n" << answer;
  }
  EXPECT_EQ(calls_, 0);
}

// A request head is read up to 16 KiB, waiting for its blank line: a shorter head that never
// ends (the client stops sending) is not answered from its first part.
TEST_F(HttpServerTest, AHeadBelowTheSizeLimitIsReadToItsEnd) {
  std::string request = "GET /metrics HTTP/1.1\r\nX-Padding: ";
  request.resize(12 * 1024, 'x');  // no blank line
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  shutdown(fd, SHUT_WR);  // the server reads to the end of what was sent, then sees it closed
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;)
    answer.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_EQ(answer, "");
  EXPECT_EQ(calls_, 0);
}

// A body larger than the socket buffers (a big /metrics) is sent whole, waiting for the client
// to take it.
TEST(HttpServer, ALargeBodyIsSentWhole) {
  const std::string big(32 << 20, 'm');
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(0, {{"/big", "text/plain", [&big] { return big; }}}, &server).ok());
  const std::string answer = Exchange(server->port(), "GET /big HTTP/1.1\r\n\r\n");
  const auto body = answer.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << answer.substr(0, 200);
  EXPECT_NE(answer.find("Content-Length: " + std::to_string(big.size()) + "\r\n"),
            std::string::npos);
  EXPECT_EQ(answer.size() - body - 4, big.size());
  EXPECT_EQ(answer.compare(body + 4, std::string::npos, big), 0);
}

// A rank restarted in the same pod listens on its port again at once, although the connections
// the last one closed (it closes first) are still in TIME_WAIT.
TEST(HttpServer, ARestartedServerListensOnTheSamePortAgain) {
  std::unique_ptr<HttpServer> first;
  ASSERT_TRUE(HttpServer::Start(0, {{"/metrics", "text/plain", [] { return "a"; }}}, &first).ok());
  const int port = first->port();
  EXPECT_EQ(Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  first.reset();
  std::unique_ptr<HttpServer> second;
  const Status st =
      HttpServer::Start(port, {{"/metrics", "text/plain", [] { return "b"; }}}, &second);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::string answer = Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(answer.substr(answer.size() - 1), "b") << answer;
}

// Prometheus scrapes a rank from another pod: the server listens on every interface
// (0.0.0.0, as /proc/net/tcp lists its listening socket), not only on loopback.
TEST_F(HttpServerTest, ListensOnEveryInterface) {
  std::ifstream tcp("/proc/net/tcp");
  ASSERT_TRUE(tcp.good());
  char local[32];
  std::snprintf(local, sizeof(local), ":%04X", server_->port());
  std::string listening;  // the local address of the listening socket on our port
  for (std::string line; std::getline(tcp, line);) {
    char address[64] = {}, remote[64] = {}, state[8] = {};
    if (std::sscanf(line.c_str(), " %*s %63s %63s %7s", address, remote, state) == 3 &&
        std::string(state) == "0A" && std::string(address).ends_with(local)) {
      listening = address;
    }
  }
  EXPECT_EQ(listening, std::string("00000000") + local);
}

}  // namespace
}  // namespace tessera::train
