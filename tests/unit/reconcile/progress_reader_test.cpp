// The controller's /progress reader against a real HTTP server on loopback: a pod is the
// user's code, and whatever it serves must cost the controller a bounded time and memory.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "api/progress.h"
#include "controller/reconcile/progress.h"
#include "tests/unit/k8s/loopback_server.h"

namespace tessera::reconcile {
namespace {

using namespace std::chrono_literals;
using k8s::testing::LoopbackServer;
using Clock = std::chrono::steady_clock;

// Sends `bytes` unless the peer is gone; false then (no SIGPIPE: the reader closes early).
bool Send(int conn, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(conn, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

const std::string kHead = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";

// Reads /progress on a thread; the read must end by `limit` (a guard: a hung read fails the
// test instead of hanging it).
std::optional<nlohmann::json> ReadWithin(int port, std::chrono::milliseconds timeout,
                                         std::chrono::seconds limit, double* seconds) {
  auto reader = NewHttpProgressReader();
  auto read =
      std::async(std::launch::async, [&] { return reader->Read("127.0.0.1", port, timeout); });
  const auto start = Clock::now();
  if (read.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << "the read did not end within " << limit.count() << " s";
    std::abort();  // the reader's thread cannot be abandoned safely
  }
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return read.get();
}

TEST(HttpProgressReader, ReadsTheDocument) {
  LoopbackServer server([](int conn, const LoopbackServer::Request&) {
    const std::string body = R"({"step": 7, "totalSteps": 10, "loss": 2.5})";
    Send(conn, kHead + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  });
  double seconds = 0;
  const auto body = ReadWithin(server.port(), 2000ms, 20s, &seconds);
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(body->at("step"), 7);
  EXPECT_EQ(server.paths(), std::vector<std::string>{"/progress"});
}

// Without a Content-Length the answer ends when the server closes (HTTP/1.0).
TEST(HttpProgressReader, AnAnswerWithoutALengthEndsWhenTheServerCloses) {
  LoopbackServer server([](int conn, const LoopbackServer::Request&) {
    Send(conn, "HTTP/1.0 200\r\n\r\n{\"step\": 3}");
  });
  double seconds = 0;
  const auto body = ReadWithin(server.port(), 2000ms, 20s, &seconds);
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(body->at("step"), 3);
}

TEST(HttpProgressReader, AnotherStatusOrNotJsonIsNothing) {
  for (const std::string answer :
       {"HTTP/1.1 404 Not Found\r\nContent-Length: 11\r\n\r\n{\"step\": 3}",
        "HTTP/1.1 2000 OK\r\nContent-Length: 11\r\n\r\n{\"step\": 3}",
        "HTTX/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"step\": 3}",
        "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!", "garbage"}) {
    LoopbackServer server([&](int conn, const LoopbackServer::Request&) { Send(conn, answer); });
    double seconds = 0;
    EXPECT_FALSE(ReadWithin(server.port(), 2000ms, 20s, &seconds).has_value()) << answer;
  }
  // Only addresses are contacted: a name is not looked up.
  auto reader = NewHttpProgressReader();
  EXPECT_FALSE(reader->Read("localhost", 1, 1000ms).has_value());
}

// A body that never ends (a pod's server stuck in a loop): the read gives up with nothing at
// the size limit, instead of reading forever into memory (it hung here before).
TEST(HttpProgressReader, AnEndlessBodyIsGivenUp) {
  std::atomic<bool> done{false};
  LoopbackServer server([&](int conn, const LoopbackServer::Request&) {
    const std::string chunk(64 * 1024, ' ');
    if (!Send(conn, kHead + "\r\n"))
      return;
    while (!done.load() && Send(conn, chunk)) {
    }
  });
  double seconds = 0;
  const auto body = ReadWithin(server.port(), 1000ms, 30s, &seconds);
  done = true;
  EXPECT_FALSE(body.has_value());
}

// A body that trickles a byte at a time never falls silent for a whole timeout; the timeout
// still bounds the whole read.
TEST(HttpProgressReader, ATrickleEndsAtTheTimeout) {
  std::atomic<bool> done{false};
  LoopbackServer server([&](int conn, const LoopbackServer::Request&) {
    if (!Send(conn, kHead + "\r\n{\"step\": 1, \"pad\": \""))
      return;
    while (!done.load() && Send(conn, "x"))
      std::this_thread::sleep_for(50ms);
  });
  double seconds = 0;
  const auto body = ReadWithin(server.port(), 1000ms, 30s, &seconds);
  done = true;
  EXPECT_FALSE(body.has_value());
  EXPECT_LT(seconds, 10.0);
}

// A finite body far larger than any progress document is refused, not parsed.
TEST(HttpProgressReader, ABodyOverTheLimitIsRefused) {
  LoopbackServer server([](int conn, const LoopbackServer::Request&) {
    const std::string body = std::string(8 << 20, ' ') + R"({"step": 7})";
    Send(conn, kHead + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  });
  double seconds = 0;
  EXPECT_FALSE(ReadWithin(server.port(), 5000ms, 30s, &seconds).has_value());
}

// An answer with a Content-Length ends there, however its header is spelled, even when the
// server keeps the connection open; bytes past the length are not part of it.
TEST(HttpProgressReader, AnAnswerWithALengthEndsAtItsLength) {
  for (const std::string length :
       {"Content-Length: 11", "content-length:11", "CONTENT-LENGTH:   11"}) {
    std::atomic<bool> done{false};
    LoopbackServer server([&](int conn, const LoopbackServer::Request&) {
      Send(conn, "HTTP/1.1 200 OK\r\n" + length + "\r\n\r\n{\"step\": 3}");
      while (!done.load())
        std::this_thread::sleep_for(10ms);
    });
    double seconds = 0;
    const auto body = ReadWithin(server.port(), 10000ms, 30s, &seconds);
    done = true;
    ASSERT_TRUE(body.has_value()) << length;
    EXPECT_EQ(body->at("step"), 3) << length;
  }
  LoopbackServer server([](int conn, const LoopbackServer::Request&) {
    Send(conn, kHead + "Content-Length: 11\r\n\r\n{\"step\": 3} and more");
  });
  double seconds = 0;
  const auto body = ReadWithin(server.port(), 2000ms, 20s, &seconds);
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(body->at("step"), 3);
}

// A body cut short of its Content-Length by the timeout is not read, even where the part that
// came is a document.
TEST(HttpProgressReader, AnAnswerShorterThanItsLengthIsNothing) {
  std::atomic<bool> done{false};
  LoopbackServer server([&](int conn, const LoopbackServer::Request&) {
    Send(conn, kHead + "Content-Length: 100\r\n\r\n{\"step\": 3}");
    while (!done.load())
      std::this_thread::sleep_for(10ms);
  });
  double seconds = 0;
  const auto body = ReadWithin(server.port(), 500ms, 30s, &seconds);
  done = true;
  EXPECT_FALSE(body.has_value());
}

// The limit holds to the byte: a whole answer one byte over it is refused, and an endless one
// is read no further than the limit (what the server could send is the limit plus what the
// sockets buffer, not what a second of reading would take).
TEST(HttpProgressReader, AnAnswerOverTheLimitByAByteIsRefusedAndNoMoreIsRead) {
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: ";
  const std::string document = R"({"step": 7})";
  // head + digits + "\r\n\r\n" + body == the limit + 1, the body padded with spaces.
  const size_t digits = std::to_string(api::kMaxProgressResponseBytes).size();
  const size_t body_size = api::kMaxProgressResponseBytes + 1 - head.size() - digits - 4;
  const std::string body = std::string(body_size - document.size(), ' ') + document;
  const std::string answer = head + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(answer.size(), api::kMaxProgressResponseBytes + 1);
  LoopbackServer over([&](int conn, const LoopbackServer::Request&) { Send(conn, answer); });
  double seconds = 0;
  EXPECT_FALSE(ReadWithin(over.port(), 5000ms, 30s, &seconds).has_value());
  LoopbackServer fits([&](int conn, const LoopbackServer::Request&) {
    Send(conn, answer.substr(0, head.size()) + std::to_string(body.size() - 1) + "\r\n\r\n" +
                   body.substr(1));
  });
  EXPECT_TRUE(ReadWithin(fits.port(), 5000ms, 30s, &seconds).has_value());

  std::atomic<size_t> sent{0};
  LoopbackServer endless([&](int conn, const LoopbackServer::Request&) {
    const std::string chunk(64 * 1024, ' ');
    if (!Send(conn, kHead + "\r\n"))
      return;
    while (Send(conn, chunk))
      sent += chunk.size();
  });
  EXPECT_FALSE(ReadWithin(endless.port(), 2000ms, 30s, &seconds).has_value());
  EXPECT_LT(sent.load(), size_t{64} << 20);
}

// A port is one of 1..65535: 65536 + p is refused, not wrapped round to p.
TEST(HttpProgressReader, APortOutsideTheRangeIsNothing) {
  LoopbackServer server([](int conn, const LoopbackServer::Request&) {
    Send(conn, kHead + "Content-Length: 11\r\n\r\n{\"step\": 3}");
  });
  double seconds = 0;
  EXPECT_TRUE(ReadWithin(server.port(), 2000ms, 20s, &seconds).has_value());
  EXPECT_FALSE(ReadWithin(server.port() + 65536, 2000ms, 20s, &seconds).has_value());
}

}  // namespace
}  // namespace tessera::reconcile
