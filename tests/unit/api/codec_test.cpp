// YAML/JSON decoding and JSON encoding of TrainingJob.
#include <gtest/gtest.h>

#include <cstdint>

#include "api/codec.h"
#include "api/schema.h"
#include "api/utf8.h"
#include "api/validate.h"

namespace tessera::api {
namespace {

using nlohmann::json;

const char kDesignExample[] = R"(
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata:
  name: gpt-shakespeare
  namespace: research
  labels: {team: nlp}
spec:
  workers: 4
  gpusPerWorker: 0
  procsPerWorker: 1
  parallelism:
    data: 2
    pipeline: 2
    tensor: 1
    zeroStage: 1
    microBatches: 8
    schedule: 1F1B
  trainer:
    model: {layers: 6, dModel: 384, heads: 6, seqLen: 256, vocab: 256}
    data: {path: /data/tinyshakespeare.txt, tokenizer: byte, validationFraction: 0.1}
    batch: {global: 64}
    optimizer: {lr: 3.0e-4, weightDecay: 0.1, beta1: 0.9, beta2: 0.95, gradClip: 1.0}
    schedule: {steps: 2000, warmupSteps: 100, decay: cosine}
    precision: fp32
    seed: 1337
    checkpoint: {dir: /checkpoints, everySteps: 200, keep: 3}
  template:
    spec:
      containers:
      - name: worker
        image: tessera/worker:0.1.0
  suspend: false
  runPolicy:
    backoffLimit: 3
    permanentExitCodes: [2]
    activeDeadlineSeconds: null
    progressDeadlineSeconds: 600
    ttlSecondsAfterFinished: null
    cleanPodPolicy: Running
  scheduling:
    gang: true
    schedulerName: ""
    queue: ""
    priorityClassName: ""
    startupTimeoutSeconds: 300
  metrics: {port: 9400}
)";

TEST(Codec, DecodesTheDesignExample) {
  DecodeResult r = DecodeYaml(kDesignExample);
  ASSERT_TRUE(r.job.has_value());
  EXPECT_TRUE(r.errors.empty()) << FormatError(r.errors.front());
  const TrainingJob& j = *r.job;
  EXPECT_EQ(j.metadata.name, "gpt-shakespeare");
  EXPECT_EQ(j.metadata.name_space, "research");
  EXPECT_EQ(j.metadata.labels.at("team"), "nlp");
  EXPECT_EQ(j.spec.workers, 4);
  EXPECT_EQ(j.spec.parallelism.data, 2);
  EXPECT_EQ(j.spec.parallelism.micro_batches, 8);
  EXPECT_EQ(j.spec.parallelism.zero_stage, 1);
  ASSERT_TRUE(j.spec.trainer.has_value());
  EXPECT_EQ(j.spec.trainer->model.heads, 6);
  EXPECT_DOUBLE_EQ(j.spec.trainer->optimizer.lr, 3.0e-4);
  EXPECT_EQ(j.spec.trainer->schedule.steps, 2000);
  EXPECT_EQ(j.spec.trainer->checkpoint->dir, "/checkpoints");
  EXPECT_EQ(j.spec.pod_template["spec"]["containers"][0]["image"], "tessera/worker:0.1.0");
  EXPECT_FALSE(j.spec.run_policy.active_deadline_seconds.has_value());
  EXPECT_EQ(j.spec.run_policy.permanent_exit_codes, std::vector<int64_t>{2});
  EXPECT_TRUE(ValidateDocument(ParseYaml(kDesignExample).documents.at(0)).empty());
}

// YAML scalars are typed as kubectl types them.
TEST(Codec, ScalarTyping) {
  struct {
    const char* yaml;
    json want;
  } cases[] = {
      {"a: 12", 12},
      {"a: -3", -3},
      {"a: 0x10", 16},
      {"a: 1.5", 1.5},
      {"a: 3.0e-4", 3.0e-4},
      {"a: true", true},
      {"a: yes", true},
      {"a: off", false},
      {"a: ~", nullptr},
      {"a: null", nullptr},
      {"a:", nullptr},
      {"a: '12'", "12"},
      {"a: \"true\"", "true"},
      {"a: 1F1B", "1F1B"},
      {"a: !!str 5", "5"},
      {"a: !!int 5", 5},
      {"a: !!float 2.5", 2.5},
      {"a: !!bool yes", true},
      {"a: hello world", "hello world"},
      {"a: .5", 0.5},
      {"a: 5.", 5.0},
      {"a: +7", 7},
      {"a: -1e3", -1000.0},
      {"a: 1E+2", 100.0},
      {"a: 1e", "1e"},
      {"a: .", "."},
      {"a: 0x", "0x"},
      {"a: 0xZZ", "0xZZ"},
      {"a: 1.2.3", "1.2.3"},
      {"a: +", "+"},
      {"a: e5", "e5"},
  };
  for (const auto& c : cases) {
    ParsedYaml p = ParseYaml(c.yaml);
    ASSERT_TRUE(p.ok()) << c.yaml << ": " << p.error;
    ASSERT_EQ(p.documents.size(), 1u);
    EXPECT_EQ(p.documents[0]["a"], c.want) << c.yaml;
  }
}

// kubectl reads YAML with sigs.k8s.io/yaml (go-yaml v2, YAML 1.1) and sends the apiserver JSON
// written by Go's encoding/json; each row was checked with `kubectl create --dry-run=server -o
// json` against kube-apiserver 1.35, so a file means the same thing here as there.
TEST(Codec, PlainScalarsMeanWhatTheyMeanToKubectl) {
  struct {
    const char* scalar;
    json want;
  } cases[] = {
      // Go's integer notation after dropping underscores; a leading 0 is octal (YAML 1.1).
      {"010", 8},
      {"0o10", 8},
      {"0O10", 8},
      {"0b10", 2},
      {"0B10", 2},
      {"0X10", 16},
      {"+0x10", 16},
      {"-0x10", -16},
      {"0x_1_0", 16},
      {"1_0", 10},
      {"1__0", 10},
      {"0_7", 7},
      {"+7", 7},
      {"-0b11", -3},
      // int64's ends are integers; beyond them, numbers (which the bounds refuse).
      {"9223372036854775807", INT64_MAX},
      {"-9223372036854775808", INT64_MIN},
      {"9.25e18", 9.25e18},
      {"-9.25e18", -9.25e18},
      {"1e19", 1e19},
      {"9e18", int64_t{9'000'000'000'000'000'000}},
      // Not octal: Go reads them as floats, which JSON writes as integers.
      {"08", 8},
      {"09", 9},
      // Integral floats reach the apiserver as integers; others stay numbers.
      {"2.0", 2},
      {"2e0", 2},
      {"1e3", 1000},
      {"5.", 5},
      {"2.5", 2.5},
      {".5", 0.5},
      {"0_0.5", 0.5},
      // YAML 1.1 booleans, every spelling.
      {"y", true},
      {"Y", true},
      {"yes", true},
      {"Yes", true},
      {"YES", true},
      {"on", true},
      {"On", true},
      {"ON", true},
      {"True", true},
      {"n", false},
      {"N", false},
      {"no", false},
      {"No", false},
      {"NO", false},
      {"off", false},
      {"Off", false},
      {"OFF", false},
      {"FALSE", false},
      // Beyond a double's range: ParseFloat fails, so go-yaml keeps the scalar as a string.
      {"1e999", "1e999"},
      {"-1e999", "-1e999"},
      {".5e999", ".5e999"},
      {"1e-400", 0},  // underflow is no failure: zero
      // Not YAML's not-a-number spellings.
      {"-.nan", "-.nan"},
      {".Nan", ".Nan"},
      // Strings.
      {"yES", "yES"},
      {"0x", "0x"},
      {"0b", "0b"},
      {"0o", "0o"},
      {"0b12", "0b12"},
      {"1_a", "1_a"},
      {"_1", "_1"},
  };
  for (const auto& c : cases) {
    ParsedYaml p = ParseYaml(std::string("a: ") + c.scalar);
    ASSERT_TRUE(p.ok()) << c.scalar << ": " << p.error;
    ASSERT_EQ(p.documents.size(), 1u);
    const json& got = p.documents[0]["a"];
    EXPECT_EQ(got, c.want) << c.scalar;
    EXPECT_EQ(got.type(), c.want.type()) << c.scalar << " is " << got.dump();
  }
}

// go-yaml reads these as floats JSON cannot write, so kubectl refuses the whole file; so does
// Tessera, naming the place, instead of taking them for strings. Quoted, they are strings.
TEST(Codec, InfinitiesAndNotANumberAreRefusedWhereTheyAre) {
  struct {
    const char* scalar;
    const char* want;
  } cases[] = {
      {".inf", "line 2, column 5: .inf is infinity, which JSON cannot carry"},
      {"+.Inf", "line 2, column 5: +.Inf is infinity"},
      {"-.INF", "line 2, column 5: -.INF is minus infinity"},
      {".nan", "line 2, column 5: .nan is not a number"},
      {".NaN", ".NaN is not a number"},
      {"!!float .inf", ".inf is infinity"},
  };
  for (const auto& c : cases) {
    ParsedYaml p = ParseYaml(std::string("a: 1\nb: [") + c.scalar + "]\n");
    EXPECT_FALSE(p.ok()) << c.scalar;
    EXPECT_NE(p.error.find(c.want), std::string::npos) << p.error;
  }
  ParsedYaml quoted = ParseYaml("a: '.inf'\nb: \".nan\"\n");
  ASSERT_TRUE(quoted.ok()) << quoted.error;
  EXPECT_EQ(quoted.documents[0], json({{"a", ".inf"}, {"b", ".nan"}}));
}

TEST(Codec, SyntaxErrorsNameTheLine) {
  struct {
    const char* yaml;
    const char* want;
  } cases[] = {
      {"a: [1, 2\n", "line "},
      {"a: 1\nb: 2\na: 3\n", "line 3, column 1: duplicate key \"a\""},
      {"spec:\n  workers: 1\n   gpus: 2\n", "line 3"},
  };
  for (const auto& c : cases) {
    ParsedYaml p = ParseYaml(c.yaml);
    EXPECT_FALSE(p.ok()) << c.yaml;
    EXPECT_NE(p.error.find(c.want), std::string::npos) << p.error;
  }
}

TEST(Codec, MultipleDocumentsSkipEmptyOnes) {
  ParsedYaml p = ParseYaml("---\na: 1\n---\n---\nb: 2\n");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.documents.size(), 2u);
  DecodeResult r = DecodeYaml("---\na: 1\n---\nb: 2\n");
  EXPECT_FALSE(r.job.has_value());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].path, "");
}

