// The Kubernetes client against a real kube-apiserver (the `cluster` fixture; KUBECONFIG
// names its admin user): TLS with a client certificate, bearer tokens, CRUD with 404 / 409 /
// 422, an informer following REST writes, 410 Gone for a too-old watch, Events, and leader
// election between two candidates on one Lease. Everything happens in a namespace of its own.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "controller/k8s/config.h"
#include "controller/k8s/connect.h"
#include "controller/k8s/events.h"
#include "controller/k8s/informer.h"
#include "controller/k8s/leader_election.h"
#include "controller/k8s/rest.h"
#include "controller/k8s/transport_cpprest.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds limit = 30s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(20ms);  // polling a condition, bounded by the deadline
  }
  return pred();
}

// A fresh P-256 private key in PEM: a key that matches no certificate of the cluster.
std::string NewEcKeyPem() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr)
    return "";
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);  // NOLINT(google-runtime-int): OpenSSL's type
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  EVP_PKEY_free(key);
  return pem;
}

class K8sClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    counters_ = new RequestCounters();
    RestOptions options;
    options.observer = counters_->Observer();
    auto connection = Connect("", options);  // $KUBECONFIG: the fixture's admin
    ASSERT_TRUE(connection.ok()) << connection.error();
    connection_ = connection->release();
    config_ = &connection_->config;
    transport_ = connection_->transport.get();
    client_ = connection_->client.get();
    std::mt19937 rng(std::random_device{}());
    ns_ = "k8s-client-" + std::to_string(getpid()) + "-" + std::to_string(rng() % 100000);
    auto created = client_->Create(Namespaces(), {{"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok()) << created.error().ToString();
  }
  static void TearDownTestSuite() {
    if (client_)
      client_->Delete(Namespaces().Named(ns_));
    delete connection_;
    delete counters_;
  }
  static Json ConfigMap(const std::string& name, Json data = Json::object()) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}, {"labels", {{"suite", "k8s"}}}}},
            {"data", data}};
  }

  static inline Connection* connection_ = nullptr;
  static inline ClientConfig* config_ = nullptr;
  static inline HttpTransport* transport_ = nullptr;
  static inline RequestCounters* counters_ = nullptr;
  static inline RestClient* client_ = nullptr;
  static inline std::string ns_;
};

TEST_F(K8sClusterTest, ConfigMapCrudWithNotFoundConflictAndInvalid) {
  auto cms = ConfigMaps(ns_);
  auto created = client_->Create(cms, ConfigMap("crud", {{"a", "1"}}));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  std::string uid = (*created)["metadata"]["uid"];
  EXPECT_TRUE(client_->Create(cms, ConfigMap("crud")).error().IsAlreadyExists());

  auto got = client_->Get(cms.Named("crud"));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["data"]["a"], "1");

  Json first = *got;
  first["data"]["a"] = "2";
  auto updated = client_->Update(cms.Named("crud"), first);
  ASSERT_TRUE(updated.ok()) << updated.error().ToString();
  first["data"]["a"] = "3";  // still the old resourceVersion
  auto stale = client_->Update(cms.Named("crud"), first);
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(stale.error().IsConflict()) << stale.error().ToString();
  EXPECT_NE(stale.error().message.find("modified"), std::string::npos);

  auto merged = client_->Patch(cms.Named("crud"), PatchType::kMerge, {{"data", {{"b", "x"}}}});
  ASSERT_TRUE(merged.ok()) << merged.error().ToString();
  EXPECT_EQ((*merged)["data"], Json({{"a", "2"}, {"b", "x"}}));
  auto jp = client_->Patch(cms.Named("crud"), PatchType::kJson,
                           Json::array({{{"op", "replace"}, {"path", "/data/b"}, {"value", "y"}}}));
  ASSERT_TRUE(jp.ok()) << jp.error().ToString();
  EXPECT_EQ((*jp)["data"]["b"], "y");
  auto sp = client_->Patch(cms.Named("crud"), PatchType::kStrategic, {{"data", {{"c", "z"}}}});
  ASSERT_TRUE(sp.ok()) << sp.error().ToString();

  ListOptions by_label;
  by_label.label_selector = "suite=k8s";
  auto list = client_->List(cms, by_label);
  ASSERT_TRUE(list.ok());
  EXPECT_GE((*list)["items"].size(), 1u);
  EXPECT_FALSE((*list)["metadata"]["resourceVersion"].get<std::string>().empty());

  auto invalid = client_->Create(cms, ConfigMap("Not_A_Valid_Name"));
  ASSERT_FALSE(invalid.ok());
  EXPECT_TRUE(invalid.error().IsInvalid()) << invalid.error().ToString();

  DeleteOptions del;
  del.propagation_policy = "Background";
  del.grace_period_seconds = 0;
  del.precondition_uid = "not-the-uid";
  EXPECT_EQ(client_->Delete(cms.Named("crud"), del).error().code, 409) << "precondition fails";
  del.precondition_uid = uid;
  ASSERT_TRUE(client_->Delete(cms.Named("crud"), del).ok());
  auto missing = client_->Get(cms.Named("crud"));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.error().IsNotFound());
  EXPECT_EQ(missing.error().reason, "NotFound");

  EXPECT_GE(counters_->Get("create", 201), 1);
  EXPECT_GE(counters_->Get("update", 409), 1);
  EXPECT_GE(counters_->Get("get", 404), 1);
  EXPECT_GE(counters_->Get("create", 422), 1);
}

