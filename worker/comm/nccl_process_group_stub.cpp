// Builds without NCCL: the backend's entry point exists and says so, so callers need no #ifdef.
#include "worker/comm/nccl_process_group.h"

namespace tessera::comm {

std::shared_ptr<ProcessGroup> CreateNcclProcessGroup(const rendezvous::StoreClient&, int, int, int,
                                                     const NcclOptions&) {
  throw CommError("the NCCL backend is not in this build (configured without NCCL)");
}

}  // namespace tessera::comm
