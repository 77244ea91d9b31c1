// Kubeconfig and in-cluster parsing: tables of inline kubeconfigs and what they must yield.
#include "controller/k8s/config.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>
#include <fstream>
#include <optional>

namespace tessera::k8s {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("k8s-config-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void Write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary | std::ios::trunc) << content;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

const char* kTwoContexts = R"(
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: Y2EtcGVt
- name: prod
  cluster:
    server: https://prod.example:443
    certificate-authority: ca.crt
contexts:
- name: dev
  context: {cluster: local, user: admin, namespace: team-a}
- name: ops
  context: {cluster: prod, user: robot}
- name: files
  context: {cluster: prod, user: filed}
- name: broken-user
  context: {cluster: local, user: nobody}
- name: broken-cluster
  context: {cluster: nowhere, user: admin}
users:
- name: admin
  user:
    client-certificate-data: Y2VydC1wZW0=
    client-key-data: a2V5LXBlbQ==
- name: robot
  user:
    token: s3cr3t
- name: filed
  user:
    client-certificate: certs/client.crt
    client-key: certs/client.key
    tokenFile: token
)";

struct KubeconfigCase {
  const char* name;
  std::string context;
  // expectations when it loads
  std::string server, ca, cert, key, token, ns;
  // otherwise: a substring of the one-line error
  std::string error;
};

TEST(K8sKubeconfigTest, ContextsResolveToServerCredentialsAndNamespace) {
  TempDir dir;
  dir.Write("ca.crt", "file-ca");
  fs::create_directories(dir.path() / "certs");
  dir.Write("certs/client.crt", "file-cert");
  dir.Write("certs/client.key", "file-key");
  dir.Write("token", "file-token\n");
  const KubeconfigCase cases[] = {
      {"current context, inline data", "", "https://127.0.0.1:6443", "ca-pem", "cert-pem",
       "key-pem", "", "team-a", ""},
      {"token user, CA file", "ops", "https://prod.example:443", "file-ca", "", "", "s3cr3t",
       "default", ""},
      {"relative files and token file", "files", "https://prod.example:443", "file-ca", "file-cert",
       "file-key", "file-token", "default", ""},
      {"unknown context", "nope", "", "", "", "", "", "", "no context named \"nope\""},
      {"unknown user", "broken-user", "", "", "", "", "", "", "no user named \"nobody\""},
      {"unknown cluster", "broken-cluster", "", "", "", "", "", "", "no cluster named \"nowhere\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto config = ParseKubeconfig(kTwoContexts, dir.path(), c.context, "kc.yaml");
    if (!c.error.empty()) {
      ASSERT_FALSE(config.ok());
      EXPECT_NE(config.error().find(c.error), std::string::npos) << config.error();
      EXPECT_EQ(config.error().rfind("kc.yaml: ", 0), 0u) << "names the file: " << config.error();
      continue;
    }
    ASSERT_TRUE(config.ok()) << config.error();
    EXPECT_EQ(config->server, c.server);
    EXPECT_EQ(config->ca_pem, c.ca);
    EXPECT_EQ(config->client_cert_pem, c.cert);
    EXPECT_EQ(config->client_key_pem, c.key);
    EXPECT_EQ(config->token ? config->token->Token() : "", c.token);
    EXPECT_EQ(config->namespace_, c.ns);
  }
}

TEST(K8sKubeconfigTest, MalformedInputsGiveOneLineErrors) {
  struct Case {
    const char* name;
    std::string yaml;
    std::string error;
  };
  const Case cases[] = {
      {"not yaml", "a: [1, 2", "not valid YAML"},
      {"nested too deeply", std::string(100000, '[') + std::string(100000, ']'),
       "not valid YAML: line 1: nested too deeply"},
      {"not a mapping", "- 1\n- 2\n", "expected a mapping"},
      {"no current context", "apiVersion: v1\nclusters: []\n", "current-context is not set"},
      {"empty server",
       "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
       "clusters: [{name: k, cluster: {server: ''}}]\n",
       "cluster.server is empty"},
      {"cluster entry without its cluster",
       "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k}]\n",
       "cluster.server is empty"},
      {"bad base64",
       "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
       "clusters: [{name: k, cluster: {server: 'https://x', certificate-authority-data: '@@'}}]\n",
       "certificate-authority-data: not valid base64"},
      {"missing CA file",
       "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
       "clusters: [{name: k, cluster: {server: 'https://x', certificate-authority: nope.crt}}]\n",
       "certificate-authority: cannot read"},
      {"certificate without key",
       "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
       "clusters: [{name: k, cluster: {server: 'https://x'}}]\n"
       "users: [{name: u, user: {client-certificate-data: Y2VydC1wZW0=}}]\n",
       "must be given together"},
      {"exec plugin only",
       "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
       "clusters: [{name: k, cluster: {server: 'https://x'}}]\n"
       "users: [{name: u, user: {exec: {command: aws}}}]\n",
       "exec and auth-provider credentials are not supported"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto config = ParseKubeconfig(c.yaml, fs::temp_directory_path(), "", "kc.yaml");
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.error().find(c.error), std::string::npos) << config.error();
    EXPECT_EQ(config.error().find('\n'), std::string::npos) << "one line: " << config.error();
  }
}

TEST(K8sKubeconfigTest, ClusterTlsSettingsAndExecUsersWithATokenAreRead) {
  const std::string yaml =
      "current-context: c\n"
      "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
      "clusters: [{name: k, cluster: {server: 'https://x:6443//', insecure-skip-tls-verify: true,"
      " tls-server-name: api.internal}}]\n"
      "users: [{name: u, user: {token: t, exec: {command: aws}}}]\n";
  auto config = ParseKubeconfig(yaml, fs::temp_directory_path(), "", "kc.yaml");
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->server, "https://x:6443") << "every trailing slash goes";
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->tls_server_name, "api.internal");
  EXPECT_EQ(config->token->Token(), "t") << "the exec plugin is not needed beside a token";
}