TEST_F(K8sClusterTest, InformerSeesAddsUpdatesAndDeletesMadeWithRest) {
  auto cms = ConfigMaps(ns_);
  ASSERT_TRUE(client_->Create(cms, ConfigMap("inf-0")).ok());
  InformerOptions options;
  options.label_selector = "suite=k8s";
  Informer informer(*client_, cms, options);
  informer.AddIndex("suite", IndexByLabel("suite"));
  std::mutex mu;
  std::vector<std::string> seen;
  auto push = [&](std::string s) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(std::move(s));
  };
  auto has = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    return std::find(seen.begin(), seen.end(), s) != seen.end();
  };
  informer.AddHandlers(
      {[&](const ObjectPtr& o) { push("add " + (*o)["metadata"]["name"].get<std::string>()); },
       [&](const ObjectPtr&, const ObjectPtr& o) {
         push("update " + (*o)["metadata"]["name"].get<std::string>());
       },
       [&](const ObjectPtr& o) { push("delete " + (*o)["metadata"]["name"].get<std::string>()); }});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(30s));
  EXPECT_TRUE(has("add inf-0"));
  EXPECT_NE(informer.Get(ns_ + "/inf-0"), nullptr);

  ASSERT_TRUE(client_->Create(cms, ConfigMap("inf-1", {{"v", "1"}})).ok());
  ASSERT_TRUE(Eventually([&] { return has("add inf-1"); }));
  ASSERT_TRUE(client_->Patch(cms.Named("inf-1"), PatchType::kMerge, {{"data", {{"v", "2"}}}}).ok());
  ASSERT_TRUE(Eventually([&] { return has("update inf-1"); }));
  EXPECT_EQ((*informer.Get(ns_ + "/inf-1"))["data"]["v"], "2");
  EXPECT_EQ(informer.ByIndex("suite", "k8s").size(), 2u);
  ASSERT_TRUE(client_->Delete(cms.Named("inf-0")).ok());
  ASSERT_TRUE(Eventually([&] { return has("delete inf-0"); }));
  EXPECT_EQ(informer.Get(ns_ + "/inf-0"), nullptr);
  // Not labelled: outside the informer's selector.
  ASSERT_TRUE(client_->Create(cms, {{"metadata", {{"name", "unlabelled"}}}}).ok());
  ASSERT_TRUE(client_->Delete(cms.Named("inf-1")).ok());
  ASSERT_TRUE(Eventually([&] { return has("delete inf-1"); }));
  EXPECT_FALSE(has("add unlabelled"));
  informer.Stop();
}