TEST(Codec, HugeNumbersAreRefusedNotFatal) {
  const std::string doc =
      "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\nspec:\n"
      "  workers: 1e999\n  gpusPerWorker: " +
      std::string(400, '9') + "\n";
  DecodeResult r = DecodeYaml(doc);
  std::vector<std::string> paths;
  for (const auto& e : r.errors)
    paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"spec.gpusPerWorker", "spec.workers"}));  // key order
}

// Each of these once ended the process (std::regex recursing per character) or never ended
// (aliases expanded without bound); each is now one error.
TEST(Codec, LongScalarsAreCheckedWithoutRecursion) {
  const std::string head = "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: ";
  DecodeResult r = DecodeYaml(head + std::string(300000, 'a') +
                              "}\nspec: {workers: " + std::string(300000, '7') +
                              ", gpusPerWorker: 1." + std::string(300000, '5') + "}\n");
  std::vector<std::string> lines;
  for (const auto& e : r.errors)
    lines.push_back(FormatError(e).substr(0, 60));
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "metadata.name: must have at most 54 characters (has 300000)",
                       "spec.gpusPerWorker: must be integer, not number",
                       // Beyond a double's range: a string, as go-yaml reads it.
                       "spec.workers: must be integer, not string",
                   }));
}

TEST(Codec, AliasesThatExpandWithoutBoundAreRefused) {
  std::string doc = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 12; ++i) {  // 9^12 values
    doc += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k)
      doc += (k ? ", *a" : "*a") + std::to_string(i - 1);
    doc += "]\n";
  }
  ParsedYaml p = ParseYaml(doc);
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.error.find("expands to more than 1000000 values"), std::string::npos) << p.error;

  // Aliases within the budget are read as their anchors' values.
  p = ParseYaml("base: &b {lr: 0.1}\nrun: *b\n");
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.documents[0]["run"], json({{"lr", 0.1}}));
}

