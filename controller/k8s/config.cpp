#include "controller/k8s/config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

namespace tessera::k8s {
namespace {

// A kubeconfig, certificate or token file is a few KiB; one over 16 MiB (/dev/zero, the wrong
// file) is not read to its end.
constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::string out;
  char chunk[64 * 1024];
  while (out.size() <= kMaxConfigFileBytes &&
         in.read(chunk, static_cast<std::streamsize>(sizeof(chunk))).gcount() > 0) {
    out.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad() || out.size() > kMaxConfigFileBytes)
    return std::nullopt;
  return out;
}

std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(s.find_last_not_of(ws) + 1);
  s.erase(0, s.find_first_not_of(ws));
  return s;
}

// Finds the entry called `name` in a kubeconfig list (clusters, users, contexts) and
// returns its `field` map (cluster, user, context).
std::optional<YAML::Node> FindNamed(const YAML::Node& list, const std::string& name,
                                    const char* field) {
  if (!list || !list.IsSequence())
    return std::nullopt;
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name) {
      return entry[field] ? entry[field] : YAML::Node(YAML::NodeType::Map);
    }
  }
  return std::nullopt;
}

std::string Str(const YAML::Node& node, const char* key) {
  return node[key] && node[key].IsScalar() ? node[key].as<std::string>() : std::string();
}

// Reads PEM material given either inline as base64 (`data_key`) or as a file (`file_key`)
// into `out` (left empty when neither is set). Returns an error line, or nullopt.
std::optional<std::string> Material(const YAML::Node& node, const char* data_key,
                                    const char* file_key, const std::filesystem::path& base_dir,
                                    const std::string& where, std::string* out) {
  if (std::string data = Str(node, data_key); !data.empty()) {
    auto decoded = DecodeBase64(data);
    if (!decoded)
      return where + "." + data_key + ": not valid base64";
    *out = *decoded;
  } else if (std::string file = Str(node, file_key); !file.empty()) {
    std::filesystem::path p(file);
    if (p.is_relative())
      p = base_dir / p;
    auto content = ReadFile(p);
    if (!content)
      return where + "." + file_key + ": cannot read " + p.string();
    *out = *content;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> DecodeBase64(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '+')
      return 62;
    if (c == '/')
      return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  int pad = 0;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
      continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    int v = value(c);
    if (v < 0 || pad > 0)
      return std::nullopt;  // bad character, or data after padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2 || bits >= 6)
    return std::nullopt;  // a lone trailing character
  return out;
}

std::shared_ptr<TokenSource> TokenSource::Fixed(std::string token) {
  std::shared_ptr<TokenSource> source(new TokenSource());
  source->token_ = std::move(token);
  return source;
}

Result<std::shared_ptr<TokenSource>, std::string> TokenSource::FromFile(
    std::filesystem::path path) {
  std::shared_ptr<TokenSource> source(new TokenSource());
  source->path_ = std::move(path);
  auto content = ReadFile(source->path_);
  if (!content)
    return "cannot read token file " + source->path_.string();
  std::error_code ec;
  source->mtime_ = std::filesystem::last_write_time(source->path_, ec);
  source->size_ = std::filesystem::file_size(source->path_, ec);
  source->token_ = Trim(*content);
  return source;
}

std::string TokenSource::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  if (path_.empty())
    return token_;
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(path_, ec);
  if (ec)
    return token_;
  auto size = std::filesystem::file_size(path_, ec);
  if (ec || (mtime == mtime_ && size == size_))
    return token_;
  if (auto content = ReadFile(path_)) {
    std::string token = Trim(*content);
    if (!token.empty()) {
      token_ = std::move(token);
      mtime_ = mtime;
      size_ = size;
    }
  }
  return token_;
}