// A transport that rewinds the first watch request to resourceVersion=1, so the real
// server answers 410 Gone and the reflector has to relist.
class RewindFirstWatch : public HttpTransport {
 public:
  explicit RewindFirstWatch(HttpTransport& inner) : inner_(inner) {}
  Result<HttpResponse> Send(const HttpRequest& request) override { return inner_.Send(request); }
  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view)>& on_line,
                              Cancellation& cancel) override {
    HttpRequest copy = request;
    if (!rewound_.exchange(true)) {
      auto at = copy.path.find("resourceVersion=");
      auto end = copy.path.find('&', at);
      copy.path.replace(at, end - at, "resourceVersion=1");
    }
    return inner_.Stream(copy, on_line, cancel);
  }

 private:
  HttpTransport& inner_;
  std::atomic<bool> rewound_{false};
};

// A CustomResourceDefinition of the test's own. Its watch cache starts at the revision the
// CRD was created at, so a watch from resourceVersion 1 is certainly too old (the core
// kinds' caches start near revision 1 on a fresh control plane, and etcd compaction does
// not touch the cache).
TEST_F(K8sClusterTest, TooOldWatchIsGoneAndTheInformerRelists) {
  const std::string group = ns_ + ".test.tessera.dev";
  const ResourceRef crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", "", ""};
  Json crd = {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", "widgets." + group}}},
      {"spec",
       {{"group", group},
        {"scope", "Namespaced"},
        {"names", {{"kind", "Widget"}, {"plural", "widgets"}, {"listKind", "WidgetList"}}},
        {"versions", Json::array({{{"name", "v1"},
                                   {"served", true},
                                   {"storage", true},
                                   {"schema",
                                    {{"openAPIV3Schema",
                                      {{"type", "object"},
                                       {"x-kubernetes-preserve-unknown-fields", true}}}}}}})}}}};
  ASSERT_TRUE(client_->Create(crds, crd).ok());
  struct Cleanup {
    ResourceRef ref;
    ~Cleanup() { client_->Delete(ref); }
  } cleanup{crds.Named("widgets." + group)};
  const ResourceRef widgets{group, "v1", "widgets", ns_, ""};
  auto widget = [&](const std::string& name) {
    return Json{{"apiVersion", group + "/v1"}, {"kind", "Widget"}, {"metadata", {{"name", name}}}};
  };
  ASSERT_TRUE(Eventually([&] { return client_->List(widgets).ok(); })) << "CRD never served";
  auto w0 = client_->Create(widgets, widget("w0"));
  ASSERT_TRUE(w0.ok()) << w0.error().ToString();

  // The REST level: 410 as the real server sends it (an ERROR event with code 410).
  Cancellation cancel;
  WatchOptions options;
  options.resource_version = "1";
  options.timeout_seconds = 5;
  Status s = client_->Watch(
      widgets, options, [](const WatchEvent&) { return true; }, cancel);
  ASSERT_FALSE(s.ok()) << "a watch from resourceVersion 1 should have expired";
  EXPECT_TRUE(s.error().IsGone()) << s.error().ToString();
  EXPECT_EQ(s.error().code, 410);

  // The informer: its first watch is rewound, gets 410, and it lists again, then follows.
  RewindFirstWatch rewind(*transport_);
  RequestCounters counters;
  RestOptions rest;
  rest.observer = counters.Observer();
  RestClient client(rewind, *config_, rest);
  InformerOptions io;
  std::atomic<int> restarts{0};
  io.reflector.on_watch_restart = [&] { ++restarts; };
  Informer informer(client, widgets, io);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(30s));
  ASSERT_TRUE(Eventually([&] { return counters.Get("list", 200) == 2; })) << "no relist after 410";
  EXPECT_EQ(restarts.load(), 1);
  EXPECT_GE(counters.Get("watch", 200), 1) << "the rewound watch was answered 200 + ERROR 410";
  ASSERT_TRUE(client_->Create(widgets, widget("w1")).ok());
  ASSERT_TRUE(Eventually([&] { return informer.Get(ns_ + "/w1") != nullptr; }));
  EXPECT_NE(informer.Get(ns_ + "/w0"), nullptr);
  informer.Stop();
}