TEST(Codec, DeepNestingIsOneError) {
  ParsedYaml p = ParseYaml("a: " + std::string(100000, '[') + std::string(100000, ']') + "\n");
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.error.find("line 1, column "), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("nested too deeply"), std::string::npos) << p.error;
}

// yaml-cpp 0.7's LoadAll alone never returns on these: it appends empty documents without
// consuming the ',' until memory runs out (found by fuzzing `tessera validate`).
TEST(Codec, ADocumentThatCannotStartIsOneErrorNotAnEndlessStream) {
  for (const char* text : {",", "a: 1\n---\n,\n", "# comment\n  ,, x\n"}) {
    ParsedYaml p = ParseYaml(text);
    EXPECT_FALSE(p.ok()) << text;
    EXPECT_NE(p.error.find("a YAML document cannot start here (at ',')"), std::string::npos)
        << p.error;
    EXPECT_TRUE(p.documents.empty());
  }
  EXPECT_EQ(ParseYaml(",").error, "line 1, column 1: a YAML document cannot start here (at ',')");
  EXPECT_EQ(ParseYaml("a: 1\n---\n,\n").error.substr(0, 17), "line 3, column 1:");

  // Empty documents between markers still read as nothing, and the rest as before.
  ParsedYaml p = ParseYaml("---\n---\na: 1\n---\n...\n---\nb: [1, 2]\n");
  ASSERT_TRUE(p.ok()) << p.error;
  ASSERT_EQ(p.documents.size(), 2u);
  EXPECT_EQ(p.documents[1]["b"], json({1, 2}));
}

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(FirstInvalidUtf8(""), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii\n"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x8F\xBF\xBF"), std::nullopt);  // U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("ab\xFF"), 2u);                      // never in UTF-8
  EXPECT_EQ(FirstInvalidUtf8("a\x80"), 1u);                       // continuation without lead
  EXPECT_EQ(FirstInvalidUtf8("x\xC3"), 1u);                       // truncated at the end
  EXPECT_EQ(FirstInvalidUtf8("\xC3("), 0u);                       // lead, then no continuation
  EXPECT_EQ(FirstInvalidUtf8("\xC0\xAF"), 0u);                    // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xE0\x80\xAF"), 0u);                // overlong, 3 bytes
  EXPECT_EQ(FirstInvalidUtf8("\xED\xA0\x80"), 0u);                // a UTF-16 surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0u);            // past U+10FFFF
}

