// The worker's small HTTP server over real loopback sockets.
#include "worker/train/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <string>

namespace tessera::train {
namespace {

// Sends `request` to 127.0.0.1:port and returns everything the server answered.
std::string Exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "connect failed";
  }
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buf[1024];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;)
    answer.append(buf, static_cast<size_t>(n));
  close(fd);
  return answer;
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
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;
}

TEST_F(HttpServerTest, UnknownPathsMethodsAndGarbageGetErrorsAndTheServerKeepsServing) {
  EXPECT_EQ(Exchange(server_->port(), "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange(server_->port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0),
            0u);
  EXPECT_EQ(Exchange(server_->port(), "garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  // A client that connects and sends nothing is dropped after the request timeout.
  EXPECT_EQ(Exchange(server_->port(), ""), "");
  EXPECT_EQ(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

TEST_F(HttpServerTest, ATakenPortIsAnIoErrorNamingIt) {
  std::unique_ptr<HttpServer> second;
  const Status st = HttpServer::Start(server_->port(), {}, &second);
  EXPECT_EQ(st.exit_code(), 4);
  EXPECT_NE(st.message().find("metrics.port " + std::to_string(server_->port())), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("Address already in use"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::train