TEST_F(K8sClusterTest, WatchIsCancelledPromptly) {
  Cancellation cancel;
  WatchOptions options;
  options.timeout_seconds = 60;
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);  // let the watch get established; not a wait-for
    cancel.Cancel();
  });
  auto start = std::chrono::steady_clock::now();
  Status s = client_->Watch(
      ConfigMaps(ns_), options, [](const WatchEvent&) { return true; }, cancel);
  canceller.join();
  EXPECT_TRUE(s.ok()) << s.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "did not wait for the server";
}

TEST_F(K8sClusterTest, EventsAreAcceptedByTheServer) {
  auto cm = client_->Create(ConfigMaps(ns_), ConfigMap("ev"));
  ASSERT_TRUE(cm.ok());
  EventRecorder recorder(*client_, {"tessera.dev/controller", "k8s-cluster-test"});
  Status s = recorder.Record(*cm, "Normal", "Tested", "Test", "an event from the k8s client test");
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  auto list = client_->List(Events(ns_));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 1u);
  const Json& e = (*list)["items"][0];
  EXPECT_EQ(e["reason"], "Tested");
  EXPECT_EQ(e["regarding"]["uid"], (*cm)["metadata"]["uid"]);
  EXPECT_EQ(e["reportingController"], "tessera.dev/controller");
}

TEST_F(K8sClusterTest, BearerTokenAuthenticatesAServiceAccount) {
  ASSERT_TRUE(
      client_->Create({"", "v1", "serviceaccounts", ns_, ""}, {{"metadata", {{"name", "robot"}}}})
          .ok());
  Json request = {{"apiVersion", "authentication.k8s.io/v1"},
                  {"kind", "TokenRequest"},
                  {"spec", {{"expirationSeconds", 600}}}};
  // TokenRequest is a subresource: POST .../serviceaccounts/robot/token.
  HttpRequest raw;
  raw.method = "POST";
  raw.path = ResourceRef{"", "v1", "serviceaccounts", ns_, "robot"}.Path("token");
  raw.headers["Content-Type"] = "application/json";
  raw.body = request.dump();
  auto response = transport_->Send(raw);
  ASSERT_TRUE(response.ok());
  ASSERT_EQ(response->status, 201) << response->body;
  std::string jwt = Json::parse(response->body)["status"]["token"];

  ClientConfig as_robot = *config_;
  as_robot.client_cert_pem.clear();
  as_robot.client_key_pem.clear();
  as_robot.token = TokenSource::Fixed(jwt);
  auto robot_transport = NewCpprestTransport(as_robot);
  ASSERT_TRUE(robot_transport.ok());
  RestClient robot(**robot_transport, as_robot);
  auto denied = robot.List(Secrets(ns_));
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().code, 403)
      << "authenticated (not 401) but not authorised: " << denied.error().ToString();
  EXPECT_NE(denied.error().message.find("system:serviceaccount:" + ns_ + ":robot"),
            std::string::npos);

  as_robot.token = TokenSource::Fixed("not-a-token");
  auto anon_transport = NewCpprestTransport(as_robot);
  RestClient bad(**anon_transport, as_robot);
  EXPECT_EQ(bad.List(Secrets(ns_)).error().code, 401);
}

TEST_F(K8sClusterTest, TransportRefusesAServerWithTheWrongCa) {
  ClientConfig wrong = *config_;
  wrong.ca_pem.clear();  // the system CAs do not know the test cluster's CA
  auto transport = NewCpprestTransport(wrong);
  ASSERT_TRUE(transport.ok());
  RestClient client(**transport, wrong);
  auto r = client.Get(Namespaces().Named(ns_));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().IsTransport()) << r.error().ToString();

  ClientConfig garbage = *config_;
  garbage.client_key_pem = "not a key";
  EXPECT_FALSE(NewCpprestTransport(garbage).ok());

  // A well-formed key of another pair is refused up front too, naming the field.
  ClientConfig other_key = *config_;
  other_key.client_key_pem = NewEcKeyPem();
  ASSERT_NE(other_key.client_key_pem.find("PRIVATE KEY"), std::string::npos);
  auto refused = NewCpprestTransport(other_key);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("client-key: not a PEM private key matching"), std::string::npos)
      << refused.error();

  // So is a CA bundle whose second certificate is damaged.
  ClientConfig damaged = *config_;
  damaged.ca_pem += "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
  auto bad_ca = NewCpprestTransport(damaged);
  ASSERT_FALSE(bad_ca.ok());
  EXPECT_NE(bad_ca.error().find("certificate-authority: not a PEM certificate"), std::string::npos)
      << bad_ca.error();
}

