// The cpprestsdk transport refuses unusable configuration up front, with one line naming the
// field. (Its TLS and streaming are exercised against a real server in tests/cluster/k8s.)
#include "controller/k8s/transport_cpprest.h"

#include <gtest/gtest.h>

namespace tessera::k8s {
namespace {

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

}  // namespace
}  // namespace tessera::k8s
