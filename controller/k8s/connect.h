// One call from "where is my cluster" to a ready RestClient: loads the configuration
// (--kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config) and builds the real transport.
// What a main() needs; tests build the pieces themselves.
#pragma once

#include <memory>
#include <string>

#include "controller/k8s/config.h"
#include "controller/k8s/rest.h"
#include "controller/k8s/transport.h"

namespace tessera::k8s {

// Owns the transport the client talks through. Thread-safe as RestClient is. Not movable:
// the client refers to the transport.
struct Connection {
  ClientConfig config;
  std::unique_ptr<HttpTransport> transport;
  std::unique_ptr<RestClient> client;
};

// Loads the configuration (see LoadDefaultConfig; `kubeconfig` empty = the usual search)
// and connects lazily (no request is sent). Errors are one line for the user (exit code 2).
Result<std::unique_ptr<Connection>, std::string> Connect(const std::string& kubeconfig,
                                                         RestOptions options = {},
                                                         const std::string& context = "");

}  // namespace tessera::k8s