struct Candidate {
  Candidate(RestClient& client, const std::string& ns, const std::string& id, bool release,
            std::atomic<int>& leaders, std::atomic<int>& max_leaders) {
    LeaderElectionConfig c;
    c.lease_namespace = ns;
    c.lease_name = "k8s-client-test";
    c.identity = id;
    c.lease_duration = 2000ms;
    c.renew_deadline = 1500ms;
    c.retry_period = 200ms;
    c.release_on_cancel = release;
    c.on_started_leading = [&leaders, &max_leaders, this] {
      int now = ++leaders;
      int seen = max_leaders.load();
      while (now > seen && !max_leaders.compare_exchange_weak(seen, now)) {
      }
      started = true;
    };
    c.on_stopped_leading = [&leaders] { --leaders; };
    elector = std::make_unique<LeaderElector>(client, c);
    thread = std::thread([this] { elector->Run(stop); });
  }
  void Stop() {
    stop.Cancel();
    if (thread.joinable())
      thread.join();
  }
  ~Candidate() { Stop(); }
  std::unique_ptr<LeaderElector> elector;
  Cancellation stop;
  std::thread thread;
  std::atomic<bool> started{false};
};

TEST_F(K8sClusterTest, LeaderElectionOneLeadsOthersTakeOver) {
  std::atomic<int> leaders{0}, max_leaders{0};
  auto a = std::make_unique<Candidate>(*client_, ns_, "a", /*release=*/false, leaders, max_leaders);
  ASSERT_TRUE(Eventually([&] { return a->started.load(); }));
  auto b = std::make_unique<Candidate>(*client_, ns_, "b", true, leaders, max_leaders);
  auto c = std::make_unique<Candidate>(*client_, ns_, "c", true, leaders, max_leaders);
  ASSERT_TRUE(Eventually(
      [&] { return b->elector->ObservedLeader() == "a" && c->elector->ObservedLeader() == "a"; }));
  EXPECT_FALSE(b->started || c->started);

  // a stops renewing without releasing (a crash): one of b, c takes over after the lease.
  auto stopped = std::chrono::steady_clock::now();
  a->Stop();
  ASSERT_TRUE(Eventually([&] { return b->started || c->started; }));
  auto waited = std::chrono::steady_clock::now() - stopped;
  EXPECT_GE(waited, 2000ms - 200ms) << "took a Lease that had not expired";
  EXPECT_LT(waited, 2000ms + 5s);
  EXPECT_EQ(max_leaders.load(), 1);

  // The new leader releases on stop: the last one takes over without waiting out the lease.
  Candidate& next = b->started ? *b : *c;
  Candidate& last = b->started ? *c : *b;
  stopped = std::chrono::steady_clock::now();
  next.Stop();
  ASSERT_TRUE(Eventually([&] { return last.started.load(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 1500ms);
  EXPECT_EQ(max_leaders.load(), 1);
  auto lease = client_->Get(Leases(ns_).Named("k8s-client-test"));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], last.elector->ObservedLeader());
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 2);
}

}  // namespace
}  // namespace tessera::k8s