TEST(Utf8, ValidPrefixReplacesBadBytesAndCutsWholeCharacters) {
  EXPECT_EQ(ValidUtf8Prefix("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(ValidUtf8Prefix("a\xFF\xFE"
                            "b"),
            "a??b");
  EXPECT_EQ(ValidUtf8Prefix("caf\xC3\xA9", 4), "caf?");  // the cut leaves half an e-acute
  EXPECT_EQ(ValidUtf8Prefix("\xE2\x82\xAC!", 2), "??");
  EXPECT_EQ(ValidUtf8Prefix("", 0), "");
  EXPECT_EQ(FirstInvalidUtf8(ValidUtf8Prefix("\xED\xA0\x80 \xC0\xAF")), std::nullopt);
}

// Lengths and cuts count characters, as the apiserver and CEL's size() do.
TEST(Utf8, LengthAndOffsetsCountCharacters) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC!";  // a, e-acute (2 bytes), euro (3 bytes), !
  EXPECT_EQ(Utf8Length(s), 4);
  EXPECT_EQ(Utf8Length(""), 0);
  const size_t offsets[] = {0, 1, 3, 6, 7, 7};  // where characters 0..3 begin, then the end
  for (int64_t chars = 0; chars < 6; ++chars)
    EXPECT_EQ(Utf8Offset(s, chars), offsets[chars]) << chars;
  EXPECT_EQ(s.substr(Utf8Offset(s, Utf8Length(s) - 2)), "\xE2\x82\xAC!");  // the last two
}