// $KUBECONFIG may list several files (as kubectl merges them); the first one is read.
TEST(K8sKubeconfigTest, DefaultConfigReadsTheFirstFileOfKubeconfig) {
  TempDir dir;
  dir.Write("first",
            "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
            "clusters: [{name: k, cluster: {server: 'https://first'}}]\n");
  const char* saved = std::getenv("KUBECONFIG");
  const std::optional<std::string> previous =
      saved ? std::optional<std::string>(saved) : std::nullopt;
  ::setenv("KUBECONFIG",
           ((dir.path() / "first").string() + ":" + (dir.path() / "second").string()).c_str(), 1);
  auto config = LoadDefaultConfig("");
  if (previous)
    ::setenv("KUBECONFIG", previous->c_str(), 1);
  else
    ::unsetenv("KUBECONFIG");
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->server, "https://first");
}
TEST(K8sKubeconfigTest, LoadFromFileNamesMissingFile) {
  auto config = LoadKubeconfig("/nonexistent/kubeconfig");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.error().find("/nonexistent/kubeconfig"), std::string::npos);
}

// An endless file is refused at 16 MiB rather than read until memory runs out.
TEST(K8sKubeconfigTest, AnEndlessFileIsRefusedNamingIt) {
  auto config = LoadKubeconfig("/dev/zero");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error(),
            "cannot read kubeconfig /dev/zero (missing, unreadable or over 16 MiB); check "
            "--kubeconfig");
  auto token = TokenSource::FromFile("/dev/zero");
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.error(), "cannot read token file /dev/zero");
}

TEST(K8sBase64Test, DecodesStandardAlphabetAndRejectsGarbage) {
  struct Case {
    std::string in;
    std::optional<std::string> out;
  };
  const Case cases[] = {
      {"", std::string("")},
      {"Zg==", std::string("f")},
      {"Zm8=", std::string("fo")},
      {"Zm9v", std::string("foo")},
      {"Zm9vYg", std::string("foob")},  // unpadded
      {"Zm9v\nYmFy\n", std::string("foobar")},
      {"+/8=", std::string("\xfb\xff", 2)},
      {"Zm9v!", std::nullopt},
      {"Zg==Zg", std::nullopt},  // data after padding
      {"Z", std::nullopt},       // a lone character carries no byte
      {"Zg===", std::nullopt},   // more padding than any group has
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.in);
    EXPECT_EQ(DecodeBase64(c.in), c.out);
  }
}

TEST(K8sInClusterTest, ReadsServiceAccountAndEnvironment) {
  TempDir dir;
  dir.Write("token", "sa-token\n");
  dir.Write("ca.crt", "cluster-ca");
  dir.Write("namespace", "tessera-system\n");
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.0.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  auto config = LoadInClusterConfig(&env, dir.path());
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->server, "https://10.0.0.1:443");
  EXPECT_EQ(config->ca_pem, "cluster-ca");
  EXPECT_EQ(config->token->Token(), "sa-token");
  EXPECT_EQ(config->namespace_, "tessera-system");

  env["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  config = LoadInClusterConfig(&env, dir.path());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->server, "https://[fd00::1]:443");

  std::map<std::string, std::string> empty;
  config = LoadInClusterConfig(&empty, dir.path());
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.error().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  std::map<std::string, std::string> no_port = {{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}};
  config = LoadInClusterConfig(&no_port, dir.path());
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.error().find("KUBERNETES_SERVICE_PORT"), std::string::npos);

  fs::remove(dir.path() / "token");
  config = LoadInClusterConfig(&env, dir.path());
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.error().find("token"), std::string::npos);
}

TEST(K8sTokenSourceTest, RereadsTheFileWhenItChanges) {
  TempDir dir;
  dir.Write("token", "first");
  auto source = TokenSource::FromFile(dir.path() / "token");
  ASSERT_TRUE(source.ok());
  EXPECT_EQ((*source)->Token(), "first");
  // Rotate: a new token (different size) with a modification time clearly in the future.
  dir.Write("token", "second-token\n");
  fs::last_write_time(dir.path() / "token",
                      fs::last_write_time(dir.path() / "token") + std::chrono::seconds(5));
  EXPECT_EQ((*source)->Token(), "second-token");
  // Rewritten within the same modification time: the new size gives it away.
  const auto stamp = fs::last_write_time(dir.path() / "token");
  dir.Write("token", "third");
  fs::last_write_time(dir.path() / "token", stamp);
  EXPECT_EQ((*source)->Token(), "third");
  // Caught half-written (empty), or vanished: the last good token stays.
  dir.Write("token", "\n");
  fs::last_write_time(dir.path() / "token", stamp + std::chrono::seconds(5));
  EXPECT_EQ((*source)->Token(), "third");
  fs::remove(dir.path() / "token");
  EXPECT_EQ((*source)->Token(), "third");
  EXPECT_FALSE(TokenSource::FromFile(dir.path() / "missing").ok());
}

}  // namespace
}  // namespace tessera::k8s
