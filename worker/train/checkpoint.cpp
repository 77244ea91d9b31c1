#include "worker/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "worker/train/digest.h"

namespace tessera::train {
namespace fs = std::filesystem;
namespace {

constexpr char kShardMagic[8] = {'T', 'S', 'R', 'S', 'H', 'R', 'D', '1'};
constexpr char kMetaFile[] = "meta.json";
constexpr char kStepPrefix[] = "step-";
constexpr char kTmpSuffix[] = ".tmp";

// step-<N> -> N; nullopt for anything else (including step-<N>.tmp, and step-010: not the name
// StepDir gives step 10).
std::optional<int64_t> ParseStepName(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  if (name[prefix.size()] == '0' && name.size() > prefix.size() + 1)
    return std::nullopt;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10)
      return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::optional<int64_t> ParseTmpName(const std::string& name) {
  const std::string suffix = kTmpSuffix;
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  return ParseStepName(name.substr(0, name.size() - suffix.size()));
}

// Writes `bytes` to `path` and fsyncs it; returns the error text or "".
std::string WriteFileSynced(const fs::path& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return std::strerror(errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      return err;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return err;
  }
  if (::close(fd) != 0)
    return std::strerror(errno);
  return "";
}

// Reads the whole file at `path` into *out; returns the error text or "". A failing read (EIO
// on a bad disk, EISDIR) is reported, never thrown.
std::string ReadWholeFile(const fs::path& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::strerror(errno);
  out->clear();
  if (struct stat st{}; ::fstat(fd, &st) == 0 && st.st_size > 0)
    out->reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      return err;
    }
    if (n == 0)
      break;
    out->append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return "";
}

void SyncDirectory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void Append(std::vector<std::byte>* out, const void* data, size_t size) {
  const auto* p = static_cast<const std::byte*>(data);
  out->insert(out->end(), p, p + size);
}

std::vector<std::byte> EncodeShard(const std::vector<ShardTensor>& tensors) {
  std::vector<std::byte> out;
  Append(&out, kShardMagic, sizeof(kShardMagic));
  const auto count = static_cast<uint32_t>(tensors.size());
  Append(&out, &count, sizeof(count));
  for (const ShardTensor& t : tensors) {
    const auto name_len = static_cast<uint32_t>(t.name.size());
    Append(&out, &name_len, sizeof(name_len));
    Append(&out, t.name.data(), t.name.size());
    const auto n = static_cast<uint64_t>(t.data.size());
    Append(&out, &n, sizeof(n));
    Append(&out, t.data.data(), t.data.size_bytes());
  }
  return out;
}

// Parses a shard; returns "" or what is wrong.
std::string DecodeShard(std::span<const std::byte> bytes, ShardContents* out) {
  size_t pos = 0;
  auto take = [&](void* dst, size_t size) {
    if (bytes.size() - pos < size)
      return false;
    std::memcpy(dst, bytes.data() + pos, size);
    pos += size;
    return true;
  };
  char magic[sizeof(kShardMagic)];
  if (!take(magic, sizeof(magic)) || std::memcmp(magic, kShardMagic, sizeof(magic)) != 0) {
    return "not a Tessera shard file (bad magic)";
  }
  uint32_t count = 0;
  if (!take(&count, sizeof(count)))
    return "truncated header";
  out->names.clear();
  out->values.clear();
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_len = 0;
    if (!take(&name_len, sizeof(name_len)) || bytes.size() - pos < name_len) {
      return fmt::format("truncated at tensor {}", i);
    }
    std::string name(reinterpret_cast<const char*>(bytes.data() + pos), name_len);
    pos += name_len;
    uint64_t n = 0;
    if (!take(&n, sizeof(n)) || (bytes.size() - pos) / sizeof(float) < n) {
      return fmt::format("truncated in tensor '{}'", name);
    }
    std::vector<float> values(n);
    take(values.data(), n * sizeof(float));
    out->names.push_back(std::move(name));
    out->values.push_back(std::move(values));
  }
  if (pos != bytes.size())
    return "trailing bytes after the last tensor";
  return "";
}

