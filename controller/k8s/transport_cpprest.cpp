// The one file that knows cpprestsdk (DESIGN.md §5): replace it to change HTTP libraries.
#include "controller/k8s/transport_cpprest.h"

#include <cpprest/http_client.h>
#include <cpprest/producerconsumerstream.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <atomic>
#include <boost/asio/ssl.hpp>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::k8s {
namespace {

namespace http = web::http;
namespace ssl = boost::asio::ssl;

// OpenSSL reads the default CA file's path from SSL_CERT_FILE each time a context loads the
// default paths, as cpprestsdk does for every new connection before ApplyTls replaces the
// store. When the kubeconfig names its own CA (or verification is off) that parse of the whole
// system bundle is wasted: it was 64% of the controller's CPU while it created a 64-worker gang
// over new connections (perf, 2-core machine; 16 creates in flight, a connection each). So the
// first such transport points SSL_CERT_FILE at an empty file, once per process, and remembers
// the file it named (else OpenSSL's built-in one): a transport without a CA loads that file
// itself (ApplyTls), so each transport keeps the trust it had.
std::string g_system_ca_file;  // written once, before g_system_ca_file_moved is set
std::atomic<bool> g_system_ca_file_moved{false};

void SkipSystemCaBundle(const ClientConfig& config) {
  if (config.ca_pem.empty() && !config.insecure_skip_tls_verify)
    return;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* named = std::getenv("SSL_CERT_FILE");
    g_system_ca_file = named != nullptr ? named : X509_get_default_cert_file();
    if (setenv("SSL_CERT_FILE", "/dev/null", /*overwrite=*/1) == 0)
      g_system_ca_file_moved = true;
  });
}

// Frees OpenSSL objects held by unique_ptr.
struct OpenSslFree {
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
};
template <typename T>
using OpenSslPtr = std::unique_ptr<T, OpenSslFree>;

// The kubeconfig's PEM material, decoded once per transport. cpprestsdk builds a new SSL context
// for every connection; each takes references to these objects (ApplyTls) instead of decoding
// the PEM again, which was most of the rest of a new connection's CPU time once
// SkipSystemCaBundle had removed the bundle's parse (decoding the client key alone ~8%).
struct TlsMaterial {
  OpenSslPtr<X509_STORE> store;         // only the kubeconfig's CA; null: the system's bundle
  OpenSslPtr<X509> cert;                // the client certificate; null: none
  std::vector<OpenSslPtr<X509>> chain;  // certificates after it in client-certificate
  OpenSslPtr<EVP_PKEY> key;
};

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  ERR_clear_error();
  char text[256] = "no PEM data";
  if (code != 0)
    ERR_error_string_n(code, text, sizeof text);
  return text;
}

// Every certificate in `pem`, in order; empty (with `error` set) when there is none or one is
// malformed.
std::vector<OpenSslPtr<X509>> ReadCertificates(const std::string& pem, std::string& error) {
  std::vector<OpenSslPtr<X509>> out;
  OpenSslPtr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  ERR_clear_error();
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
    out.emplace_back(cert);
  // The loop ends with "no start line" at the end of the text; any other error is real.
  const unsigned long last = ERR_peek_last_error();  // NOLINT(google-runtime-int)
  if (!out.empty() && ERR_GET_LIB(last) == ERR_LIB_PEM &&
      ERR_GET_REASON(last) == PEM_R_NO_START_LINE)
    ERR_clear_error();
  if (out.empty() || ERR_peek_error() != 0) {
    error = OpenSslError();
    out.clear();
  }
  return out;
}

// OpenSSL fills a certificate's cache of decoded extensions (key identifiers, basic
// constraints, purposes) the first time a verification or a handshake looks at them. The
// certificates decoded here are shared by every connection's SSL context, so that first fill
// would race between connections set up at once (ThreadSanitizer reported it inside libcrypto:
// ASN1_STRING_set on a shared certificate against ASN1_STRING_cmp on another thread). Filling
// it here, before any connection shares the certificate, leaves the connections only reading.
void CacheExtensions(X509* cert) {
  (void)X509_check_purpose(cert, -1, 0);  // -1: no purpose checked, only the cache filled
}

