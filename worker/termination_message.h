// The one line a failed container leaves for Kubernetes. The kubelet reads the file at the
// container's terminationMessagePath (by default /dev/termination-log, which it creates) into
// the pod's status as the container's terminated message; the controller carries that into
// the TrainingJob's status.lastFailure and its events, so `kubectl describe tj` says why a rank
// failed without `kubectl logs`.
#pragma once

#include <string>

namespace tessera::worker {

// Where the message goes: $TESSERA_TERMINATION_MESSAGE_PATH when set, else
// /dev/termination-log when that file exists (in a pod), else "" (not in a pod: nowhere).
std::string TerminationMessagePath();

// Writes `message` (at most 4096 bytes, what the kubelet reads) to TerminationMessagePath(),
// unless the file already holds a message: the first failure in a pod, usually the cause, is
// the one kept. Best effort: does nothing when there is no path or it cannot be written.
void WriteTerminationMessage(const std::string& message);

}  // namespace tessera::worker