nlohmann::json MetaToJson(const CheckpointMeta& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const CheckpointFile& f : m.files) {
    files.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  }
  return {
      {"format", m.format},
      {"step", m.step},
      {"configHash", m.config_hash},
      {"config", nlohmann::json::parse(m.config_json.empty() ? "{}" : m.config_json)},
      {"mesh", m.mesh},
      {"worldSize", m.world_size},
      {"dataCursor",
       {{"step", m.data_cursor.step},
        {"samplesConsumed", m.data_cursor.samples_consumed},
        {"epoch", m.data_cursor.epoch},
        {"trainTokens", m.data_cursor.train_tokens}}},
      {"rng",
       {{"algorithm", "splitmix64-feistel"}, {"seed", m.rng_seed}, {"counter", m.rng_counter}}},
      {"optimizer", {{"steps", m.optimizer_steps}, {"zeroStage", m.zero_stage}}},
      {"loss", m.loss},
      {"valLoss", m.val_loss ? nlohmann::json(*m.val_loss) : nlohmann::json(nullptr)},
      {"createdAt", m.created_at},
      {"files", files},
  };
}

// An integer field: a float, or a value out of T's range, is refused (nlohmann's get<T> would
// convert it, undefined for a float past T's range).
template <typename T>
T IntegerAt(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (v.is_number_unsigned() && std::in_range<T>(v.get<uint64_t>()))
    return static_cast<T>(v.get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned() && std::in_range<T>(v.get<int64_t>()))
    return static_cast<T>(v.get<int64_t>());
  throw std::invalid_argument(fmt::format("{}: {} is not an integer in range", key, v.dump()));
}

void MetaFromJson(const nlohmann::json& j, CheckpointMeta* m) {
  m->format = IntegerAt<int>(j, "format");
  m->step = IntegerAt<int64_t>(j, "step");
  m->config_hash = j.at("configHash").get<std::string>();
  m->config_json = j.at("config").dump();
  m->mesh = j.at("mesh").get<std::string>();
  m->world_size = IntegerAt<int>(j, "worldSize");
  const auto& c = j.at("dataCursor");
  m->data_cursor.step = IntegerAt<int64_t>(c, "step");
  m->data_cursor.samples_consumed = IntegerAt<int64_t>(c, "samplesConsumed");
  m->data_cursor.epoch = IntegerAt<int64_t>(c, "epoch");
  m->data_cursor.train_tokens = IntegerAt<int64_t>(c, "trainTokens");
  m->rng_seed = IntegerAt<uint64_t>(j.at("rng"), "seed");
  m->rng_counter = IntegerAt<int64_t>(j.at("rng"), "counter");
  m->optimizer_steps = IntegerAt<int64_t>(j.at("optimizer"), "steps");
  m->zero_stage =
      j.at("optimizer").contains("zeroStage") ? IntegerAt<int>(j.at("optimizer"), "zeroStage") : 0;
  m->loss = j.at("loss").get<double>();
  m->val_loss.reset();
  if (j.contains("valLoss") && j.at("valLoss").is_number()) {
    m->val_loss = j.at("valLoss").get<double>();
  }
  m->created_at = j.value("createdAt", "");
  m->files.clear();
  for (const auto& f : j.at("files")) {
    m->files.push_back({f.at("name").get<std::string>(), IntegerAt<int>(f, "rank"),
                        IntegerAt<int64_t>(f, "bytes"), f.at("sha256").get<std::string>()});
  }
}

void FirstDifference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path,
                     std::string* out) {
  if (!out->empty())
    return;
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string p = path.empty() ? key : path + "." + key;
      if (!b.contains(key)) {
        *out = fmt::format("{}: {} vs (absent)", p, value.dump());
        return;
      }
      FirstDifference(value, b.at(key), p, out);
      if (!out->empty())
        return;
    }
    for (const auto& [key, value] : b.items()) {
      if (!a.contains(key)) {
        *out =
            fmt::format("{}: (absent) vs {}", path.empty() ? key : path + "." + key, value.dump());
        return;
      }
    }
    return;
  }
  if (a != b)
    *out = fmt::format("{}: {} vs {}", path, a.dump(), b.dump());
}

}  // namespace

const std::vector<float>* ShardContents::Find(const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name)
      return &values[i];
  }
  return nullptr;
}

std::string MoveAsideAdvice(const std::string& step_dir) {
  return fmt::format("; move {} aside to resume from an older one", step_dir);
}

std::string CheckpointStore::StepDir(int64_t step) const {
  return (fs::path(root_) / fmt::format("{}{}", kStepPrefix, step)).string();
}

