// heed/ddp.h — dist::DistributedDataParallel: data parallelism over a ProcessGroup, after
// PyTorch's DDP.
//
// Invariants:
//  * At construction, parameters and buffers are broadcast from rank 0, so every rank starts
//    from rank 0's weights.
//  * Gradients are grouped into buckets in reverse parameter order (the order backward tends
//    to produce them): the first bucket holds up to first_bucket_bytes, the others up to
//    bucket_bytes; a parameter never straddles two buckets. The layout is fixed at
//    construction and depends only on the parameter list, so it is the same on every rank.
//  * A gradient hook on each parameter marks it ready; heed's engine runs a leaf's hooks as
//    soon as its last gradient of the pass arrived, while backward goes on. A bucket whose
//    gradients are all ready is launched at once, in strict bucket order (identical
//    collective order on every rank): with overlap on (the default) a communication thread
//    all-reduces it while the engine computes the next gradients; with overlap off the hook
//    reduces it on the calling thread. Each parameter's .grad ends as the average over ranks
//    of its locally accumulated gradient (what no_sync micro-steps accumulated plus this
//    backward's), summed in the same order as without DDP; overlap does not change a bit.
//  * The round ends with the backward pass (a callback queued on the engine): parameters
//    that got no gradient in it count as their local .grad or zeros (as PyTorch's
//    find_unused_parameters=True), the remaining buckets are reduced, backward waits for the
//    last reduction and writes the averages into .grad. When backward() returns, .grad holds
//    the averaged gradients on every rank. A reduction error (a peer died, timeout) is
//    rethrown by backward().
//  * Parameters live on one device. CUDA parameters have CUDA buckets, reduced through the
//    group (NCCL, or Gloo staged through the host) with overlap off: in the hooks, on the
//    thread that queues heed's CUDA work.
//  * While backward runs, the communication thread owns the group: issue no other collective
//    on it from a hook (Gloo contexts are not used from two threads at once). Between
//    backward passes (optimizer step, GradScaler agreement, checkpoints) the group is free.
//  * Inside a no_sync() scope, hooks only accumulate locally: no communication.
//  * heed::grad() (torch.autograd.grad) through a wrapped model's parameters is refused
//    (outside no_sync): it would reduce .grad but return local gradients. Use backward().
//  * Use with clip_grad_norm_: clip after backward returned (the averaged gradients are then
//    in .grad, identical on every rank, so every rank computes the same norm).
//  * Use with amp::GradScaler: the averaged gradients are identical on every rank, so
//    unscale_ finds the same Inf/NaN everywhere; set found_inf_agreement to
//    dist::found_inf_agreement(group) to make it explicit (one 1-byte all_reduce per step).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "heed/dist.h"
#include "heed/nn/module.h"

namespace heed::dist {

struct DDPOptions {
  int64_t first_bucket_bytes = int64_t{1} << 20;  // 1 MiB: reduced early in backward
  int64_t bucket_bytes = int64_t{25} << 20;       // 25 MiB
  bool broadcast_buffers = true;                  // at construction, from rank 0
  // Reduce buckets on a communication thread while backward goes on (false: in the hook,
  // on the thread running backward; same results, for measuring what overlap hides).
  bool overlap = true;
};

class DistributedDataParallel {
 public:
  struct State;
  DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return module_; }
  ProcessGroup& group();

  // While alive, backward accumulates gradients locally without any reduction.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // Ends the current round now if one is open (backward() already does this at its end, so
  // this is a no-op after a normal backward; kept for code written against the earlier API).
  void finish_gradient_sync();

  struct Counters {
    int64_t reductions = 0;         // bucket all_reduces issued
    int64_t syncs = 0;              // synchronised backward passes completed (all buckets reduced)
    int64_t bytes = 0;              // gradient bytes reduced
    double seconds = 0.0;           // wall time inside the all_reduces (communication thread)
    double wait_seconds = 0.0;      // time the backward thread was blocked on reductions: waiting
                                    // at its end (overlap on), reducing in the hooks (overlap off)
    double backward_seconds = 0.0;  // first gradient hook to end of round, summed over rounds
    // The share of reduction time hidden behind backward computation.
    double overlap_fraction() const { return seconds > 0 ? 1.0 - std::min(wait_seconds, seconds) / seconds : 0.0; }
  };
  Counters counters() const;
  void reset_counters();
  // Bucket layout: per bucket, the parameter indices (into module.parameters()).
  std::vector<std::vector<size_t>> bucket_layout() const;

 private:
  nn::Module& module_;
  std::shared_ptr<State> state_;
};

}  // namespace heed::dist
