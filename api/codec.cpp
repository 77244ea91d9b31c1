// YAML/JSON decoding and JSON encoding of TrainingJob. The shape checks come from the schema
// (api/schema.h); this file only converts between text, JSON values and the C++ structs.
#include "api/codec.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "api/schema.h"
#include "api/utf8.h"

namespace tessera::api {
namespace {

using nlohmann::json;

class YamlError : public std::runtime_error {
 public:
  YamlError(const YAML::Mark& mark, const std::string& what)
      : std::runtime_error("line " + std::to_string(mark.line + 1) + ", column " +
                           std::to_string(mark.column + 1) + ": " + what) {}
};

// Character scans for the number forms below. Not std::regex: libstdc++ matches recursively, a
// frame per character, so a scalar of a few hundred thousand digits overflowed the stack.
bool AllOf(std::string_view s, int (*is)(int)) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [is](char c) { return is(static_cast<unsigned char>(c)) != 0; });
}

std::string_view WithoutSign(std::string_view s) {
  return !s.empty() && (s[0] == '-' || s[0] == '+') ? s.substr(1) : s;
}

// [-+]?[0-9]+
bool IsDecimalInteger(std::string_view s) {
  return AllOf(WithoutSign(s), isdigit);
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsFloat(std::string_view s) {
  s = WithoutSign(s);
  const size_t e = s.find_first_of("eE");
  if (e != std::string_view::npos && !IsDecimalInteger(s.substr(e + 1)))
    return false;
  const std::string_view mantissa = s.substr(0, e);
  const size_t dot = mantissa.find('.');
  if (dot == std::string_view::npos)
    return AllOf(mantissa, isdigit);
  const std::string_view whole = mantissa.substr(0, dot), fraction = mantissa.substr(dot + 1);
  return whole.empty() ? AllOf(fraction, isdigit)
                       : AllOf(whole, isdigit) && (fraction.empty() || AllOf(fraction, isdigit));
}

// Go's strconv.ParseInt(s, 0, 64), which go-yaml v2 applies to a plain scalar that starts with
// a digit or a sign: an optional sign, then 0x/0X hex, 0b/0B binary, 0o/0O octal, a leading 0
// octal (YAML 1.1: 010 is 8), or decimal. std::nullopt when it is not such an integer or is out
// of int64's range.
std::optional<int64_t> GoParseInt(std::string_view s) {
  const bool negative = !s.empty() && s[0] == '-';
  std::string_view digits = WithoutSign(s);
  int base = 10;
  if (digits.size() > 1 && digits[0] == '0') {
    const char prefix = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[1])));
    base = prefix == 'x' ? 16 : prefix == 'b' ? 2 : prefix == 'o' ? 8 : 0;
    digits.remove_prefix(base == 0 ? 1 : 2);
    if (base == 0)
      base = 8;
  }
  if (digits.empty())
    return std::nullopt;
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (ec != std::errc() || end != digits.data() + digits.size())
    return std::nullopt;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (magnitude > kMax + (negative ? 1 : 0))
    return std::nullopt;
  if (negative)
    return magnitude == kMax + 1 ? std::numeric_limits<int64_t>::min()
                                 : -static_cast<int64_t>(magnitude);
  return static_cast<int64_t>(magnitude);
}

// A float of a YAML file as the apiserver receives it: kubectl converts YAML to JSON with Go's
// encoding/json, which writes an integral float below 1e21 without a fraction (2.0 as 2), so
// such a value reaches the apiserver as an integer.
json YamlFloat(double d) {
  if (std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9.2e18)
    return static_cast<int64_t>(d);
  return d;
}

// A scalar of float syntax as go-yaml v2 takes it: strconv.ParseFloat's value, or the scalar
// itself, a string, when the value is beyond a double's range (1e999), since ParseFloat then
// fails. strtod, not stod, which would throw.
json GoFloat(const std::string& s) {
  const double d = std::strtod(s.c_str(), nullptr);
  return std::isinf(d) ? json(s) : YamlFloat(d);
}

