// The GPU backend of ProcessGroup: NCCL communicators bootstrapped through our rendezvous
// store (the unique id travels as a key), created non-blocking with a deadline, split by
// ncclCommSplit, aborted on any failure. Each group has its own CUDA stream; work handles
// wait on CUDA events. Compiled only where NCCL exists (TESSERA_HAVE_NCCL); device memory only.
#pragma once

#include <memory>
#include <string>

#include "worker/comm/process_group.h"
#include "worker/rendezvous/store_client.h"

namespace tessera::comm {

struct NcclOptions {
  CommOptions comm;
  std::string prefix = "tessera/";  // store key prefix, as for Gloo
};

// Creates the world communicator on CUDA device `device`; every rank calls it. Blocks until
// NCCL finished initialising or options.comm.timeout passed (then the communicator is
// aborted and CommError thrown). Throws CommError when no CUDA device is usable.
std::shared_ptr<ProcessGroup> CreateNcclProcessGroup(const rendezvous::StoreClient& store, int rank,
                                                     int size, int device,
                                                     const NcclOptions& options);

}  // namespace tessera::comm