namespace tessera::k8s {
namespace {

// A transport without a CA of its own trusts the bundle SSL_CERT_FILE named when the process
// started, even after a transport with its own CA has pointed SSL_CERT_FILE at /dev/null (the
// controller's progress poller, say, beside its kubeconfig's client). Here that bundle is the
// test cluster's CA, so only a transport that still loads it can connect. Registered as its
// own ctest (k8s_client_system_cas): SSL_CERT_FILE is moved once per process, and the
// suite above moves it first. (TransportRefusesAServerWithTheWrongCa is the other half: a
// bundle without the cluster's CA is refused.)
TEST(K8sSystemCaTest, TransportWithoutACaTrustsTheBundleSslCertFileNamed) {
  auto config = LoadDefaultConfig("");
  ASSERT_TRUE(config.ok()) << config.error();
  ASSERT_FALSE(config->ca_pem.empty()) << "the fixture's kubeconfig names its CA";
  const std::string bundle =
      testing::TempDir() + "/system-cas-" + std::to_string(getpid()) + ".pem";
  {
    std::ofstream out(bundle);
    out << config->ca_pem;
  }
  ASSERT_EQ(setenv("SSL_CERT_FILE", bundle.c_str(), 1), 0);

  auto own_ca = NewCpprestTransport(*config);
  ASSERT_TRUE(own_ca.ok()) << own_ca.error();
  ASSERT_STREQ(std::getenv("SSL_CERT_FILE"), "/dev/null");
  RestClient first(**own_ca, *config);
  ASSERT_TRUE(first.Get(Namespaces().Named("default")).ok());

  ClientConfig system_cas = *config;
  system_cas.ca_pem.clear();
  auto transport = NewCpprestTransport(system_cas);
  ASSERT_TRUE(transport.ok()) << transport.error();
  RestClient client(**transport, system_cas);
  auto got = client.Get(Namespaces().Named("default"));
  EXPECT_TRUE(got.ok()) << got.error().ToString();
  std::remove(bundle.c_str());
}

// kube-apiserver restarted under a running informer: the watch fails, the reflector backs
// off and reconnects (relisting if its version is no longer served), and the informer
// follows writes made after the restart. Registered RUN_SERIAL (the outage would disturb
// other tests).
TEST(K8sApiServerRestartTest, InformerRecoversAfterTheApiServerRestarts) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_TRUE(source && std::getenv("TESSERA_CLUSTER_DIR"))
      << "run through ctest (-L cluster): it needs the fixture's TESSERA_* variables";
  RequestCounters counters;
  RestOptions options;
  options.observer = counters.Observer();
  auto connection = Connect("", options);
  ASSERT_TRUE(connection.ok()) << connection.error();
  RestClient& client = *(*connection)->client;
  std::string ns = "k8s-restart-" + std::to_string(getpid());
  ASSERT_TRUE(client.Create(Namespaces(), {{"metadata", {{"name", ns}}}}).ok());
  struct Cleanup {
    RestClient& client;
    std::string ns;
    ~Cleanup() { client.Delete(Namespaces().Named(ns)); }
  } cleanup{client, ns};

  InformerOptions io;
  io.reflector.backoff.max = std::chrono::milliseconds(2000);
  Informer informer(client, ConfigMaps(ns), io);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(30s));
  ASSERT_TRUE(client.Create(ConfigMaps(ns), {{"metadata", {{"name", "before"}}}}).ok());
  ASSERT_TRUE(Eventually([&] { return informer.Get(ns + "/before") != nullptr; }));

  std::string restart = std::string(source) + "/scripts/cluster.sh restart kube-apiserver";
  ASSERT_EQ(std::system(restart.c_str()), 0) << restart;

  // Writes may fail until the server is fully back: retry them until a deadline.
  ASSERT_TRUE(Eventually(
      [&] {
        return client.Create(ConfigMaps(ns), {{"metadata", {{"name", "after"}}}}).ok();
      },
      60s));
  ASSERT_TRUE(Eventually([&] { return informer.Get(ns + "/after") != nullptr; }, 60s))
      << "the informer did not reconnect";
  EXPECT_NE(informer.Get(ns + "/before"), nullptr);
  EXPECT_GE(counters.Get("watch", 200) + counters.Get("watch", 0), 2) << "one watch per server";
  informer.Stop();
}

}  // namespace
}  // namespace tessera::k8s