// YAML 1.1's infinities and not-a-number (.inf, -.Inf, .NAN, ...), which go-yaml v2 reads as
// floats that JSON has no way to write: kubectl refuses a file holding one.
std::optional<std::string> NonFiniteFloat(std::string_view s) {
  const std::string_view unsigned_part = WithoutSign(s);
  for (const char* spelling : {".inf", ".Inf", ".INF"}) {
    if (unsigned_part == spelling)
      return std::string(s[0] == '-' ? "minus " : "") + "infinity";
  }
  for (const char* spelling : {".nan", ".NaN", ".NAN"}) {
    if (s == spelling)
      return "not a number";
  }
  return std::nullopt;
}

// A plain (unquoted, untagged) scalar, typed as go-yaml v2 resolves it (YAML 1.1), the reader of
// sigs.k8s.io/yaml in kubectl, so that a file means the same to `tessera validate` and `run` as
// to `kubectl apply`: yes/no/on/off/y/n are booleans; a scalar starting with a digit or a sign
// drops its underscores and is an integer in Go's notation (010 is octal 8, 0o10, 0b10, 0x10)
// or a float; one starting with '.' is a float (.5). Anything else is a string.
json PlainScalar(const std::string& s) {
  static const std::set<std::string> kTrue = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                              "on",   "On",   "ON",   "y",   "Y"};
  static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No", "NO",
                                               "off",   "Off",   "OFF",   "n",  "N"};
  if (kTrue.contains(s))
    return true;
  if (kFalse.contains(s))
    return false;
  if (s.empty())
    return s;
  const char first = s[0];
  if (first == '.')
    return IsFloat(s) ? GoFloat(s) : json(s);
  if (!std::isdigit(static_cast<unsigned char>(first)) && first != '-' && first != '+')
    return s;
  std::string plain = s;
  std::erase(plain, '_');
  if (const std::optional<int64_t> v = GoParseInt(plain))
    return *v;
  // Also a decimal beyond int64 (a number, which bounds refuse; beyond a double's range a
  // string) and 09 (not octal: Go reads it as the float 9).
  if (IsFloat(plain))
    return GoFloat(plain);
  return s;
}

// How many values one YAML stream may expand to. An alias repeats its anchor's whole value, so
// nine aliases of nine aliases of ... (a "billion laughs" file of 2 KB) would otherwise expand
// to more values than memory holds, and take hours to. A TrainingJob has a few hundred.
constexpr size_t kMaxValues = 1'000'000;

// Converts one document, counting the values it produces against *budget.
json ToJson(const YAML::Node& node, size_t* budget) {
  if (*budget == 0) {
    throw YamlError(node.Mark(), "the document expands to more than " + std::to_string(kMaxValues) +
                                     " values (aliases of aliases?); refusing to read it");
  }
  --*budget;
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      if (tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
          tag == "tag:yaml.org,2002:bool") {
        if (const std::optional<std::string> what = NonFiniteFloat(node.Scalar())) {
          throw YamlError(node.Mark(),
                          node.Scalar() + " is " + *what +
                              ", which JSON cannot carry, so kubectl refuses the file too; write "
                              "a finite number, or quote it to mean the string");
        }
        return PlainScalar(node.Scalar());
      }
      return node.Scalar();  // quoted ("!") or tagged as a string
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node)
        out.push_back(ToJson(item, budget));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar())
          throw YamlError(kv.first.Mark(), "mapping keys must be strings");
        const std::string key = kv.first.Scalar();
        if (out.contains(key))
          throw YamlError(kv.first.Mark(), "duplicate key \"" + key + "\"");
        out[key] = ToJson(kv.second, budget);
      }
      return out;
    }
  }
  return nullptr;
}

template <typename T>
std::optional<T> Opt(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null())
    return std::nullopt;
  return it->get<T>();
}

template <typename T>
void Read(const json& obj, const char* key, T& out) {
  auto it = obj.find(key);
  if (it != obj.end() && !it->is_null())
    out = it->get<T>();
}

// A map of strings, a null value read as "" (Go's decoding into map[string]string, so
// `labels: {team: null}` is the label team="" to kubectl and the apiserver).
void ReadStringMap(const json& obj, const char* key, std::map<std::string, std::string>& out) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_object())
    return;
  for (const auto& [k, v] : it->items())
    out[k] = v.is_null() ? std::string() : v.get<std::string>();
}

const json& Sub(const json& obj, const char* key) {
  static const json kEmpty = json::object();
  auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? *it : kEmpty;
}