Status CheckpointStore::Begin(int64_t step) {
  const fs::path final_dir = StepDir(step);
  const fs::path tmp_dir = final_dir.string() + kTmpSuffix;
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    return CheckpointRefused(fmt::format(
        "{}: a checkpoint for this step exists already; not overwriting it", final_dir.string()));
  }
  // The directories this creates (the root and any missing parents), so that their entries are
  // synced too: a checkpoint synced into a root whose own entry a crash loses is lost with it.
  std::vector<fs::path> created;
  for (fs::path dir = fs::absolute(root_, ec);
       !ec && !fs::exists(dir, ec) && dir.has_relative_path(); dir = dir.parent_path()) {
    created.push_back(dir);
  }
  fs::create_directories(root_, ec);
  if (ec)
    return IoError(fmt::format("{}: cannot create: {}", root_, ec.message()));
  for (const fs::path& dir : created)  // from the root up: each entry in its parent
    SyncDirectory(dir.parent_path());
  fs::remove_all(tmp_dir, ec);  // left by a writer that crashed: incomplete by definition
  fs::create_directory(tmp_dir, ec);
  if (ec)
    return IoError(fmt::format("{}: cannot create: {}", tmp_dir.string(), ec.message()));
  return Status::Ok();
}

Status CheckpointStore::WriteShard(int64_t step, int rank, const std::string& name,
                                   const std::vector<ShardTensor>& tensors, CheckpointFile* out) {
  const std::vector<std::byte> bytes = EncodeShard(tensors);
  const fs::path path = fs::path(StepDir(step) + kTmpSuffix) / name;
  if (std::string err = WriteFileSynced(path, bytes); !err.empty()) {
    return IoError(fmt::format("{}: cannot write: {}", path.string(), err));
  }
  *out = {name, rank, static_cast<int64_t>(bytes.size()), Sha256Hex(bytes)};
  return Status::Ok();
}

Status CheckpointStore::Commit(const CheckpointMeta& meta) {
  const fs::path final_dir = StepDir(meta.step);
  const fs::path tmp_dir = final_dir.string() + kTmpSuffix;
  const std::string meta_text = MetaToJson(meta).dump(2) + "\n";
  const fs::path meta_path = tmp_dir / kMetaFile;
  if (std::string err = WriteFileSynced(meta_path, std::as_bytes(std::span(meta_text)));
      !err.empty()) {
    return IoError(fmt::format("{}: cannot write: {}", meta_path.string(), err));
  }
  SyncDirectory(tmp_dir);
  std::error_code ec;
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) {
    return IoError(fmt::format("{}: cannot rename to {}: {}", tmp_dir.string(), final_dir.string(),
                               ec.message()));
  }
  SyncDirectory(root_);
  return Status::Ok();
}

void CheckpointStore::Abandon(int64_t step) {
  std::error_code ec;
  fs::remove_all(StepDir(step) + kTmpSuffix, ec);
}

Status CheckpointStore::Save(
    CheckpointMeta meta,
    const std::vector<std::pair<std::string, std::vector<ShardTensor>>>& shards) {
  if (Status st = Begin(meta.step); !st.ok())
    return st;
  meta.files.clear();
  int rank = 0;
  for (const auto& [name, tensors] : shards) {
    CheckpointFile file;
    if (Status st = WriteShard(meta.step, rank++, name, tensors, &file); !st.ok()) {
      Abandon(meta.step);
      return st;
    }
    meta.files.push_back(std::move(file));
  }
  Status committed = Commit(meta);
  if (!committed.ok())
    Abandon(meta.step);
  return committed;
}

std::vector<int64_t> CheckpointStore::CompleteSteps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    // A symbolic link loop (ELOOP) is, like a dangling link, not a checkpoint.
    std::error_code type_ec;
    if (!entry.is_directory(type_ec))
      continue;
    if (auto step = ParseStepName(entry.path().filename().string()))
      steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> CheckpointStore::NewestComplete() const {
  const std::vector<int64_t> steps = CompleteSteps();
  if (steps.empty())
    return std::nullopt;
  return steps.back();
}

