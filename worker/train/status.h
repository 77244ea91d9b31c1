// Errors of the trainer as values: an exit code for the process and one line for the user.
// Exit codes are part of the user contract (docs/training.md); they never change meaning.
#pragma once

#include <string>
#include <utility>

namespace tessera::train {

// Process exit codes of `tessera-worker rank` (documented in docs/training.md).
enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,           // a bug: an invariant did not hold
  kBadConfig = 2,          // configuration or dataset the user must fix (also permanent in
                           // the job's runPolicy by default)
  kCheckpointRefused = 3,  // a checkpoint is corrupt or does not match this job
  kIoError = 4,            // the machine failed us: disk full, port taken, unwritable dir
  kDiverged = 5,           // the loss or the gradient became NaN or infinite
  kCommFailed = 6,         // a peer rank was lost, a collective timed out, or rendezvous failed
};

// The outcome of an operation a user can make fail. Cheap to copy.
class Status {
 public:
  Status() = default;
  Status(ExitCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ExitCode::kOk; }
  ExitCode code() const { return code_; }
  int exit_code() const { return static_cast<int>(code_); }
  // One line, naming the field, file or address and what to do.
  const std::string& message() const { return message_; }

 private:
  ExitCode code_ = ExitCode::kOk;
  std::string message_;
};

inline Status BadConfig(std::string message) {
  return Status(ExitCode::kBadConfig, std::move(message));
}
inline Status CheckpointRefused(std::string message) {
  return Status(ExitCode::kCheckpointRefused, std::move(message));
}
inline Status CommFailed(std::string message) {
  return Status(ExitCode::kCommFailed, std::move(message));
}
inline Status IoError(std::string message) {
  return Status(ExitCode::kIoError, std::move(message));
}

}  // namespace tessera::train