TrainingJob FromJson(const json& j) {
  TrainingJob job;
  const json& m = Sub(j, "metadata");
  Read(m, "name", job.metadata.name);
  Read(m, "namespace", job.metadata.name_space);
  Read(m, "uid", job.metadata.uid);
  Read(m, "generation", job.metadata.generation);
  ReadStringMap(m, "labels", job.metadata.labels);
  ReadStringMap(m, "annotations", job.metadata.annotations);

  const json& s = Sub(j, "spec");
  auto& spec = job.spec;
  Read(s, "workers", spec.workers);
  Read(s, "gpusPerWorker", spec.gpus_per_worker);
  spec.procs_per_worker = Opt<int64_t>(s, "procsPerWorker");
  const json& p = Sub(s, "parallelism");
  spec.parallelism.data = Opt<int64_t>(p, "data");
  Read(p, "pipeline", spec.parallelism.pipeline);
  Read(p, "tensor", spec.parallelism.tensor);
  Read(p, "zeroStage", spec.parallelism.zero_stage);
  Read(p, "microBatches", spec.parallelism.micro_batches);
  Read(p, "bucketMiB", spec.parallelism.bucket_mib);
  Read(p, "schedule", spec.parallelism.schedule);
  if (s.contains("trainer") && s["trainer"].is_object()) {
    const json& t = s["trainer"];
    TrainerSpec trainer;
    const json& model = Sub(t, "model");
    Read(model, "preset", trainer.model.preset);
    trainer.model.layers = Opt<int64_t>(model, "layers");
    trainer.model.d_model = Opt<int64_t>(model, "dModel");
    trainer.model.heads = Opt<int64_t>(model, "heads");
    trainer.model.seq_len = Opt<int64_t>(model, "seqLen");
    trainer.model.vocab = Opt<int64_t>(model, "vocab");
    const json& data = Sub(t, "data");
    trainer.data.path = Opt<std::string>(data, "path");
    Read(data, "tokenizer", trainer.data.tokenizer);
    Read(data, "validationFraction", trainer.data.validation_fraction);
    trainer.batch.global = Opt<int64_t>(Sub(t, "batch"), "global");
    const json& o = Sub(t, "optimizer");
    Read(o, "lr", trainer.optimizer.lr);
    Read(o, "weightDecay", trainer.optimizer.weight_decay);
    Read(o, "beta1", trainer.optimizer.beta1);
    Read(o, "beta2", trainer.optimizer.beta2);
    Read(o, "gradClip", trainer.optimizer.grad_clip);
    const json& sched = Sub(t, "schedule");
    trainer.schedule.steps = Opt<int64_t>(sched, "steps");
    Read(sched, "warmupSteps", trainer.schedule.warmup_steps);
    Read(sched, "decay", trainer.schedule.decay);
    Read(t, "precision", trainer.precision);
    Read(t, "seed", trainer.seed);
    if (t.contains("checkpoint") && t["checkpoint"].is_object()) {
      const json& c = t["checkpoint"];
      CheckpointSpec checkpoint;
      checkpoint.dir = Opt<std::string>(c, "dir");
      Read(c, "everySteps", checkpoint.every_steps);
      Read(c, "keep", checkpoint.keep);
      trainer.checkpoint = checkpoint;
    }
    spec.trainer = trainer;
  }
  if (s.contains("template") && s["template"].is_object())
    spec.pod_template = s["template"];
  Read(s, "suspend", spec.suspend);
  const json& r = Sub(s, "runPolicy");
  Read(r, "backoffLimit", spec.run_policy.backoff_limit);
  Read(r, "permanentExitCodes", spec.run_policy.permanent_exit_codes);
  spec.run_policy.active_deadline_seconds = Opt<int64_t>(r, "activeDeadlineSeconds");
  Read(r, "progressDeadlineSeconds", spec.run_policy.progress_deadline_seconds);
  spec.run_policy.ttl_seconds_after_finished = Opt<int64_t>(r, "ttlSecondsAfterFinished");
  Read(r, "cleanPodPolicy", spec.run_policy.clean_pod_policy);
  const json& g = Sub(s, "scheduling");
  Read(g, "gang", spec.scheduling.gang);
  Read(g, "schedulerName", spec.scheduling.scheduler_name);
  Read(g, "queue", spec.scheduling.queue);
  Read(g, "priorityClassName", spec.scheduling.priority_class_name);
  Read(g, "startupTimeoutSeconds", spec.scheduling.startup_timeout_seconds);
  Read(Sub(s, "metrics"), "port", spec.metrics.port);

  const json& st = Sub(j, "status");
  auto& status = job.status;
  Read(st, "phase", status.phase);
  if (st.contains("conditions") && st["conditions"].is_array()) {
    for (const auto& c : st["conditions"]) {
      Condition cond;
      Read(c, "type", cond.type);
      Read(c, "status", cond.status);
      Read(c, "reason", cond.reason);
      Read(c, "message", cond.message);
      Read(c, "lastTransitionTime", cond.last_transition_time);
      Read(c, "observedGeneration", cond.observed_generation);
      status.conditions.push_back(cond);
    }
  }
  const json& w = Sub(st, "workers");
  Read(w, "active", status.workers.active);
  Read(w, "ready", status.workers.ready);
  Read(w, "succeeded", status.workers.succeeded);
  Read(w, "failed", status.workers.failed);
  Read(st, "restarts", status.restarts);
  const json& lf = Sub(st, "lastFailure");
  Read(lf, "reason", status.last_failure.reason);
  Read(lf, "message", status.last_failure.message);
  Read(lf, "worker", status.last_failure.worker);
  Read(lf, "exitCode", status.last_failure.exit_code);
  const json& pr = Sub(st, "progress");
  Read(pr, "step", status.progress.step);
  Read(pr, "totalSteps", status.progress.total_steps);
  Read(pr, "loss", status.progress.loss);
  Read(pr, "tokensPerSecond", status.progress.tokens_per_second);
  Read(pr, "updatedAt", status.progress.updated_at);
  Read(st, "startTime", status.start_time);
  Read(st, "completionTime", status.completion_time);
  Read(st, "observedGeneration", status.observed_generation);
  return job;
}