// yaml-cpp copies such bytes into strings, and writing them as JSON then threw (found by
// fuzzing `tessera plan -o json`).
TEST(Codec, InvalidUtf8IsOneErrorNamingItsPlace) {
  ParsedYaml p = ParseYaml("kind: TrainingJob\nmetadata: {name: \"x\xFFy\"}\n");
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.error, "line 2, column 20: not UTF-8 text (byte 0xFF); save the file as UTF-8");
  EXPECT_TRUE(ParseYaml("metadata: {name: caf\xC3\xA9}\n").ok());
  // A NUL: yaml-cpp read "!\0\0\0..." as UTF-32LE and made "image=x4" into bytes that are not
  // UTF-8 at all (found by fuzzing --set values).
  p = ParseYaml(std::string("!\0\0\0image=x4", 12));
  EXPECT_EQ(p.error, "line 1, column 2: not UTF-8 text (byte 0x00); save the file as UTF-8");
  EXPECT_EQ(FirstNonTextByte(std::string("ab\0\xFF", 4)), 2u);
  EXPECT_EQ(FirstNonTextByte(std::string("a\xFF\0", 3)), 1u);
  EXPECT_EQ(FirstNonTextByte("caf\xC3\xA9"), std::nullopt);
}

TEST(Codec, QuotedNumberIsATypeError) {
  DecodeResult r = DecodeYaml(
      "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\n"
      "spec: {workers: \"2\"}\n");
  EXPECT_FALSE(r.job.has_value());
  ASSERT_FALSE(r.errors.empty());
  EXPECT_EQ(FormatError(r.errors[0]), "spec.workers: must be integer, not string");
}

TEST(Codec, RoundTripsThroughJson) {
  DecodeResult r = DecodeYaml(kDesignExample);
  ASSERT_TRUE(r.job);
  TrainingJob job = *r.job;
  job.metadata.uid = "u-1";
  job.metadata.generation = 3;
  job.status.phase = "Running";
  job.status.conditions = {
      {"Running", "True", "AllWorkersRunning", "4/4", "2026-01-01T00:00:00Z", 3}};
  job.status.workers = {4, 4, 0, 0};
  job.status.restarts = 1;
  job.status.last_failure = {"NodeLost", "node gone", "gpt-shakespeare-worker-2", 137};
  job.status.progress = {420, 2000, 1.62, 51200, "2026-01-01T00:01:00Z"};
  job.status.start_time = "2026-01-01T00:00:00Z";
  job.status.observed_generation = 3;

  const json encoded = EncodeJson(job);
  DecodeResult back = DecodeJson(encoded);
  ASSERT_TRUE(back.job);
  EXPECT_TRUE(back.errors.empty()) << FormatError(back.errors.front());
  EXPECT_EQ(EncodeJson(*back.job), encoded);
  EXPECT_EQ(back.job->status, job.status);
  EXPECT_EQ(back.job->metadata.uid, "u-1");
}

