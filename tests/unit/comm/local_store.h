// The in-process store of the comm tests: a server on a free localhost port, and the options of
// a client of it whose connects and calls give up after `timeout`.
#pragma once

#include <chrono>
#include <memory>

#include "worker/rendezvous/store_client.h"
#include "worker/rendezvous/store_server.h"

namespace tessera::comm::test {

inline std::unique_ptr<rendezvous::StoreServer> StartLocalStore() {
  rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  return rendezvous::StoreServer::Start(options);
}

inline rendezvous::StoreClientOptions LocalStoreClient(const rendezvous::StoreServer& server,
                                                       std::chrono::milliseconds timeout) {
  rendezvous::StoreClientOptions options;
  options.port = server.port();
  options.connect_timeout = options.timeout = timeout;
  return options;
}

}  // namespace tessera::comm::test