Result<ClientConfig, std::string> ParseKubeconfig(const std::string& yaml,
                                                  const std::filesystem::path& base_dir,
                                                  const std::string& context,
                                                  const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::DeepRecursion& e) {  // its own message is "bad file"
    return origin + ": not valid YAML: line " + std::to_string(e.mark.line + 1) +
           ": nested too deeply (beyond yaml-cpp's recursion limit)";
  } catch (const YAML::Exception& e) {
    return origin + ": not valid YAML: " + e.what();
  }
  if (!root.IsMap())
    return origin + ": not a kubeconfig (expected a mapping)";
  try {
    std::string context_name = context.empty() ? Str(root, "current-context") : context;
    if (context_name.empty()) {
      return origin + ": current-context is not set; pass a context or set one with kubectl";
    }
    auto found_ctx = FindNamed(root["contexts"], context_name, "context");
    if (!found_ctx)
      return origin + ": contexts: no context named \"" + context_name + "\"";
    const YAML::Node ctx = *found_ctx;
    std::string cluster_name = Str(ctx, "cluster");
    std::string user_name = Str(ctx, "user");
    auto found_cluster = FindNamed(root["clusters"], cluster_name, "cluster");
    if (!found_cluster) {
      return origin + ": clusters: no cluster named \"" + cluster_name + "\" (used by context \"" +
             context_name + "\")";
    }
    const YAML::Node cluster = *found_cluster;
    ClientConfig config;
    config.server = Str(cluster, "server");
    if (config.server.empty()) {
      return origin + ": clusters[" + cluster_name + "].cluster.server is empty";
    }
    while (!config.server.empty() && config.server.back() == '/')
      config.server.pop_back();
    std::string cluster_where = origin + ": clusters[" + cluster_name + "].cluster";
    if (auto err = Material(cluster, "certificate-authority-data", "certificate-authority",
                            base_dir, cluster_where, &config.ca_pem)) {
      return *err;
    }
    config.insecure_skip_tls_verify =
        cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
    config.tls_server_name = Str(cluster, "tls-server-name");
    if (std::string ns = Str(ctx, "namespace"); !ns.empty())
      config.namespace_ = ns;

    if (!user_name.empty()) {
      auto found_user = FindNamed(root["users"], user_name, "user");
      if (!found_user)
        return origin + ": users: no user named \"" + user_name + "\"";
      const YAML::Node user = *found_user;
      std::string user_where = origin + ": users[" + user_name + "].user";
      if (auto err = Material(user, "client-certificate-data", "client-certificate", base_dir,
                              user_where, &config.client_cert_pem)) {
        return *err;
      }
      if (auto err = Material(user, "client-key-data", "client-key", base_dir, user_where,
                              &config.client_key_pem)) {
        return *err;
      }
      if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
        return user_where + ": client certificate and client key must be given together";
      }
      if (std::string token = Str(user, "token"); !token.empty()) {
        config.token = TokenSource::Fixed(token);
      } else if (std::string file = Str(user, "tokenFile"); !file.empty()) {
        std::filesystem::path p(file);
        if (p.is_relative())
          p = base_dir / p;
        auto source = TokenSource::FromFile(p);
        if (!source.ok())
          return user_where + ".tokenFile: " + source.error();
        config.token = *source;
      }
      if (user["exec"] || user["auth-provider"]) {
        if (config.client_cert_pem.empty() && !config.token) {
          return user_where +
                 ": exec and auth-provider credentials are not supported; use a "
                 "client certificate or a token";
        }
      }
    }
    return config;
  } catch (const YAML::Exception& e) {
    return origin + ": malformed kubeconfig: " + e.what();
  }
}

Result<ClientConfig, std::string> LoadKubeconfig(const std::filesystem::path& path,
                                                 const std::string& context) {
  auto content = ReadFile(path);
  if (!content)
    return "cannot read kubeconfig " + path.string() + " (missing, unreadable or over " +
           std::to_string(kMaxConfigFileBytes >> 20) + " MiB); check --kubeconfig";
  return ParseKubeconfig(*content, path.parent_path(), context, path.string());
}

Result<ClientConfig, std::string> LoadInClusterConfig(const std::map<std::string, std::string>* env,
                                                      const std::filesystem::path& account_dir) {
  auto get = [env](const char* name) -> std::string {
    if (env) {
      auto it = env->find(name);
      return it == env->end() ? std::string() : it->second;
    }
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  std::string host = get("KUBERNETES_SERVICE_HOST");
  std::string port = get("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return std::string(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
        "set; pass --kubeconfig");
  }
  ClientConfig config;
  bool ipv6 = host.find(':') != std::string::npos;
  config.server = "https://" + (ipv6 ? "[" + host + "]" : host) + ":" + port;
  auto token = TokenSource::FromFile(account_dir / "token");
  if (!token.ok())
    return "in-cluster: " + token.error();
  config.token = *token;
  auto ca = ReadFile(account_dir / "ca.crt");
  if (!ca)
    return "in-cluster: cannot read " + (account_dir / "ca.crt").string();
  config.ca_pem = *ca;
  if (auto ns = ReadFile(account_dir / "namespace")) {
    if (std::string trimmed = Trim(*ns); !trimmed.empty())
      config.namespace_ = trimmed;
  }
  return config;
}

Result<ClientConfig, std::string> LoadDefaultConfig(const std::string& kubeconfig_flag,
                                                    const std::string& context) {
  if (!kubeconfig_flag.empty())
    return LoadKubeconfig(kubeconfig_flag, context);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env) {
    std::string first(env);
    first = first.substr(0, first.find(':'));
    return LoadKubeconfig(first, context);
  }
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST"); host && *host) {
    return LoadInClusterConfig();
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    std::filesystem::path p = std::filesystem::path(home) / ".kube" / "config";
    if (std::filesystem::exists(p))
      return LoadKubeconfig(p, context);
  }
  return std::string(
      "no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG, or run in a "
      "cluster");
}

}  // namespace tessera::k8s
