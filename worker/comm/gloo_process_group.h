// The CPU backend of ProcessGroup: Gloo's TCP transport, bootstrapped through our rendezvous
// store. Collectives of a group run in order on one background thread so callers overlap
// them with compute; sends and receives are posted directly. Host memory only.
#pragma once

#include <memory>
#include <string>

#include "worker/comm/process_group.h"
#include "worker/rendezvous/store_client.h"

namespace tessera::comm {

struct GlooOptions {
  // Address this rank's Gloo pairs listen on and advertise (an IP or a resolvable name).
  std::string host = "127.0.0.1";
  CommOptions comm;
  // Store keys of this group live under this prefix (one job attempt = one store).
  std::string prefix = "tessera/";
  // In a group (the world, or one split from it) whose ranks are all on this machine, float32
  // sums and averages go through shared memory (shm_allreduce.h) instead of Gloo's loopback
  // sockets; other operations stay on Gloo. A group on several machines uses Gloo alone, as
  // with false.
  bool shared_memory_allreduce = true;

  // host from TESSERA_COMM_HOST, else this machine's hostname; comm from CommOptions::FromEnv;
  // shared_memory_allreduce false when TESSERA_SHM_ALLREDUCE=0.
  static GlooOptions FromEnv();
};

// Creates the world group of `size` ranks; every rank calls it with its own `rank`. Blocks
// until all ranks connected (or options.comm.timeout passes: CommError naming the ranks
// that never arrived). `store` is only used for the call (it is cloned for later needs).
// Sets SIGPIPE to ignored when it has the default action (Gloo's sockets would otherwise
// turn a lost peer into a silent process death).
std::shared_ptr<ProcessGroup> CreateGlooProcessGroup(const rendezvous::StoreClient& store, int rank,
                                                     int size, const GlooOptions& options);

}  // namespace tessera::comm
