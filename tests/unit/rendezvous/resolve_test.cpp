// Host lookup with a deadline (io::Resolve): a resolver that never answers must not hold a
// rank past its connect timeout.
#include <gtest/gtest.h>
#include <netdb.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "worker/rendezvous/socket_io.h"
#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_server.h"

namespace tessera::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A resolver that answers only when a test lets it, as a DNS server that drops queries
// (glibc then waits timeout × attempts per nameserver); `calls` counts the lookups begun.
struct StuckResolver {
  static inline std::mutex mu;
  static inline std::condition_variable cv;
  static inline bool released = false;
  static inline int calls = 0;

  static int Resolve(const char* host, const char* service, const addrinfo* hints,
                     addrinfo** result) {
    std::unique_lock<std::mutex> lock(mu);
    ++calls;
    cv.wait(lock, [] { return released; });
    return ::getaddrinfo(host, service, hints, result);
  }
  static void Reset() {
    std::lock_guard<std::mutex> lock(mu);
    released = false;
    calls = 0;
  }
  // Lets every lookup left behind finish, so none outlives the test.
  static void Release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
};

class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override { StuckResolver::Reset(); }
  void TearDown() override { StuckResolver::Release(); }

  // A store on loopback, and options of a client that looks its host up with StuckResolver.
  StoreClientOptions StartStoreForAStuckLookup(std::chrono::milliseconds connect_timeout) {
    StoreServerOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.token = "t";
    server_ = StoreServer::Start(so);
    StoreClientOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    o.token = "t";
    o.connect_timeout = connect_timeout;
    o.resolver = &StuckResolver::Resolve;
    return o;
  }

  std::unique_ptr<StoreServer> server_;
};

TEST_F(ResolveTest, AnAnsweringResolverGivesTheAddresses) {
  const io::Resolved r = io::Resolve("127.0.0.1", 29500, Clock::now() + 10s);
  ASSERT_NE(r.list, nullptr) << r.error;
  EXPECT_TRUE(r.error.empty());
  EXPECT_EQ(r.list->ai_socktype, SOCK_STREAM);
}

TEST_F(ResolveTest, AnUnknownHostSaysWhy) {
  // .invalid never resolves (RFC 2606); the lookup fails at once without a network.
  const io::Resolved r = io::Resolve("no-such-host.invalid", 29500, Clock::now() + 30s);
  EXPECT_EQ(r.list, nullptr);
  EXPECT_NE(r.error.find("cannot resolve host"), std::string::npos) << r.error;
}

TEST_F(ResolveTest, AResolverThatDoesNotAnswerIsLeftAtTheDeadline) {
  auto lookup = std::async(std::launch::async, [] {
    return io::Resolve("127.0.0.1", 29500, Clock::now() + 200ms, &StuckResolver::Resolve);
  });
  if (lookup.wait_for(20s) != std::future_status::ready) {
    StuckResolver::Release();  // before the future's destructor waits for the lookup
    FAIL() << "Resolve waited for the stuck resolver";
  }
  const io::Resolved r = lookup.get();
  EXPECT_EQ(r.list, nullptr);
  EXPECT_NE(r.error.find("no answer from the resolver"), std::string::npos) << r.error;
  std::lock_guard<std::mutex> lock(StuckResolver::mu);
  EXPECT_EQ(StuckResolver::calls, 1);
}

TEST_F(ResolveTest, AClientGivesUpAtItsConnectTimeoutWhileTheLookupHangs) {
  const StoreClientOptions o = StartStoreForAStuckLookup(300ms);
  auto connect = std::async(std::launch::async, [&]() -> std::string {
    try {
      StoreClient c(o);
      return "connected through a resolver that never answered";
    } catch (const StoreTimeoutError& e) {
      return e.what();
    }
  });
  if (connect.wait_for(20s) != std::future_status::ready) {
    StuckResolver::Release();
    FAIL() << "the client waited for the stuck resolver";
  }
  const std::string what = connect.get();
  EXPECT_NE(what.find("no answer from the resolver"), std::string::npos) << what;
  EXPECT_NE(what.find("TESSERA_RDZV_ENDPOINT"), std::string::npos) << what;
}

TEST_F(ResolveTest, TheClientConnectsOnceTheResolverAnswers) {
  const StoreClientOptions o = StartStoreForAStuckLookup(10s);
  StuckResolver::Release();
  StoreClient c(o);
  c.Set("k", "v");
  EXPECT_EQ(c.Get("k"), "v");
}

}  // namespace
}  // namespace tessera::rendezvous
