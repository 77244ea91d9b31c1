// Fuzz target: a checkpoint's meta.json, as a resuming trainer reads it. A damaged or foreign
// file (a disk filled mid-write by another tool, an edit by hand) is a checkpoint refused with a
// message naming the file, never a crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "worker/train/checkpoint.h"

namespace {

namespace fs = std::filesystem;
namespace train = tessera::train;

// One directory for the process, removed at exit.
const fs::path& Root() {
  static const fs::path root = [] {
    std::string pattern = (fs::temp_directory_path() / "checkpoint_meta_fuzz.XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      std::abort();
    fs::create_directories(fs::path(pattern) / "step-7");
    std::atexit([] { fs::remove_all(Root()); });
    return fs::path(pattern);
  }();
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path meta = Root() / "step-7" / "meta.json";
  {
    std::ofstream out(meta, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  train::CheckpointStore store(Root().string());
  train::CheckpointMeta read;
  const train::Status st = store.ReadMeta(7, &read);
  if (!st.ok() && st.message().find(meta.string()) == std::string::npos &&
      st.message().find(Root().string()) == std::string::npos) {
    std::fprintf(stderr, "checkpoint_meta_fuzz: a refusal that names no file: %s\n",
                 st.message().c_str());
    std::abort();
  }
  if (st.ok() && read.step != 7)
    std::abort();
  return 0;
}
