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
//  * A gradient hook on each parameter marks it ready; a bucket is all-reduced (averaged
//    over ranks) as soon as all its gradients are ready, and buckets are reduced strictly in
//    bucket order (identical collective order on every rank). Each parameter's .grad ends
//    as the average over ranks of its locally accumulated gradient (what no_sync micro-steps
//    accumulated plus this backward's), summed in the same order as without DDP.
//  * heed's engine runs leaf hooks after the whole graph ran (a leaf's gradients are summed
//    over the pass first), and the reduction runs inside the hook on the calling thread: so
//    communication does NOT overlap backward computation here; it is bucketed (few large
//    messages) but serial. See README "Training on several processes or machines".
//  * Inside a no_sync() scope, hooks only accumulate locally: no communication.
//  * Every parameter must receive a gradient in each synchronised backward; otherwise
//    finish_gradient_sync() (called by the user after backward) reduces the incomplete
//    buckets with zeros for the missing gradients. It is a no-op when all buckets ran.
//  * heed::grad() (torch.autograd.grad) on a wrapped model's parameters runs the same hooks and
//    therefore reduces as well; as with PyTorch's DDP, use backward() with DDP.
//  * Use with clip_grad_norm_: clip after backward returned (the averaged gradients are then
//    in .grad, identical on every rank, so every rank computes the same norm).
//  * Use with amp::GradScaler: the averaged gradients are identical on every rank, so
//    unscale_ finds the same Inf/NaN everywhere; set found_inf_agreement to
//    dist::found_inf_agreement(group) to make it explicit (one 1-byte all_reduce per step).
#pragma once

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

  // Reduces the buckets that did not complete during the last backward (missing gradients
  // count as zero). Collective: call on every rank after backward, or never.
  void finish_gradient_sync();

  struct Counters {
    int64_t reductions = 0;  // bucket all_reduces issued
    int64_t syncs = 0;       // synchronised backward passes completed (all buckets reduced)
    int64_t bytes = 0;       // gradient bytes reduced
    double seconds = 0.0;    // wall time inside the all_reduces
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