// Decodes the PEM material; an error line naming the field instead of throwing.
Result<std::shared_ptr<const TlsMaterial>, std::string> DecodeTls(const ClientConfig& config) {
  auto m = std::make_shared<TlsMaterial>();
  std::string error;
  if (!config.ca_pem.empty()) {
    auto cas = ReadCertificates(config.ca_pem, error);
    if (cas.empty())
      return "certificate-authority: not a PEM certificate (" + error + ")";
    m->store.reset(X509_STORE_new());
    for (auto& ca : cas) {
      CacheExtensions(ca.get());
      X509_STORE_add_cert(m->store.get(), ca.get());  // takes its own reference
    }
  }
  if (!config.client_cert_pem.empty()) {
    auto certs = ReadCertificates(config.client_cert_pem, error);
    if (certs.empty())
      return "client-certificate: not a PEM certificate (" + error + ")";
    for (auto& c : certs)
      CacheExtensions(c.get());
    m->cert = std::move(certs.front());
    std::move(certs.begin() + 1, certs.end(), std::back_inserter(m->chain));
    OpenSslPtr<BIO> bio(BIO_new_mem_buf(config.client_key_pem.data(),
                                        static_cast<int>(config.client_key_pem.size())));
    m->key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    if (!m->key || X509_check_private_key(m->cert.get(), m->key.get()) != 1)
      return "client-key: not a PEM private key matching the certificate (" + OpenSslError() + ")";
  }
  return std::shared_ptr<const TlsMaterial>(std::move(m));
}

// Gives a new connection's SSL context the decoded material. cpprestsdk calls this on a context
// it has already pointed at the default paths (set_default_verify_paths; SkipSystemCaBundle
// empties them). With the kubeconfig's own CA the store is replaced by the shared one holding
// only that CA, as client-go trusts only the CA it is given; without one the system's bundle is
// the trust.
void ApplyTls(ssl::context& ctx, const TlsMaterial& m, bool insecure_skip_tls_verify) {
  SSL_CTX* native = ctx.native_handle();
  if (m.store) {
    SSL_CTX_set1_cert_store(native, m.store.get());  // frees the default paths' store
  } else if (g_system_ca_file_moved && !insecure_skip_tls_verify) {
    // The system's bundle, which the default paths no longer name (errors ignored, as
    // OpenSSL's own load of the default paths does).
    boost::system::error_code ec;
    ctx.load_verify_file(g_system_ca_file, ec);
  }
  if (m.cert) {
    SSL_CTX_use_certificate(native, m.cert.get());  // each call takes its own reference
    for (const auto& c : m.chain)
      SSL_CTX_add1_chain_cert(native, c.get());
    SSL_CTX_use_PrivateKey(native, m.key.get());
  }
}

// Waits until `task` has finished or `deadline` has come, whichever is first; true when it
// finished. (pplx tasks have no timed wait.)
template <typename T>
bool FinishesBy(const pplx::task<T>& task, std::chrono::steady_clock::time_point deadline) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto state = std::make_shared<Done>();
  task.then([state](pplx::task<T>) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->done = true;
    state->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(state->mu);
  return state->cv.wait_until(lock, deadline, [&state] { return state->done; });
}

