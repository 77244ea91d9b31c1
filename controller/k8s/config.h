// How to reach and authenticate to a Kubernetes API server: loaded from a kubeconfig file or
// from the in-cluster service account. Parsing only; it opens no connection.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "controller/k8s/result.h"

namespace tessera::k8s {

// A bearer token, fixed or read from a file that may be rotated underneath us (projected
// service-account tokens are refreshed by the kubelet). Thread-safe.
class TokenSource {
 public:
  // A token that never changes.
  static std::shared_ptr<TokenSource> Fixed(std::string token);
  // A token re-read from `path` whenever the file's modification time or size changes.
  // The file is read now; an unreadable file gives an error.
  static Result<std::shared_ptr<TokenSource>, std::string> FromFile(std::filesystem::path path);

  // The current token. When the file can no longer be read, the last good token.
  std::string Token();

 private:
  TokenSource() = default;
  std::mutex mu_;
  std::string token_;
  std::filesystem::path path_;  // empty for a fixed token
  std::filesystem::file_time_type mtime_{};
  uintmax_t size_ = 0;
};

// Everything a transport and the REST client need. PEM material is held in memory.
struct ClientConfig {
  std::string server;           // "https://127.0.0.1:6443"
  std::string ca_pem;           // trust these CAs; empty: the system's
  std::string client_cert_pem;  // client certificate (chain) and its key, or both empty
  std::string client_key_pem;
  std::shared_ptr<TokenSource> token;  // null: no bearer token
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;         // verify the server's certificate for this name
  std::string namespace_ = "default";  // the context's (or service account's) namespace
  std::string user_agent = "tessera-controller";
};

// Loads `path` (YAML). Uses `context` or, when empty, current-context. Relative file names in
// the kubeconfig are relative to its directory. Errors are one line naming the file and field.
Result<ClientConfig, std::string> LoadKubeconfig(const std::filesystem::path& path,
                                                 const std::string& context = "");
// Parses kubeconfig text; `base_dir` resolves relative file names; `origin` names it in errors.
Result<ClientConfig, std::string> ParseKubeconfig(const std::string& yaml,
                                                  const std::filesystem::path& base_dir,
                                                  const std::string& context = "",
                                                  const std::string& origin = "kubeconfig");

// In-cluster configuration: server from KUBERNETES_SERVICE_HOST/PORT in `env` (the process
// environment when null), token/ca.crt/namespace under `account_dir`.
Result<ClientConfig, std::string> LoadInClusterConfig(
    const std::map<std::string, std::string>* env = nullptr,
    const std::filesystem::path& account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// The usual order: an explicit --kubeconfig; else $KUBECONFIG (its first entry); else
// in-cluster when KUBERNETES_SERVICE_HOST is set; else ~/.kube/config.
Result<ClientConfig, std::string> LoadDefaultConfig(const std::string& kubeconfig_flag,
                                                    const std::string& context = "");

// Standard base64 (with or without padding, whitespace ignored). nullopt when malformed.
std::optional<std::string> DecodeBase64(std::string_view in);

}  // namespace tessera::k8s
