// framework/src/dist/dist_nccl.h — NCCL communicator for CUDA tensors (internal to dist.cpp).
//
// Invariants:
//  * Built only with HEED_HAVE_NCCL (CMake found nccl.h and libnccl beside the CUDA toolkit);
//    otherwise nccl_compiled() is false and create_nccl_communicator throws a heed::Error.
//  * Collectives are queued on the default stream of the current device (where heed's CUDA
//    backend queues all its work) and waited for before returning, polling with a deadline:
//    past the group's timeout, or when NCCL reports an asynchronous error, the communicator
//    is aborted and a heed::Error names the collective; it never hangs.
//  * `data` pointers are device pointers of contiguous tensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "heed/dist.h"
#include "heed/dtype.h"

namespace heed::dist::detail {

bool nccl_compiled();

class NcclCommunicator {
 public:
  virtual ~NcclCommunicator() = default;
  virtual void all_reduce(void* data, int64_t n, DType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // `out` holds world * bytes: rank r's `in` lands at out + r * bytes.
  virtual void all_gather(const void* in, void* out, int64_t bytes) = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
};

// `publish(bytes)` (rank 0) stores NCCL's unique id in the group's store; `fetch()` (every
// other rank) waits for it there (bounded by the store's timeout).
std::unique_ptr<NcclCommunicator> create_nccl_communicator(int rank, int world, std::chrono::milliseconds timeout,
                                                           const std::function<void(const std::string&)>& publish,
                                                           const std::function<std::string()>& fetch);

}  // namespace heed::dist::detail