Status CheckpointStore::Prune(int keep) {
  const std::vector<int64_t> steps = CompleteSteps();
  std::error_code ec;
  Status failed;
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < steps.size(); ++i) {
    fs::remove_all(StepDir(steps[i]), ec);
    if (ec && failed.ok())
      failed = IoError(fmt::format("{}: cannot delete: {}", StepDir(steps[i]), ec.message()));
  }
  if (steps.empty())
    return failed;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    auto tmp_step = ParseTmpName(entry.path().filename().string());
    if (tmp_step && *tmp_step <= steps.back())
      fs::remove_all(entry.path(), ec);
  }
  return failed;
}

Status CheckpointStore::ReadMeta(int64_t step, CheckpointMeta* out) const {
  const fs::path dir = StepDir(step);
  const fs::path path = dir / kMetaFile;
  std::string text;
  if (const std::string err = ReadWholeFile(path, &text); !err.empty()) {
    return CheckpointRefused(
        fmt::format("{}: missing or unreadable ({}), so the checkpoint is damaged{}", path.string(),
                    err, MoveAsideAdvice(dir.string())));
  }
  CheckpointMeta meta;
  try {
    MetaFromJson(nlohmann::json::parse(text), &meta);
  } catch (const nlohmann::json::exception& e) {
    return CheckpointRefused(fmt::format("{}: not a valid checkpoint description: {}{}",
                                         path.string(), e.what(), MoveAsideAdvice(dir.string())));
  } catch (const std::invalid_argument& e) {  // IntegerAt
    return CheckpointRefused(fmt::format("{}: not a valid checkpoint description: {}{}",
                                         path.string(), e.what(), MoveAsideAdvice(dir.string())));
  }
  if (meta.format != 1) {
    return CheckpointRefused(
        fmt::format("{}: format {} is not supported (this build reads 1); use a newer build{}",
                    path.string(), meta.format, MoveAsideAdvice(dir.string())));
  }
  if (meta.step != step) {
    return CheckpointRefused(fmt::format("{}: records step {} but the directory is step-{}{}",
                                         path.string(), meta.step, step,
                                         MoveAsideAdvice(dir.string())));
  }
  for (const CheckpointFile& f : meta.files) {
    const fs::path file = dir / f.name;
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) {
      return CheckpointRefused(fmt::format("{}: listed in meta.json but missing ({}){}",
                                           file.string(), ec.message(),
                                           MoveAsideAdvice(dir.string())));
    }
    if (static_cast<int64_t>(size) != f.bytes) {
      return CheckpointRefused(fmt::format("{}: {} bytes, meta.json records {}{}", file.string(),
                                           size, f.bytes, MoveAsideAdvice(dir.string())));
    }
  }
  *out = std::move(meta);
  return Status::Ok();
}

Status CheckpointStore::ReadShard(const CheckpointMeta& meta, const std::string& file,
                                  ShardContents* out) const {
  const auto it = std::find_if(meta.files.begin(), meta.files.end(),
                               [&](const CheckpointFile& f) { return f.name == file; });
  const fs::path dir = StepDir(meta.step);
  const fs::path path = dir / file;
  if (it == meta.files.end()) {
    return CheckpointRefused(
        fmt::format("{}: not listed in meta.json{}", path.string(), MoveAsideAdvice(dir.string())));
  }
  std::string raw;
  if (const std::string err = ReadWholeFile(path, &raw); !err.empty()) {
    return CheckpointRefused(
        fmt::format("{}: cannot read: {}{}", path.string(), err, MoveAsideAdvice(dir.string())));
  }
  const auto bytes = std::as_bytes(std::span(raw));
  const std::string sha = Sha256Hex(bytes);
  if (sha != it->sha256) {
    return CheckpointRefused(
        fmt::format("{}: sha256 {} does not match {} in meta.json; the file is corrupt{}",
                    path.string(), sha, it->sha256, MoveAsideAdvice(dir.string())));
  }
  if (std::string err = DecodeShard(bytes, out); !err.empty()) {
    return CheckpointRefused(
        fmt::format("{}: {}{}", path.string(), err, MoveAsideAdvice(dir.string())));
  }
  return Status::Ok();
}

std::string FirstJsonDifference(const std::string& a_json, const std::string& b_json) {
  std::string out;
  FirstDifference(nlohmann::json::parse(a_json), nlohmann::json::parse(b_json), "", &out);
  return out;
}

}  // namespace tessera::train
