// Build identity of every Tessera binary: the release, the commit it was built from, and the
// CUDA and NCCL versions compiled in. Says nothing about whether a GPU is present at run time.
#pragma once

#include <string>

namespace tessera {

struct BuildInfo {
  std::string version;       // e.g. "0.1.0"
  std::string git_commit;    // short hash, "-dirty" when built with uncommitted changes
  std::string cuda_version;  // e.g. "13.0"; empty when built without CUDA
  std::string nccl_version;  // e.g. "2.28.3"; empty when built without NCCL
};

BuildInfo GetBuildInfo();

// The lines `tessera version` prints: version, commit, and "cuda: X" / "nccl: Y" or "cuda: off".
std::string FormatBuildInfo(const BuildInfo& info);

}  // namespace tessera
