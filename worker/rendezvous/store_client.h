// Client of the rendezvous store (DESIGN.md §3, §6). Connects to rank 0's store, retrying
// DNS resolution and connection until a deadline, so a worker that starts first waits.
// A call that fails mid-way closes the connection; the next call connects again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "worker/rendezvous/frame.h"
#include "worker/rendezvous/socket_io.h"
#include "worker/rendezvous/store_error.h"

namespace tessera::rendezvous {

struct StoreClientOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string token;
  // How long to keep retrying DNS and connect (the store may not be up yet).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(300)};
  // Default deadline of each call (waits and gets use it unless given their own).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Called after each failed connection attempt with the reason (for logs and tests).
  std::function<void(const std::string&)> on_retry;
  // Looks the host up (null: getaddrinfo). A lookup that has not answered by the connect
  // deadline is abandoned (io::Resolve).
  io::Resolver resolver = nullptr;

  // Reads TESSERA_RDZV_ENDPOINT ("host:port", or "[v6]:port"), TESSERA_RDZV_TOKEN and
  // TESSERA_RDZV_TIMEOUT (seconds, applies to both timeouts). Throws StoreError with a
  // one-line message naming the variable when one is malformed or the endpoint is unset.
  static StoreClientOptions FromEnv();
};

// Parses "host:port" / "[v6]:port"; nullopt when malformed (port must be 1..65535).
std::optional<std::pair<std::string, int>> ParseEndpoint(const std::string& endpoint);

// Thread-safe: calls are serialized over one connection (a blocking Wait holds it; use
// Clone() for a second connection). Every call has a deadline and throws
// StoreTimeoutError when it passes, StoreConnectionError when the server went away,
// StoreAuthError when the token was refused.
class StoreClient {
 public:
  // Connects and authenticates, retrying until options.connect_timeout.
  explicit StoreClient(StoreClientOptions options);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // A new connection to the same store with the same options.
  std::unique_ptr<StoreClient> Clone() const;

  void Set(const std::string& key, const std::string& value);
  // Waits until `key` exists (up to `timeout`, default options.timeout) and returns it.
  std::string Get(const std::string& key, std::optional<std::chrono::milliseconds> timeout = {});
  // Returns the value now, or nullopt when the key does not exist.
  std::optional<std::string> TryGet(const std::string& key);
  // Blocks until every key exists and returns their values, in order; StoreTimeoutError
  // lists the missing ones.
  std::vector<std::string> Wait(const std::vector<std::string>& keys,
                                std::optional<std::chrono::milliseconds> timeout = {});
  // Atomically adds `delta` to the integer at `key` (absent = 0) and returns the result.
  int64_t Add(const std::string& key, int64_t delta);
  // Sets `key` to `desired` if it currently holds `expected` (nullopt: if it does not exist).
  // Returns true when it did; otherwise `current` (if given) receives the value found
  // (nullopt when absent).
  bool CompareSet(const std::string& key, const std::optional<std::string>& expected,
                  const std::string& desired, std::optional<std::string>* current = nullptr);
  // Removes `key`; true when it existed.
  bool Delete(const std::string& key);
  // Keys starting with `prefix`, sorted.
  std::vector<std::string> List(const std::string& prefix);
  // Asks the server to set `key` = `value` if this connection drops without ClearWills()
  // (a crashed process), unless `key` exists by then. Used to report lost ranks.
  void AddWill(const std::string& key, const std::string& value);
  // The clean goodbye: forgets this connection's wills, waiting at most `timeout` (a courtesy
  // on the way out, which a hung store must not hold up). Nothing to do when the connection
  // has already dropped: the server has set its wills then.
  void ClearWills(std::chrono::milliseconds timeout);

  // Breaks a call blocked in another thread (it throws StoreConnectionError). After this the
  // client is unusable. Safe from any thread.
  void Interrupt();

  const StoreClientOptions& options() const { return options_; }
  // "host:port" for messages.
  std::string endpoint() const;

 private:
  Response Call(const Request& request, std::chrono::steady_clock::time_point deadline);
  void Connect();
  void CloseLocked();

  StoreClientOptions options_;
  std::mutex mu_;  // one call at a time
  std::atomic<int> fd_{-1};
  std::atomic<bool> interrupted_{false};
};

// Blocks until `size` participants called it with the same `name` (each name is used once).
// Built on Add and Wait; throws StoreTimeoutError naming how many arrived.
void StoreBarrier(StoreClient& client, const std::string& name, int size,
                  std::chrono::milliseconds timeout);

}  // namespace tessera::rendezvous