template <typename T>
void PutOpt(json& obj, const char* key, const std::optional<T>& v) {
  if (v)
    obj[key] = *v;
}

void PutStr(json& obj, const char* key, const std::string& v) {
  if (!v.empty())
    obj[key] = v;
}

// yaml-cpp 0.7 (Debian 12's) never returns from LoadAll on a stream where a document begins with
// a token that cannot start a node, such as a lone ",": the parser reports an empty document
// without consuming the token, and LoadAll appends one after another until memory runs out
// (upstream issue 1040, fixed after 0.8). A document that consumed no token repeats forever,
// and only such a document starts where the one before it started, so one pass of the parser
// with a handler that watches where documents start finds it before LoadAll runs.
class DocumentStartWatch : public YAML::EventHandler {
 public:
  explicit DocumentStartWatch(const std::string& text) : text_(text) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (previous_ && previous_->pos == mark.pos) {
      const size_t at = static_cast<size_t>(std::max(mark.pos, 0));
      std::string what = "a YAML document cannot start here";
      if (at < text_.size() && std::isprint(static_cast<unsigned char>(text_[at])))
        what += std::string(" (at '") + text_[at] + "')";
      throw YamlError(mark, what);
    }
    previous_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  const std::string& text_;
  std::optional<YAML::Mark> previous_;
};

void CheckDocumentsAdvance(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStartWatch watch(text);
  while (parser.HandleNextDocument(watch)) {
  }
}

// Reads `in` to its end or to one byte past kMaxJobFileBytes, whichever comes first, so an
// endless input (/dev/zero, a stream that never ends) is refused instead of read forever.
bool ReadAtMost(std::istream& in, std::string* text) {
  char chunk[64 * 1024];
  while (text->size() <= kMaxJobFileBytes &&
         in.read(chunk, static_cast<std::streamsize>(sizeof(chunk))).gcount() > 0) {
    text->append(chunk, static_cast<size_t>(in.gcount()));
  }
  return text->size() <= kMaxJobFileBytes;
}

const std::string kTooLarge = "larger than " + std::to_string(kMaxJobFileBytes >> 20) +
                              " MiB; a job file is a few KiB (is this the right file?)";

}  // namespace

