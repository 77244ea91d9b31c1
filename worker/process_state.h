// What the kernel says of a process that will not die, for the line that reports it.
#pragma once

#include <sys/types.h>

#include <string>

namespace tessera::worker {

// "state D, in <wait channel>" from /proc/<pid>/stat and /proc/<pid>/wchan ("state unknown"
// when /proc does not say). State D (uninterruptible sleep, as on a hung filesystem or GPU
// driver) is where no signal, SIGKILL included, takes effect until the kernel returns.
std::string KernelState(pid_t pid);

}  // namespace tessera::worker