// Every field is read: a document whose every field differs from its default encodes back to
// itself. (Not a valid job: the rules are not at issue here, only the reading.)
TEST(Codec, EveryFieldReadsBackFromItsJson) {
  const json full = json::parse(R"({
    "apiVersion": "tessera.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "full", "namespace": "ns", "uid": "u-2", "generation": 4,
                 "labels": {"a": "b"}, "annotations": {"c": "d"}},
    "spec": {
      "workers": 3, "gpusPerWorker": 2, "procsPerWorker": 5,
      "parallelism": {"data": 7, "pipeline": 2, "tensor": 3, "zeroStage": 1, "microBatches": 4,
                      "bucketMiB": 8.5, "schedule": "GPipe"},
      "trainer": {
        "model": {"preset": "gpt2-124m", "layers": 4, "dModel": 128, "heads": 8, "seqLen": 32,
                  "vocab": 300},
        "data": {"path": "p", "tokenizer": "uint16", "validationFraction": 0.25},
        "batch": {"global": 24},
        "optimizer": {"lr": 0.01, "weightDecay": 0.2, "beta1": 0.8, "beta2": 0.9,
                      "gradClip": 2.5},
        "schedule": {"steps": 50, "warmupSteps": 5, "decay": "linear"},
        "precision": "bf16", "seed": 7,
        "checkpoint": {"dir": "/c", "everySteps": 9, "keep": 4}},
      "template": {"spec": {"containers": [{"name": "worker", "image": "i"}]}},
      "suspend": true,
      "runPolicy": {"backoffLimit": 7, "permanentExitCodes": [3, 4],
                    "activeDeadlineSeconds": 100, "progressDeadlineSeconds": 60,
                    "ttlSecondsAfterFinished": 30, "cleanPodPolicy": "All"},
      "scheduling": {"gang": false, "schedulerName": "volcano", "queue": "q",
                     "priorityClassName": "high", "startupTimeoutSeconds": 42},
      "metrics": {"port": 9999}}})");
  DecodeResult r = DecodeJson(full);
  ASSERT_TRUE(r.job);
  EXPECT_TRUE(r.errors.empty()) << FormatError(r.errors.front());
  EXPECT_EQ(EncodeJson(*r.job), full) << EncodeJson(*r.job).dump(1);
}

// The C++ member initializers are the schema's defaults: a job decoded from a minimal document
// (defaults from the schema table) encodes the same as one built in C++ (defaults from the
// struct initializers).
TEST(Codec, StructDefaultsMatchTheSchema) {
  const json minimal = json::parse(R"({
    "apiVersion": "tessera.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "m"},
    "spec": {"trainer": {"model": {"preset": "gpt2-124m"}, "data": {"path": "p"},
             "batch": {"global": 8}, "schedule": {"steps": 1},
             "checkpoint": {"dir": "/c"}}}})");
  DecodeResult r = DecodeJson(minimal);
  ASSERT_TRUE(r.job);

  TrainingJob built;
  built.metadata.name = "m";
  built.spec.trainer.emplace();
  built.spec.trainer->model.preset = "gpt2-124m";
  built.spec.trainer->data.path = "p";
  built.spec.trainer->batch.global = 8;
  built.spec.trainer->schedule.steps = 1;
  built.spec.trainer->checkpoint.emplace();
  built.spec.trainer->checkpoint->dir = "/c";
  EXPECT_EQ(EncodeJson(built), EncodeJson(*r.job));
}

TEST(Codec, StatusPatchLeavesEmptyStringsOut) {
  TrainingJobStatus s;
  s.phase = "Pending";
  const json j = EncodeStatusJson(s);
  EXPECT_EQ(j["phase"], "Pending");
  EXPECT_FALSE(j.contains("startTime"));
  EXPECT_FALSE(j.contains("lastFailure"));
  json doc = {{"apiVersion", "tessera.dev/v1alpha1"}, {"kind", "TrainingJob"}, {"status", j}};
  for (const auto& e : CheckSchema(doc))
    EXPECT_NE(e.path.rfind("status", 0), 0u) << e.path;
}

}  // namespace
}  // namespace tessera::api
