#include "controller/k8s/connect.h"

#include "controller/k8s/transport_cpprest.h"

namespace tessera::k8s {

Result<std::unique_ptr<Connection>, std::string> Connect(const std::string& kubeconfig,
                                                         RestOptions options,
                                                         const std::string& context) {
  auto config = LoadDefaultConfig(kubeconfig, context);
  if (!config.ok())
    return config.error();
  auto transport = NewCpprestTransport(*config);
  if (!transport.ok())
    return config->server + ": " + transport.error();
  auto connection = std::make_unique<Connection>();
  connection->config = std::move(*config);
  connection->transport = std::move(*transport);
  connection->client =
      std::make_unique<RestClient>(*connection->transport, connection->config, std::move(options));
  return connection;
}

}  // namespace tessera::k8s
