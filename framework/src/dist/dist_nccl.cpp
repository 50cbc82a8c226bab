// framework/src/dist/dist_nccl.cpp — NCCL communicator for CUDA tensors (see dist_nccl.h).
//
// Invariants: the communicator is created non-blocking (ncclConfig_t::blocking = 0) so that
// initialisation and every collective can be abandoned at the deadline (ncclCommAbort); a
// communicator that failed once refuses further work.
#include "dist_nccl.h"

#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "heed/error.h"

#ifdef HEED_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace heed::dist::detail {

#ifdef HEED_HAVE_NCCL

bool nccl_compiled() { return true; }

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return ncclFloat32;
    case kFloat64:
      return ncclFloat64;
    case kFloat16:
      return ncclFloat16;
    case kBFloat16:
      return ncclBfloat16;
    case kInt32:
      return ncclInt32;
    case kInt64:
      return ncclInt64;
    case kBool:
      return ncclUint8;
    default:
      throw Error(fmt::format("heed::dist (nccl): unsupported dtype {}", dtype_name(dtype)));
  }
}

ncclRedOp_t nccl_op(ReduceOp op, DType dtype) {
  if (dtype == kBool) return ncclMax;  // sum and max of bools are both "or"
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

class Communicator final : public NcclCommunicator {
 public:
  Communicator(int rank, int world, std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), timeout_(timeout) {}
  ~Communicator() override {
    if (comm_) {
      if (failed_.empty())
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);  // frees it, without waiting for peers that may be gone
    }
  }

  void init(const ncclUniqueId& id) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) fail("init_process_group", ncclGetErrorString(r));
    wait("init_process_group", /*stream_work=*/false);
  }

  void all_reduce(void* data, int64_t n, DType dtype, ReduceOp op) override {
    check_usable("all_reduce");
    enqueued("all_reduce", ncclAllReduce(data, data, static_cast<size_t>(n), nccl_type(dtype), nccl_op(op, dtype),
                                         comm_, /*stream=*/nullptr));
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    check_usable("broadcast");
    enqueued("broadcast", ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, nullptr));
  }
  void all_gather(const void* in, void* out, int64_t bytes) override {
    check_usable("all_gather");
    enqueued("all_gather", ncclAllGather(in, out, static_cast<size_t>(bytes), ncclUint8, comm_, nullptr));
  }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

 private:
  void check_usable(const char* collective) const {
    if (!failed_.empty())
      throw Error(fmt::format("heed::dist::{} (nccl): rank {} of {}: the communicator failed earlier ({})", collective,
                              rank_, world_, failed_));
  }
  [[noreturn]] void fail(const char* collective, const std::string& cause) {
    failed_ = cause;
    throw Error(
        fmt::format("heed::dist::{} (nccl): rank {} of {} failed: {} (a peer rank died, hung or called a "
                    "different collective)",
                    collective, rank_, world_, cause));
  }
  void enqueued(const char* collective, ncclResult_t r) {
    if (r != ncclSuccess && r != ncclInProgress) fail(collective, ncclGetErrorString(r));
    wait(collective, /*stream_work=*/true);
  }
  // Polls until the queued work finished, NCCL reports an error or the deadline passed.
  void wait(const char* collective, bool stream_work) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) fail(collective, ncclGetErrorString(async));
      if (async == ncclSuccess) {
        if (!stream_work) return;
        const cudaError_t q = cudaStreamQuery(nullptr);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) fail(collective, cudaGetErrorString(q));
      }
      if (std::chrono::steady_clock::now() > deadline)
        fail(collective, fmt::format("not finished after {} ms", timeout_.count()));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  std::string failed_;
};

}  // namespace

std::unique_ptr<NcclCommunicator> create_nccl_communicator(int rank, int world, std::chrono::milliseconds timeout,
                                                           const std::function<void(const std::string&)>& publish,
                                                           const std::function<std::string()>& fetch) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    throw Error(fmt::format(
        "heed::dist::init_process_group: backend 'nccl' needs a CUDA device; rank {} of {} found none", rank, world));
  }
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw Error(fmt::format("heed::dist::init_process_group (nccl): ncclGetUniqueId: {}", ncclGetErrorString(r)));
    publish(std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string bytes = fetch();
    if (bytes.size() != sizeof(id))
      throw Error(
          fmt::format("heed::dist::init_process_group (nccl): the store holds a unique id of {} bytes, "
                      "expected {}",
                      bytes.size(), sizeof(id)));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  auto comm = std::make_unique<Communicator>(rank, world, timeout);
  comm->init(id);
  return comm;
}

#else  // built without NCCL

bool nccl_compiled() { return false; }

std::unique_ptr<NcclCommunicator> create_nccl_communicator(int rank, int world, std::chrono::milliseconds,
                                                           const std::function<void(const std::string&)>&,
                                                           const std::function<std::string()>&) {
  throw Error(fmt::format(
      "heed::dist::init_process_group: backend 'nccl' is not available in this build (rank {} of {}): heed was "
      "built without CUDA or without NCCL (nccl.h and libnccl beside the CUDA toolkit); use 'gloo' (CUDA tensors "
      "are then staged through the host)",
      rank, world));
}

#endif

}  // namespace heed::dist::detail
