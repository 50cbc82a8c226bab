// heed/dist.h — several processes: process groups and collectives on CPU tensors (Gloo) and
// CUDA tensors (NCCL, or Gloo through the host).
//
// Invariants:
//  * Every rank calls the same collectives in the same order with tensors of the same shape
//    and dtype (as with torch.distributed); heed does not check that across ranks.
//  * Every collective is bounded by the group's timeout: a dead or silent peer makes it throw
//    a heed::Error that names the collective, this rank and Gloo's cause; it never hangs.
//    After such an error the group is unusable (other ranks see their own error).
//  * Tensors must be contiguous; a collective works in place on their storage. CPU tensors
//    always go through Gloo. CUDA tensors go through NCCL when the group was created with
//    backend "nccl" (built with CUDA and NCCL; a CUDA device is needed), otherwise they are
//    staged through the host (copied to the CPU, reduced over Gloo, copied back), which works
//    on any build with Gloo but costs two copies per collective.
//  * float16/bfloat16 are reduced in float32 (converted to float32, reduced, rounded back
//    once), so a 16-bit sum is as exact as one rounding of the float32 sum.
//    bool supports sum and max (both mean "logical or"); avg of a bool or integer tensor is
//    refused (integer avg is not representable), use sum.
//  * Sizes 0 and 1 and sizes not divisible by the world size all work; a 0-element tensor
//    needs no communication and returns at once on every rank.
//  * Built without Gloo (HEED_DIST=OFF or libgloo-dev missing), dist::is_available() is false
//    and init_process_group throws a heed::Error saying so.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "heed/tensor.h"

namespace heed::dist {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

// True when heed was built with Gloo (HEED_HAVE_GLOO).
bool is_available();
// True when heed was built with the NCCL backend (CUDA and NCCL found; a device is still
// needed at run time).
bool is_nccl_available();

struct InitOptions {
  // "gloo", or "nccl": Gloo for CPU tensors plus an NCCL communicator for CUDA tensors (its
  // unique id exchanged through the same store; each rank uses the current CUDA device).
  std::string backend = "gloo";
  int rank = 0;
  int world_size = 1;
  // Rendezvous, one of: a directory every rank can reach (a local folder for one machine, a
  // shared file system for several; heed-run creates one per launch on one machine and
  // passes HEED_STORE_PATH), or, when store_path is empty and world_size > 1, a TCP store
  // that rank 0 serves on master_addr:master_port (every request bounded by `timeout`).
  std::string store_path;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The address this rank's Gloo device listens on (HEED_HOSTNAME); left at 127.0.0.1 with a
  // master_addr that is not local, the machine's host name is used.
  std::string hostname = "127.0.0.1";
  // Key prefix in the store: several groups (e.g. test cases) can share one store.
  std::string prefix = "heed";
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

class ProcessGroup {
 public:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);

  // In place: every rank ends with the elementwise reduction over ranks.
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // In place: every rank ends with `root`'s values.
  void broadcast(Tensor& tensor, int root = 0);
  // out gets world_size() new tensors (shape and dtype of `input`), out[r] = rank r's input.
  void all_gather(std::vector<Tensor>& out, const Tensor& input);
  // Reduces `input` over ranks and returns this rank's slice of the flattened result: a 1-D
  // tensor of chunk_range(input.numel(), world_size(), rank()) elements (the first
  // numel % world_size ranks get one element more). Implemented as all_reduce + slice: it
  // moves the whole tensor, not 1/world of it (Gloo 0.5 has no general reduce_scatter).
  Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::Sum);
  void barrier();

  // Traffic counters (this process's calls): collectives issued and payload bytes passed
  // to them (the tensor bytes, not the bytes on the wire).
  struct Counters {
    int64_t collectives = 0;
    int64_t bytes = 0;
    double seconds = 0.0;  // wall time spent inside collectives
  };
  const Counters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

 private:
  std::unique_ptr<Impl> impl_;
  Counters counters_;
};

// [begin, end) of rank `rank`'s chunk when `n` elements are split over `world` ranks.
std::pair<int64_t, int64_t> chunk_range(int64_t n, int world, int rank);

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options);
// From HEED_RANK, HEED_WORLD_SIZE, HEED_STORE_PATH, HEED_MASTER_ADDR, HEED_MASTER_PORT and
// optionally HEED_HOSTNAME, HEED_DIST_TIMEOUT_MS, HEED_DIST_PREFIX and HEED_DIST_BACKEND
// (gloo or nccl) (as set by heed-run).
// Without HEED_WORLD_SIZE: a 1-rank group needing no store.
std::shared_ptr<ProcessGroup> init_process_group_from_env();
// HEED_WORLD_SIZE (1 when unset), read without joining a group: programs validate their
// arguments against it BEFORE init_process_group_from_env, so every rank rejects a bad flag the
// same way instead of one rank leaving while the others wait in the rendezvous.
int world_size_from_env();

// For amp::GradScalerOptions::found_inf_agreement: all_reduce max of the flag over `group`.
std::function<bool(bool)> found_inf_agreement(std::shared_ptr<ProcessGroup> group);
// The same as a plain call: true when `flag` is true on any rank.
bool any_rank(ProcessGroup& group, bool flag);

}  // namespace heed::dist
