// Factory for the real HTTP transport (TLS with client certificates or bearer tokens over
// cpprestsdk). Only transport_cpprest.cpp includes cpprestsdk; this header does not.
#pragma once

#include <memory>
#include <string>

#include "controller/k8s/config.h"
#include "controller/k8s/transport.h"

namespace tessera::k8s {

// A transport to `config.server` trusting `config.ca_pem` and presenting the client
// certificate, if any. Bearer tokens are not its business (the REST client adds them).
// Fails with one line when the PEM material cannot be loaded. The first https transport with
// its own CA (or verification off) sets SSL_CERT_FILE=/dev/null in this process: cpprestsdk
// parses the default CA file for every new connection, and such a transport never uses it;
// transports without a CA load the file SSL_CERT_FILE named before (or OpenSSL's default)
// themselves. Create it before starting threads that read the environment.
Result<std::unique_ptr<HttpTransport>, std::string> NewCpprestTransport(const ClientConfig& config);

}  // namespace tessera::k8s
