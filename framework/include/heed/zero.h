// heed/zero.h — dist::ZeroRedundancyOptimizer: ZeRO stage 1 (sharded optimizer state) over a
// ProcessGroup, after llm.c's zero.cuh and PyTorch's ZeroRedundancyOptimizer.
//
// Layout (fixed at construction, the same on every rank because it depends only on the
// parameter list): the parameters of each dtype, in group order then parameter order,
// flattened one after another, form a flat space of n elements; rank r owns the elements
// dist::chunk_range(n, world, r) of every space (the first n % world ranks one more). A
// parameter may straddle two ranks: each rank owns a "piece" (a contiguous flat range of it).
//
// Invariants:
//  * Each rank keeps optimizer state only for its pieces: an inner optimizer (AdamW, or any
//    heed optimizer made by the factory, which must update elementwise: SGD, Adam, AdamW) runs
//    on 1-D shard tensors, one per piece. Per-rank state bytes = (full state bytes) * owned
//    elements / all elements, i.e. 1/world of the full state up to one element per space.
//  * step() is collective: every rank calls it, in the same order as its other collectives.
//    It copies each piece from its parameter, gives it its slice of the gradient, steps the
//    inner optimizer, then all-gathers every space, so every rank ends with identical
//    parameters (bit for bit). Per parameter and step the update is the elementwise update
//    the inner optimizer would do on the whole parameter: the result equals one process
//    running the inner optimizer on the same gradients.
//  * Gradients: by default (reduce_gradients = false) step() takes .grad as already averaged
//    over ranks and identical on every rank (what DistributedDataParallel leaves), so
//    clip_grad_norm_ and amp::GradScaler work as without ZeRO (every rank sees the same
//    gradients, computes the same norm, skips the same steps). With reduce_gradients = true
//    (no DDP), step() averages the raw local gradients with reduce_scatter (a parameter
//    without a gradient on some ranks counts as zeros there; one without a gradient on every
//    rank is skipped) and leaves .grad as it was; clip there with ZeroOptions::max_grad_norm
//    (the norm of the averaged gradients, computed from the shards), not with clip_grad_norm_.
//  * A parameter without a gradient (on every rank) is skipped as by the inner optimizer.
//  * Parameters must be contiguous CPU tensors (Gloo) and keep their shapes; a change of the
//    parameter list after construction (add_param_group, a group resized) is a heed::Error at
//    the next step(). Schedulers change param_groups()[g].lr as usual; step() forwards it.
//  * state_dict() is this rank's shard (inner optimizer state plus the layout, rank and world
//    size); load_state_dict accepts the shard of the same rank and layout, or a full state of
//    the inner optimizer (e.g. from consolidate_state_dict, any world size) which each rank
//    slices. consolidate_state_dict(to) is collective and returns on rank `to` the state the
//    inner optimizer would have on one process (loadable into a plain AdamW).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "heed/dist.h"
#include "heed/optim.h"

namespace heed::dist {

struct ZeroOptions {
  // false: .grad is already averaged over ranks (after DDP). true: step() averages it.
  bool reduce_gradients = false;
  // Only with reduce_gradients: clip the averaged gradients to this global 2-norm (as
  // clip_grad_norm_: scaled by max/(norm + 1e-6) when norm > max; a non-finite norm clips
  // nothing). 0: no clipping.
  double max_grad_norm = 0.0;
};

// Makes the inner optimizer from parameter groups (the shard tensors of this rank).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, std::shared_ptr<ProcessGroup> group,
                          OptimizerFactory make, ZeroOptions options = {});
  // AdamW over `params` (the common case).
  ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                          optim::AdamWOptions adamw = {}, ZeroOptions options = {});
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, std::shared_ptr<ProcessGroup> group,
                          optim::AdamWOptions adamw, ZeroOptions options = {});
  ~ZeroRedundancyOptimizer() override;

  void step() override;

  // A contiguous flat range of one parameter owned by this rank.
  struct Piece {
    size_t group = 0, index = 0;  // the parameter: param_groups()[group].params[index]
    int64_t begin = 0;            // first element (in the flattened parameter)
    int64_t numel = 0;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Elements of all parameters this rank owns, and of all parameters.
  int64_t owned_numel() const;
  int64_t total_numel() const;
  // Bytes of optimizer state (buffers) this rank holds now.
  int64_t state_bytes() const;
  // The inner optimizer over this rank's shards (null when this rank owns no element); its
  // state(group, j) is the state of this rank's pieces (Optimizer::state of the wrapper is empty).
  const optim::Optimizer* shard_optimizer() const { return inner_.get(); }
  const char* inner_name() const { return inner_name_.c_str(); }
  ProcessGroup& group() { return *group_; }
  // With reduce_gradients and max_grad_norm: the norm of the last step's averaged gradients.
  double last_grad_norm() const { return last_grad_norm_; }

  optim::OptimizerState state_dict() const override;
  void load_state_dict(const optim::OptimizerState& state) override;
  // Collective. On rank `to`: the full state of the inner optimizer over all parameters (as
  // one process would hold it); on the other ranks an empty OptimizerState.
  optim::OptimizerState consolidate_state_dict(int to = 0);

  struct Prepared;  // construction detail (the validated, resolved groups and the probe optimizer)

 protected:
  nlohmann::json options_json() const override;
  void load_options_json(const nlohmann::json& options) override;
  std::vector<std::string> buffer_names(const nlohmann::json& options) const override;

 private:
  ZeroRedundancyOptimizer(Prepared prepared, std::shared_ptr<ProcessGroup> group, OptimizerFactory make,
                          ZeroOptions options);
  struct Space;
  void check_layout() const;
  // All-gathers space `space`: this rank contributes, per piece k, the piece.numel elements at
  // source(k) (zeros where null). Returns the whole space, (n,).
  Tensor gather_space(size_t space, const std::function<const void*(size_t)>& source);

  std::shared_ptr<ProcessGroup> group_;
  ZeroOptions options_;
  std::unique_ptr<optim::Optimizer> probe_;  // the inner optimizer over all parameters, never stepped
  std::unique_ptr<optim::Optimizer> inner_;  // over `shards_`
  std::string inner_name_;
  nlohmann::json inner_options_;  // the inner optimizer's options (for consolidate_state_dict)
  std::vector<std::unique_ptr<Space>> spaces_;
  std::vector<Piece> pieces_;
  std::vector<Tensor> shards_;                 // (piece.numel,) one per piece
  std::vector<size_t> shard_index_;            // piece k is inner group pieces_[k].group, index shard_index_[k]
  std::vector<std::vector<Dims>> shapes_;      // parameter shapes at construction
  std::vector<std::vector<const void*>> ids_;  // parameter identities at construction
  double last_grad_norm_ = 0.0;
};

}  // namespace heed::dist