FileText ReadJobFile(const std::string& path) {
  FileText out;
  if (path == "-") {
    if (!ReadAtMost(std::cin, &out.text)) {
      out.text.clear();
      out.error = kTooLarge;
    }
    return out;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    out.error = "is a directory; name a YAML file";
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.error = std::string("cannot read the file: ") + std::strerror(errno);
    return out;
  }
  const bool fits = ReadAtMost(in, &out.text);
  if (in.bad()) {
    out.text.clear();
    out.error = std::string("cannot read the file: ") + std::strerror(errno);
  } else if (!fits) {
    out.text.clear();
    out.error = kTooLarge;
  }
  return out;
}

ParsedYaml ParseYaml(const std::string& text) {
  ParsedYaml out;
  // yaml-cpp passes invalid UTF-8 through into strings, which JSON output cannot hold.
  if (const auto bad = FirstNonTextByte(text)) {
    out.error = NonTextMessage(text, *bad);
    return out;
  }
  try {
    CheckDocumentsAdvance(text);
    size_t budget = kMaxValues;
    for (const auto& doc : YAML::LoadAll(text)) {
      json j = ToJson(doc, &budget);
      if (!j.is_null())
        out.documents.push_back(std::move(j));
    }
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message here is "bad file".
    out.documents.clear();
    out.error = "line " + std::to_string(e.mark.line + 1) + ", column " +
                std::to_string(e.mark.column + 1) +
                ": nested too deeply (beyond yaml-cpp's recursion limit)";
  } catch (const YAML::Exception& e) {
    out.documents.clear();
    out.error = "line " + std::to_string(e.mark.line + 1) + ", column " +
                std::to_string(e.mark.column + 1) + ": " + e.msg;
  } catch (const YamlError& e) {
    out.documents.clear();
    out.error = e.what();
  }
  return out;
}

DecodeResult DecodeJson(const nlohmann::json& document) {
  DecodeResult out;
  json j = document;
  ApplySchemaDefaults(j);
  bool sound = true;
  out.errors = CheckSchema(j, &sound);
  if (!sound && j.is_object() && j.contains("status")) {
    // A status of the wrong shape (in a job file, where the apiserver would drop it) does not
    // keep the spec from being read: the job is decoded without it, its errors still listed.
    json without_status = j;
    without_status.erase("status");
    CheckSchema(without_status, &sound);
    if (sound)
      j = std::move(without_status);
  }
  if (sound)
    out.job = FromJson(j);
  return out;
}

DecodeResult DecodeYaml(const std::string& text) {
  ParsedYaml parsed = ParseYaml(text);
  if (!parsed.ok())
    return {std::nullopt, {{"", parsed.error}}};
  if (parsed.documents.size() != 1) {
    return {std::nullopt,
            {{"", "expected one YAML document, found " + std::to_string(parsed.documents.size())}}};
  }
  return DecodeJson(parsed.documents.front());
}

nlohmann::json EncodeStatusJson(const TrainingJobStatus& status) {
  json st = json::object();
  PutStr(st, "phase", status.phase);
  if (!status.conditions.empty()) {
    json conds = json::array();
    for (const auto& c : status.conditions) {
      json cj = {{"type", c.type}, {"status", c.status}};
      PutStr(cj, "reason", c.reason);
      PutStr(cj, "message", c.message);
      PutStr(cj, "lastTransitionTime", c.last_transition_time);
      if (c.observed_generation != 0)
        cj["observedGeneration"] = c.observed_generation;
      conds.push_back(cj);
    }
    st["conditions"] = conds;
  }
  st["workers"] = {{"active", status.workers.active},
                   {"ready", status.workers.ready},
                   {"succeeded", status.workers.succeeded},
                   {"failed", status.workers.failed}};
  st["restarts"] = status.restarts;
  if (status.last_failure != LastFailure{}) {
    json lf = json::object();
    PutStr(lf, "reason", status.last_failure.reason);
    PutStr(lf, "message", status.last_failure.message);
    PutStr(lf, "worker", status.last_failure.worker);
    lf["exitCode"] = status.last_failure.exit_code;
    st["lastFailure"] = lf;
  }
  if (status.progress != Progress{}) {
    json pr = {{"step", status.progress.step},
               {"totalSteps", status.progress.total_steps},
               {"loss", status.progress.loss},
               {"tokensPerSecond", status.progress.tokens_per_second}};
    PutStr(pr, "updatedAt", status.progress.updated_at);
    st["progress"] = pr;
  }
  PutStr(st, "startTime", status.start_time);
  PutStr(st, "completionTime", status.completion_time);
  st["observedGeneration"] = status.observed_generation;
  return st;
}