std::string Lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class CpprestTransport final : public HttpTransport {
 public:
  CpprestTransport(ClientConfig config, std::shared_ptr<const TlsMaterial> tls)
      : config_(std::move(config)), tls_(std::move(tls)) {}

  Result<HttpResponse> Send(const HttpRequest& request) override {
    // Cancelling the token makes cpprestsdk close the connection, which ends the exchange; the
    // deadline, having no timer of its own here, cancels it the same way.
    pplx::cancellation_token_source source;
    const uint64_t reg =
        request.cancel != nullptr ? request.cancel->Register([&source] { source.cancel(); }) : 0;
    struct Unregister {
      Cancellation* c;
      uint64_t id;
      ~Unregister() {
        if (c != nullptr)
          c->Unregister(id);
      }
    } unregister{request.cancel, reg};
    bool deadline_passed = false;
    try {
      pplx::task<HttpResponse> exchange =
          Client(request.timeout).request(ToCpprest(request), source.get_token()).then(ReadWhole);
      if (request.deadline && !FinishesBy(exchange, *request.deadline)) {
        deadline_passed = true;
        source.cancel();
      }
      return exchange.get();
    } catch (const std::exception& e) {
      if (request.cancel != nullptr && request.cancel->IsCancelled())
        return ApiError{0, "Cancelled", "request cancelled"};
      if (deadline_passed)
        return ApiError{0, "Timeout", "no response before the deadline"};
      return Failure(e);
    }
  }

  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view line)>& on_line,
                              Cancellation& cancel) override {
    pplx::cancellation_token_source source;
    uint64_t reg = cancel.Register([&source] { source.cancel(); });
    struct Unregister {
      Cancellation& c;
      uint64_t id;
      ~Unregister() { c.Unregister(id); }
    } unregister{cancel, reg};
    try {
      http::http_response response =
          Client(request.timeout).request(ToCpprest(request), source.get_token()).get();
      HttpResponse out = Headers(response);
      if (out.status < 200 || out.status >= 300) {
        out.body = response.extract_utf8string(true).get();
        return out;
      }
      // Not istream::read_line: it takes a task and a lock per byte, and watch streams of
      // whole pods made that most of the controller's CPU time. Wait for one byte, then take
      // all the body already holds, a block at a time (acquire and release each hold the
      // buffer's lock; in_avail() would read the count without it while an I/O thread writes
      // it), and cut lines from that.
      auto body = response.body().streambuf();
      using Traits = concurrency::streams::streambuf<uint8_t>::traits;
      std::string pending;                        // received, after the last complete line
      constexpr size_t kStreamChunk = 64 * 1024;  // taken at most between two cuts of lines
      while (!cancel.IsCancelled()) {
        const auto c = body.bumpc().get();  // waits for data, or the end of the body
        if (c == Traits::eof())
          break;
        pending.push_back(static_cast<char>(c));
        uint8_t* block = nullptr;
        for (size_t n = 0, taken = 0; taken < kStreamChunk && body.acquire(block, n) && n > 0;
             taken += n) {
          pending.append(reinterpret_cast<const char*>(block), n);
          body.release(block, n);
        }
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          std::string_view line(pending.data() + start, nl - start);
          if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
          if (!line.empty() && !on_line(line))
            return out;
        }
        pending.erase(0, start);
      }
      if (!pending.empty() && !cancel.IsCancelled())
        on_line(pending);
      return out;
    } catch (const std::exception& e) {
      if (cancel.IsCancelled())
        return ApiError{0, "Cancelled", "stream cancelled"};
      return Failure(e);
    }
  }

 private:
  // One client per timeout value: cpprestsdk fixes the timeout per client. Clients are
  // thread-safe and pool their connections.
  http::client::http_client& Client(std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clients_.find(timeout.count());
    if (it != clients_.end())
      return *it->second;
    http::client::http_client_config cc;
    cc.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    // Redirects are not followed: an API server never sends one, following it would send our
    // Authorization header to wherever the Location points, and cpprestsdk 2.10's redirect
    // follower copies the request's headers on the calling thread after the request has gone
    // to an I/O thread, which may be adding Content-Type to that same map (a data race that
    // ThreadSanitizer showed with an instrumented cpprestsdk). A 3xx comes back as a value.
    cc.set_max_redirects(0);
    cc.set_validate_certificates(!config_.insecure_skip_tls_verify);
    cc.set_ssl_context_callback([tls = tls_, insecure = config_.insecure_skip_tls_verify](
                                    ssl::context& ctx) { ApplyTls(ctx, *tls, insecure); });
    auto client = std::make_unique<http::client::http_client>(config_.server, cc);
    return *clients_.emplace(timeout.count(), std::move(client)).first->second;
  }

  http::http_request ToCpprest(const HttpRequest& request) const {
    http::http_request req(request.method);
    req.set_request_uri(request.path);
    for (const auto& [name, value] : request.headers) {
      if (Lower(name) != "content-type")
        req.headers().add(name, value);
    }
    req.headers().add("User-Agent", config_.user_agent);
    if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
        request.method == "PATCH") {
      auto ct = request.headers.find("Content-Type");
      req.set_body(request.body,
                   ct == request.headers.end() ? std::string("application/json") : ct->second);
    }
    return req;
  }

  // The response with its whole body, once read.
  static pplx::task<HttpResponse> ReadWhole(http::http_response response) {
    return response.extract_utf8string(true).then([head = Headers(response)](std::string body) {
      HttpResponse out = head;
      out.body = std::move(body);
      return out;
    });
  }

  static HttpResponse Headers(const http::http_response& response) {
    HttpResponse out;
    out.status = response.status_code();
    for (const auto& [name, value] : response.headers())
      out.headers[Lower(name)] = value;
    return out;
  }

  static ApiError Failure(const std::exception& e) {
    std::string what = e.what();
    bool timeout = Lower(what).find("timed out") != std::string::npos ||
                   Lower(what).find("timeout") != std::string::npos;
    return ApiError{0, timeout ? "Timeout" : "Transport", what};
  }

  ClientConfig config_;
  std::shared_ptr<const TlsMaterial> tls_;
  std::mutex mu_;
  std::map<int64_t, std::unique_ptr<http::client::http_client>> clients_;
};

}  // namespace

Result<std::unique_ptr<HttpTransport>, std::string> NewCpprestTransport(
    const ClientConfig& config) {
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
    return "server \"" + config.server + "\": must start with https:// or http://";
  }
  if (!config.tls_server_name.empty()) {
    return std::string(
        "tls-server-name is not supported; connect to a name the certificate covers");
  }
  auto tls = DecodeTls(config);
  if (!tls.ok())
    return tls.error();
  // cpprestsdk creates its task scheduler lazily, on the first request; created here, before
  // the informers' threads send their first requests at once, no thread sees it half made
  // (ThreadSanitizer reported that first use racing between two reflectors).
  (void)pplx::get_ambient_scheduler();
  if (config.server.rfind("https://", 0) == 0)
    SkipSystemCaBundle(config);
  try {
    web::uri check(config.server);
    (void)check;
  } catch (const std::exception& e) {
    return "server \"" + config.server + "\": " + e.what();
  }
  return std::unique_ptr<HttpTransport>(new CpprestTransport(config, std::move(*tls)));
}

}  // namespace tessera::k8s
