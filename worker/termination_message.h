// The one line a failed container leaves for Kubernetes. The kubelet reads the file at the
// container's terminationMessagePath (by default /dev/termination-log, which it creates) into
// the pod's status as the container's terminated message; the controller carries that into
// the TrainingJob's status.lastFailure and its events, so `kubectl describe tj` says why a rank
// failed without `kubectl logs`. Worker 0's message also ends with rank 0's final progress,
// which the controller puts in status.progress (succeeded or failed).
#pragma once

#include <string>

namespace tessera::worker {

// Where the message goes: $TESSERA_TERMINATION_MESSAGE_PATH when set, else
// /dev/termination-log when that file exists (in a pod), else "" (not in a pod: nowhere).
std::string TerminationMessagePath();

// Writes `message` to TerminationMessagePath(), unless the file already holds a message: the
// first failure in a pod, usually the cause, is the one kept. A final progress line already
// there stays last. Best effort: does nothing when there is no path or it cannot be written.
// The file never exceeds 4096 bytes, what the kubelet reads.
void WriteTerminationMessage(const std::string& message);

// Rank 0 as it ends, whatever the outcome: its /progress document as the message's last line
// (api::kFinalProgressPrefix, api/progress.h), below any failure's line, replacing an earlier
// progress line. The controller reads it into the job's status.progress. Best effort.
void WriteFinalProgressMessage(const std::string& progress_json);

}  // namespace tessera::worker