nlohmann::json EncodeJson(const TrainingJob& job) {
  json j = {{"apiVersion", kApiVersion}, {"kind", kKind}};
  json m = json::object();
  PutStr(m, "name", job.metadata.name);
  PutStr(m, "namespace", job.metadata.name_space);
  PutStr(m, "uid", job.metadata.uid);
  if (job.metadata.generation != 0)
    m["generation"] = job.metadata.generation;
  if (!job.metadata.labels.empty())
    m["labels"] = job.metadata.labels;
  if (!job.metadata.annotations.empty())
    m["annotations"] = job.metadata.annotations;
  j["metadata"] = m;

  const auto& spec = job.spec;
  json s = {{"workers", spec.workers}, {"gpusPerWorker", spec.gpus_per_worker}};
  PutOpt(s, "procsPerWorker", spec.procs_per_worker);
  json p = json::object();
  PutOpt(p, "data", spec.parallelism.data);
  p["pipeline"] = spec.parallelism.pipeline;
  p["tensor"] = spec.parallelism.tensor;
  p["zeroStage"] = spec.parallelism.zero_stage;
  p["microBatches"] = spec.parallelism.micro_batches;
  p["bucketMiB"] = spec.parallelism.bucket_mib;
  p["schedule"] = spec.parallelism.schedule;
  s["parallelism"] = p;
  if (spec.trainer) {
    const auto& t = *spec.trainer;
    json model = json::object();
    PutStr(model, "preset", t.model.preset);
    PutOpt(model, "layers", t.model.layers);
    PutOpt(model, "dModel", t.model.d_model);
    PutOpt(model, "heads", t.model.heads);
    PutOpt(model, "seqLen", t.model.seq_len);
    PutOpt(model, "vocab", t.model.vocab);
    json data = json::object();
    PutOpt(data, "path", t.data.path);
    data["tokenizer"] = t.data.tokenizer;
    data["validationFraction"] = t.data.validation_fraction;
    json batch = json::object();
    PutOpt(batch, "global", t.batch.global);
    json sched = json::object();
    PutOpt(sched, "steps", t.schedule.steps);
    sched["warmupSteps"] = t.schedule.warmup_steps;
    sched["decay"] = t.schedule.decay;
    json tj = {{"model", model},
               {"data", data},
               {"batch", batch},
               {"optimizer",
                {{"lr", t.optimizer.lr},
                 {"weightDecay", t.optimizer.weight_decay},
                 {"beta1", t.optimizer.beta1},
                 {"beta2", t.optimizer.beta2},
                 {"gradClip", t.optimizer.grad_clip}}},
               {"schedule", sched},
               {"precision", t.precision},
               {"seed", t.seed}};
    if (t.checkpoint) {
      json c = json::object();
      PutOpt(c, "dir", t.checkpoint->dir);
      c["everySteps"] = t.checkpoint->every_steps;
      c["keep"] = t.checkpoint->keep;
      tj["checkpoint"] = c;
    }
    s["trainer"] = tj;
  }
  if (spec.pod_template.is_object() && !spec.pod_template.empty()) {
    s["template"] = spec.pod_template;
  }
  s["suspend"] = spec.suspend;
  const auto& r = spec.run_policy;
  json rp = {{"backoffLimit", r.backoff_limit},
             {"permanentExitCodes", r.permanent_exit_codes},
             {"progressDeadlineSeconds", r.progress_deadline_seconds},
             {"cleanPodPolicy", r.clean_pod_policy}};
  PutOpt(rp, "activeDeadlineSeconds", r.active_deadline_seconds);
  PutOpt(rp, "ttlSecondsAfterFinished", r.ttl_seconds_after_finished);
  s["runPolicy"] = rp;
  const auto& g = spec.scheduling;
  s["scheduling"] = {{"gang", g.gang},
                     {"schedulerName", g.scheduler_name},
                     {"queue", g.queue},
                     {"priorityClassName", g.priority_class_name},
                     {"startupTimeoutSeconds", g.startup_timeout_seconds}};
  s["metrics"] = {{"port", spec.metrics.port}};
  j["spec"] = s;

  if (job.status != TrainingJobStatus{})
    j["status"] = EncodeStatusJson(job.status);
  return j;
}

}  // namespace tessera::api
