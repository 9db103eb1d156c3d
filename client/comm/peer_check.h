// The first exchange of a new communicator: which GPU each rank drives. Refuses two ranks on
// one GPU (their spinning barriers would wait on each other's time slices) and a pair of
// visible GPUs that cannot reach each other's memory, and checks that every rank asked for
// the same buffer size, before any GPU memory is shared.
#pragma once

#include <chrono>
#include <cstddef>

#include "client/comm/rendezvous.h"
#include "client/core/driver/cuda_driver.h"
#include "kiln/status.h"

namespace kiln::client::comm {

Status CheckPeers(const CudaDriver& driver, int device, size_t buffer_bytes, Rendezvous& rendezvous,
                  std::chrono::milliseconds timeout);

}  // namespace kiln::client::comm
