// The cpprestsdk transport refuses unusable configuration up front, with one line naming the
// field. (Its TLS and streaming are exercised against a real server in tests/cluster/k8s.)
#include "controller/k8s/transport_cpprest.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

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

// Each case in a child process: SSL_CERT_FILE is process-wide and set at most once.
std::string CaFileAfter(const char* preset, const std::vector<ClientConfig>& configs) {
  if (preset == nullptr)
    unsetenv("SSL_CERT_FILE");
  else
    setenv("SSL_CERT_FILE", preset, 1);
  for (const ClientConfig& c : configs) {
    if (!NewCpprestTransport(c).ok())
      return "refused";
  }
  const char* now = std::getenv("SSL_CERT_FILE");
  return now == nullptr ? "unset" : now;
}

TEST(K8sCpprestTransportTest, SystemCaBundleIsSkippedOnlyWhenNoConnectionCanUseIt) {
  ClientConfig system_cas;  // https without a CA of its own: the system's bundle is its trust
  system_cas.server = "https://127.0.0.1:6443";
  ClientConfig insecure = system_cas;
  insecure.insecure_skip_tls_verify = true;
  ClientConfig plain;
  plain.server = "http://127.0.0.1:8080";
  auto expect = [](const char* preset, std::vector<ClientConfig> configs, const char* want) {
    EXPECT_EXIT(std::exit(CaFileAfter(preset, configs) == want ? 0 : 1), testing::ExitedWithCode(0),
                "")
        << "want SSL_CERT_FILE " << want;
  };
  expect(nullptr, {system_cas}, "unset");
  expect(nullptr, {plain}, "unset");
  expect(nullptr, {insecure}, "/dev/null");
  expect(nullptr, {insecure, system_cas}, "/dev/null");
  expect("/etc/my-cas.pem", {insecure}, "/dev/null");
  expect("/etc/my-cas.pem", {system_cas}, "/etc/my-cas.pem");
}

}  // namespace
}  // namespace tessera::k8s
