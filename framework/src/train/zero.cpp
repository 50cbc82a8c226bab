// framework/src/train/zero.cpp — ZeroRedundancyOptimizer (ZeRO-1, see heed/zero.h).
//
// Invariants: the layout (spaces, entries, pieces) is computed once from the parameter list
// and chunk_range, so every rank derives the same one without communication; every
// collective of step()/consolidate_state_dict() is issued by every rank in the same order
// (one loop over spaces, with no rank-dependent branch around a collective); parameters are
// written only through their raw storage under NoGradGuard, with a version bump.
#include "heed/zero.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "heed/autograd.h"
#include "heed/error.h"
#include "heed/ops.h"

namespace heed::dist {

using nlohmann::json;
using optim::OptimizerState;
using optim::ParamGroup;

namespace {

constexpr const char* kOp = "dist::ZeroRedundancyOptimizer";
constexpr const char* kName = "ZeroRedundancyOptimizer";
// The buffers consolidate_state_dict knows (those of heed's elementwise optimizers).
const std::vector<std::string> kKnownBuffers = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};

std::vector<ParamGroup> single_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

bool valid_rate(const json& value) {
  return value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() >= 0.0;
}

}  // namespace

// The parameters of one dtype laid end to end (n elements); this rank owns [begin, end).
struct ZeroRedundancyOptimizer::Space {
  struct Entry {
    size_t group = 0, index = 0;
    int64_t offset = 0, numel = 0;  // where the parameter lies in the space
  };
  DType dtype = kFloat32;
  std::vector<Entry> entries;
  int64_t n = 0;
  int64_t begin = 0, end = 0;
  int64_t max_chunk = 0;              // ceil(n / world): every rank's all_gather contribution
  std::vector<size_t> pieces;         // indices into pieces_
  std::vector<int64_t> piece_offset;  // where each of them starts in the space
};

struct ZeroRedundancyOptimizer::Prepared {
  std::unique_ptr<optim::Optimizer> probe;
  std::vector<ParamGroup> groups;
  double lr = 0.0, weight_decay = 0.0;
  json inner_options;
};

namespace {

// Builds the inner optimizer over all parameters (it validates them and resolves each group's
// lr and weight_decay) without stepping it: it never allocates state.
ZeroRedundancyOptimizer::Prepared prepare(std::vector<ParamGroup> groups, const OptimizerFactory& make) {
  HEED_CHECK(make != nullptr, kOp, "the optimizer factory is empty");
  ZeroRedundancyOptimizer::Prepared out;
  out.probe = make(std::move(groups));
  HEED_CHECK(out.probe != nullptr, kOp, "the optimizer factory returned null");
  HEED_CHECK(dynamic_cast<ZeroRedundancyOptimizer*>(out.probe.get()) == nullptr, kOp,
             "the factory made a ZeroRedundancyOptimizer; it must make the optimizer to shard (e.g. AdamW)");
  out.groups = out.probe->param_groups();
  const json scalars = out.probe->state_dict().scalars;
  out.inner_options = scalars.value("options", json::object());
  out.lr = out.inner_options.contains("lr") && valid_rate(out.inner_options["lr"])
               ? out.inner_options["lr"].get<double>()
               : out.groups.front().lr;
  out.weight_decay = out.inner_options.contains("weight_decay") && valid_rate(out.inner_options["weight_decay"])
                         ? out.inner_options["weight_decay"].get<double>()
                         : out.groups.front().weight_decay;
  return out;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<ParamGroup> groups, std::shared_ptr<ProcessGroup> group,
                                                 OptimizerFactory make, ZeroOptions options)
    : ZeroRedundancyOptimizer(prepare(std::move(groups), make), std::move(group), make, options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                                                 optim::AdamWOptions adamw, ZeroOptions options)
    : ZeroRedundancyOptimizer(single_group(std::move(params)), std::move(group), adamw, options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<ParamGroup> groups, std::shared_ptr<ProcessGroup> group,
                                                 optim::AdamWOptions adamw, ZeroOptions options)
    : ZeroRedundancyOptimizer(
          std::move(groups), std::move(group),
          [adamw](std::vector<ParamGroup> g) { return std::make_unique<optim::AdamW>(std::move(g), adamw); }, options) {
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(Prepared prepared, std::shared_ptr<ProcessGroup> group,
                                                 OptimizerFactory make, ZeroOptions options)
    : Optimizer(kName, std::move(prepared.groups), prepared.lr, prepared.weight_decay),
      group_(std::move(group)),
      options_(options),
      probe_(std::move(prepared.probe)),
      inner_options_(std::move(prepared.inner_options)) {
  HEED_CHECK(group_ != nullptr, kOp, "null process group");
  HEED_CHECK(std::isfinite(options_.max_grad_norm) && options_.max_grad_norm >= 0.0, kOp,
             "max_grad_norm must be finite and >= 0, got {}", options_.max_grad_norm);
  HEED_CHECK(options_.max_grad_norm == 0.0 || options_.reduce_gradients, kOp,
             "max_grad_norm {} needs reduce_gradients = true (with gradients averaged by DDP, call "
             "clip_grad_norm_ before step())",
             options_.max_grad_norm);
  inner_name_ = probe_->name();
  const int world = group_->world_size(), rank = group_->rank();
  for (size_t g = 0; g < groups_.size(); ++g) {
    shapes_.emplace_back();
    ids_.emplace_back();
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      HEED_CHECK(p.device() == kCPU && (p.numel() == 0 || p.is_contiguous()), kOp,
                 "parameter {} of group {} (shape {}) must be a contiguous CPU tensor (Gloo; NCCL: not yet)", i, g,
                 shape_str(p.shape()));
      shapes_[g].push_back(p.shape());
      ids_[g].push_back(p.impl_ptr().get());
      auto it = std::find_if(spaces_.begin(), spaces_.end(), [&](const auto& s) { return s->dtype == p.dtype(); });
      if (it == spaces_.end()) {
        spaces_.push_back(std::make_unique<Space>());
        spaces_.back()->dtype = p.dtype();
        it = spaces_.end() - 1;
      }
      Space& s = **it;
      s.entries.push_back({g, i, s.n, p.numel()});
      s.n += p.numel();
    }
  }
  for (auto& space : spaces_) {
    Space& s = *space;
    std::tie(s.begin, s.end) = chunk_range(s.n, world, rank);
    s.max_chunk = (s.n + world - 1) / world;
    for (const Space::Entry& e : s.entries) {
      const int64_t lo = std::max(e.offset, s.begin), hi = std::min(e.offset + e.numel, s.end);
      if (lo >= hi) continue;
      s.pieces.push_back(pieces_.size());
      s.piece_offset.push_back(lo);
      pieces_.push_back({e.group, e.index, lo - e.offset, hi - lo});
    }
  }
  std::vector<ParamGroup> inner_groups(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    inner_groups[g].lr = groups_[g].lr;
    inner_groups[g].weight_decay = groups_[g].weight_decay;
  }
  for (const Piece& piece : pieces_) {
    const Tensor& p = groups_[piece.group].params[piece.index];
    Tensor shard = zeros({piece.numel}, p.dtype());                 // (numel,)
    shard.storage()->set_category(MemoryCategory::OptimizerState);  // this rank's copy of its slice
    shard_index_.push_back(inner_groups[piece.group].params.size());
    inner_groups[piece.group].params.push_back(shard);
    shards_.push_back(shard);
  }
  if (!pieces_.empty()) {
    inner_ = make(std::move(inner_groups));
    HEED_CHECK(inner_ != nullptr, kOp, "the optimizer factory returned null");
  }
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

int64_t ZeroRedundancyOptimizer::owned_numel() const {
  int64_t n = 0;
  for (const Piece& p : pieces_) n += p.numel;
  return n;
}

int64_t ZeroRedundancyOptimizer::total_numel() const {
  int64_t n = 0;
  for (const auto& s : spaces_) n += s->n;
  return n;
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  if (!inner_) return 0;
  int64_t bytes = 0;
  const auto& groups = inner_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t j = 0; j < groups[g].params.size(); ++j)
      for (const auto& [name, t] : inner_->state(g, j).buffers)
        bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

void ZeroRedundancyOptimizer::check_layout() const {
  HEED_CHECK(groups_.size() == shapes_.size(), kOp,
             "the optimizer has {} parameter groups but was built with {}; the parameter list is fixed at "
             "construction (create a new ZeroRedundancyOptimizer)",
             groups_.size(), shapes_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    HEED_CHECK(groups_[g].params.size() == shapes_[g].size(), kOp,
               "group {} has {} parameters but was built with {}; the parameter list is fixed at construction "
               "(create a new ZeroRedundancyOptimizer)",
               g, groups_[g].params.size(), shapes_[g].size());
    for (size_t i = 0; i < shapes_[g].size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      HEED_CHECK(p.defined() && p.impl_ptr().get() == ids_[g][i] && p.shape() == shapes_[g][i], kOp,
                 "parameter {} of group {} was replaced or reshaped after construction (built for shape {}); the "
                 "parameter list is fixed at construction",
                 i, g, shape_str(shapes_[g][i]));
      HEED_CHECK(p.numel() == 0 || p.is_contiguous(), kOp,
                 "parameter {} of group {} (shape {}) is no longer contiguous", i, g, shape_str(p.shape()));
    }
  }
}

Tensor ZeroRedundancyOptimizer::gather_space(size_t space, const std::function<const void*(size_t)>& source) {
  const Space& s = *spaces_[space];
  const size_t esize = dtype_size(s.dtype);
  Tensor mine = zeros({s.max_chunk}, s.dtype);  // (ceil(n/world),): this rank's chunk, padded
  char* dst = static_cast<char*>(mine.raw_data());
  for (size_t j = 0; j < s.pieces.size(); ++j) {
    const size_t k = s.pieces[j];
    if (const void* src = source(k))
      std::memcpy(dst + (s.piece_offset[j] - s.begin) * esize, src, static_cast<size_t>(pieces_[k].numel) * esize);
  }
  std::vector<Tensor> parts;
  group_->all_gather(parts, mine);
  Tensor flat = empty({s.n}, s.dtype);  // (n,)
  char* out = static_cast<char*>(flat.raw_data());
  for (int r = 0; r < group_->world_size(); ++r) {
    const auto [b, e] = chunk_range(s.n, group_->world_size(), r);
    if (e > b) std::memcpy(out + b * esize, parts[r].raw_data(), static_cast<size_t>(e - b) * esize);
  }
  return flat;
}

void ZeroRedundancyOptimizer::step() {
  prepare_step();
  check_layout();
  NoGradGuard no_grad;
  std::vector<Tensor> piece_grads(pieces_.size());  // (piece.numel,) or undefined
  if (!options_.reduce_gradients) {
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const Piece& piece = pieces_[k];
      const Tensor& p = groups_[piece.group].params[piece.index];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      HEED_CHECK(grad.shape() == p.shape(), kOp,
                 "the gradient of parameter {} of group {} has shape {}, the parameter {}", piece.index, piece.group,
                 shape_str(grad.shape()), shape_str(p.shape()));
      piece_grads[k] = grad.detach().reshape({-1}).narrow(0, piece.begin, piece.numel).to(p.dtype()).contiguous();
    }
  } else {
    // Which parameters have a gradient on some rank (one small all_reduce).
    std::vector<int64_t> first_flag(groups_.size(), 0);
    int64_t nparams = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      first_flag[g] = nparams;
      nparams += static_cast<int64_t>(groups_[g].params.size());
    }
    Tensor flags = zeros({nparams}, kInt32);  // (nparams,)
    int32_t* flag = flags.data_ptr<int32_t>();
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t i = 0; i < groups_[g].params.size(); ++i)
        flag[first_flag[g] + static_cast<int64_t>(i)] = groups_[g].params[i].grad().defined() ? 1 : 0;
    group_->all_reduce(flags, ReduceOp::Max);
    for (size_t si = 0; si < spaces_.size(); ++si) {
      const Space& s = *spaces_[si];
      const size_t esize = dtype_size(s.dtype);
      Tensor flat = zeros({s.n}, s.dtype);  // (n,): the local gradients, zeros where missing
      char* dst = static_cast<char*>(flat.raw_data());
      for (const Space::Entry& e : s.entries) {
        const Tensor& p = groups_[e.group].params[e.index];
        const Tensor grad = p.grad();
        if (!grad.defined() || e.numel == 0) continue;
        HEED_CHECK(grad.shape() == p.shape(), kOp,
                   "the gradient of parameter {} of group {} has shape {}, the parameter {}", e.index, e.group,
                   shape_str(grad.shape()), shape_str(p.shape()));
        const Tensor g = grad.detach().to(s.dtype).contiguous();
        std::memcpy(dst + e.offset * esize, g.raw_data(), static_cast<size_t>(e.numel) * esize);
      }
      const Tensor chunk = group_->reduce_scatter(flat, ReduceOp::Avg);  // (end - begin,)
      for (size_t j = 0; j < s.pieces.size(); ++j) {
        const size_t k = s.pieces[j];
        const Piece& piece = pieces_[k];
        if (flag[first_flag[piece.group] + static_cast<int64_t>(piece.index)] == 0) continue;
        piece_grads[k] = chunk.narrow(0, s.piece_offset[j] - s.begin, piece.numel).contiguous();
      }
    }
    if (options_.max_grad_norm > 0.0) {
      double local = 0.0;
      for (const Tensor& g : piece_grads)
        if (g.defined())
          for (double v : g.to(kFloat64).to_vector<double>()) local += v * v;
      Tensor total = full({1}, local, kFloat64);
      group_->all_reduce(total, ReduceOp::Sum);
      last_grad_norm_ = std::sqrt(total.item<double>());
      if (std::isfinite(last_grad_norm_) && last_grad_norm_ > options_.max_grad_norm) {
        const double coef = options_.max_grad_norm / (last_grad_norm_ + 1e-6);
        for (Tensor& g : piece_grads)
          if (g.defined()) g.mul_(coef);
      }
    }
  }
  if (inner_) {
    auto& inner_groups = inner_->param_groups();
    for (size_t g = 0; g < groups_.size(); ++g) {
      inner_groups[g].lr = groups_[g].lr;
      inner_groups[g].weight_decay = groups_[g].weight_decay;
    }
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const Piece& piece = pieces_[k];
      const Tensor& p = groups_[piece.group].params[piece.index];
      Tensor& shard = shards_[k];
      std::memcpy(shard.raw_data(), static_cast<const char*>(p.raw_data()) + piece.begin * p.element_size(),
                  static_cast<size_t>(piece.numel) * p.element_size());
      shard.set_grad(piece_grads[k]);
    }
    inner_->step();
    for (Tensor& shard : shards_) shard.zero_grad();
  }
  // Every rank sends its updated chunk and receives the others'.
  for (size_t si = 0; si < spaces_.size(); ++si) {
    const Tensor flat = gather_space(si, [this](size_t k) -> const void* { return shards_[k].raw_data(); });
    const Space& s = *spaces_[si];
    const size_t esize = dtype_size(s.dtype);
    for (const Space::Entry& e : s.entries) {
      if (e.numel == 0) continue;
      Tensor p = groups_[e.group].params[e.index];
      std::memcpy(p.raw_data(), static_cast<const char*>(flat.raw_data()) + e.offset * esize,
                  static_cast<size_t>(e.numel) * esize);
      p.storage()->bump_version();
    }
  }
}

OptimizerState ZeroRedundancyOptimizer::state_dict() const {
  OptimizerState out;
  json inner_scalars = nullptr;
  if (inner_) {
    out = inner_->state_dict();
    inner_scalars = std::move(out.scalars);
  }
  json pieces = json::array(), groups = json::array();
  for (const Piece& p : pieces_) pieces.push_back({p.group, p.index, p.begin, p.numel});
  for (const ParamGroup& g : groups_) groups.push_back({{"lr", g.lr}, {"weight_decay", g.weight_decay}});
  out.scalars = {{"optimizer", kName},
                 {"inner", inner_name_},
                 {"world_size", group_->world_size()},
                 {"rank", group_->rank()},
                 {"pieces", std::move(pieces)},
                 {"param_groups", std::move(groups)},
                 {"inner_state", std::move(inner_scalars)}};
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const OptimizerState& saved) {
  constexpr const char* kLoad = "ZeroRedundancyOptimizer::load_state_dict";
  const json& s = saved.scalars;
  HEED_CHECK(s.is_object() && s.contains("optimizer") && s["optimizer"].is_string(), kLoad,
             "malformed optimizer state: no 'optimizer' name");
  const std::string name = s["optimizer"].get<std::string>();
  HEED_CHECK(name == kName || name == inner_name_, kLoad,
             "the state belongs to optimizer '{}'; expected '{}' (a shard) or '{}' (a full state)", name, kName,
             inner_name_);
  HEED_CHECK(s.contains("param_groups") && s["param_groups"].is_array() && s["param_groups"].size() == groups_.size(),
             kLoad, "malformed optimizer state: expected 'param_groups' listing {} groups", groups_.size());
  const json& saved_groups = s["param_groups"];
  for (size_t g = 0; g < groups_.size(); ++g)
    HEED_CHECK(saved_groups[g].is_object() && saved_groups[g].contains("lr") && valid_rate(saved_groups[g]["lr"]) &&
                   saved_groups[g].contains("weight_decay") && valid_rate(saved_groups[g]["weight_decay"]),
               kLoad, "malformed optimizer state: group {} needs finite lr and weight_decay >= 0", g);
  if (name == kName) {
    // This rank's shard, saved by the same rank of the same layout.
    HEED_CHECK(s.value("inner", std::string()) == inner_name_, kLoad,
               "the shard holds {} state, this optimizer shards {}", s.value("inner", std::string("?")), inner_name_);
    const int world = s.value("world_size", -1), rank = s.value("rank", -1);
    HEED_CHECK(world == group_->world_size() && rank == group_->rank(), kLoad,
               "the shard was saved by rank {} of {}, this is rank {} of {}; load a consolidated state "
               "(consolidate_state_dict) to change the number of ranks",
               rank, world, group_->rank(), group_->world_size());
    json pieces = json::array();
    for (const Piece& p : pieces_) pieces.push_back({p.group, p.index, p.begin, p.numel});
    HEED_CHECK(s.contains("pieces") && s["pieces"] == pieces, kLoad,
               "the shard was saved for a different parameter layout (other parameters or shapes)");
    if (inner_) {
      HEED_CHECK(s.contains("inner_state") && s["inner_state"].is_object(), kLoad,
                 "malformed optimizer state: no 'inner_state'");
      inner_->load_state_dict({saved.tensors, s["inner_state"]});
      inner_options_ = s["inner_state"].value("options", inner_options_);
    } else {
      HEED_CHECK(saved.tensors.empty(), kLoad, "this rank owns no element but the shard has {} tensors",
                 saved.tensors.size());
    }
  } else {
    // A full state of the inner optimizer: each rank keeps the slices of its pieces.
    HEED_CHECK(s.contains("state") && s["state"].is_array() && s["state"].size() == groups_.size(), kLoad,
               "malformed optimizer state: expected 'state' listing {} groups", groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      const json& shapes = saved_groups[g].value("param_shapes", json());
      HEED_CHECK(shapes.is_array() && shapes.size() == groups_[g].params.size() && s["state"][g].is_array() &&
                     s["state"][g].size() == groups_[g].params.size(),
                 kLoad, "group {} of the state does not list {} parameters", g, groups_[g].params.size());
      for (size_t i = 0; i < groups_[g].params.size(); ++i)
        HEED_CHECK(shapes[i] == json(groups_[g].params[i].shape().vec()), kLoad,
                   "parameter {} of group {} has shape {} but the state was saved for shape {}", i, g,
                   shape_str(groups_[g].params[i].shape()), shapes[i].dump());
    }
    std::map<std::string, const Tensor*> tensors;
    for (const auto& [key, t] : saved.tensors) {
      HEED_CHECK(t.defined(), kLoad, "the state tensor '{}' is undefined", key);
      tensors.emplace(key, &t);
    }
    std::set<std::string> used;
    json inner_groups = json::array(), inner_states = json::array();
    for (size_t g = 0; g < groups_.size(); ++g) {
      inner_groups.push_back({{"lr", saved_groups[g]["lr"]},
                              {"weight_decay", saved_groups[g]["weight_decay"]},
                              {"param_shapes", json::array()}});
      inner_states.push_back(json::array());
    }
    OptimizerState inner_state;
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const Piece& piece = pieces_[k];
      const size_t g = piece.group, j = shard_index_[k];
      HEED_INTERNAL_ASSERT(inner_groups[g]["param_shapes"].size() == j);
      inner_groups[g]["param_shapes"].push_back({piece.numel});
      const json& entry = s["state"][g][piece.index];
      inner_states[g].push_back(entry);
      const std::string prefix = fmt::format("state.{}.{}.", g, piece.index);
      for (auto it = tensors.lower_bound(prefix); it != tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
        const Tensor& t = *it->second;
        const Tensor& p = groups_[g].params[piece.index];
        HEED_CHECK(t.numel() == p.numel(), kLoad, "the state tensor '{}' has shape {}, its parameter {}", it->first,
                   shape_str(t.shape()), shape_str(p.shape()));
        inner_state.tensors.emplace_back(fmt::format("state.{}.{}.{}", g, j, it->first.substr(prefix.size())),
                                         t.detach().reshape({-1}).narrow(0, piece.begin, piece.numel).contiguous());
        used.insert(it->first);
      }
    }
    // Tensors of parameters this rank owns nothing of are not needed here; any other key is.
    for (const auto& [key, t] : tensors) {
      if (used.count(key)) continue;
      bool known = false;
      for (size_t g = 0; g < groups_.size() && !known; ++g)
        for (size_t i = 0; i < groups_[g].params.size() && !known; ++i)
          known = key.rfind(fmt::format("state.{}.{}.", g, i), 0) == 0;
      HEED_CHECK(known, kLoad, "unexpected tensor '{}' in the optimizer state", key);
    }
    if (inner_) {
      inner_state.scalars = {{"optimizer", inner_name_},
                             {"options", s.value("options", json())},
                             {"param_groups", std::move(inner_groups)},
                             {"state", std::move(inner_states)}};
      inner_->load_state_dict(inner_state);
    }
    if (s.contains("options") && s["options"].is_object()) inner_options_ = s["options"];
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = saved_groups[g]["lr"].get<double>();
    groups_[g].weight_decay = saved_groups[g]["weight_decay"].get<double>();
  }
}

OptimizerState ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  constexpr const char* kCons = "ZeroRedundancyOptimizer::consolidate_state_dict";
  const int world = group_->world_size(), rank = group_->rank();
  HEED_CHECK(to >= 0 && to < world, kCons, "rank {} is outside [0, {})", to, world);
  NoGradGuard no_grad;
  // Which buffers exist on some rank (the last flag: a buffer this code does not know).
  const int64_t known = static_cast<int64_t>(kKnownBuffers.size());
  Tensor flags = zeros({known + 1}, kInt32);  // (known + 1,)
  std::string unknown;
  for (size_t k = 0; k < pieces_.size(); ++k)
    for (const auto& [buffer, t] : inner_->state(pieces_[k].group, shard_index_[k]).buffers) {
      const auto it = std::find(kKnownBuffers.begin(), kKnownBuffers.end(), buffer);
      if (it == kKnownBuffers.end()) unknown = buffer;
      flags.data_ptr<int32_t>()[it - kKnownBuffers.begin()] = 1;
    }
  group_->all_reduce(flags, ReduceOp::Max);
  HEED_CHECK(flags.data_ptr<int32_t>()[known] == 0, kCons,
             "a rank holds a state buffer '{}' this function does not know (known: exp_avg, exp_avg_sq, "
             "max_exp_avg_sq, momentum_buffer)",
             unknown.empty() ? std::string("(on another rank)") : unknown);
  // Steps per parameter: every piece of a parameter has the same count; ranks owning none say 0.
  std::vector<int64_t> first(groups_.size(), 0);
  int64_t nparams = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    first[g] = nparams;
    nparams += static_cast<int64_t>(groups_[g].params.size());
  }
  Tensor steps = zeros({nparams}, kInt64);  // (nparams,)
  int64_t* step = steps.data_ptr<int64_t>();
  for (size_t k = 0; k < pieces_.size(); ++k) {
    int64_t& slot = step[first[pieces_[k].group] + static_cast<int64_t>(pieces_[k].index)];
    slot = std::max(slot, inner_->state(pieces_[k].group, shard_index_[k]).step);
  }
  group_->all_reduce(steps, ReduceOp::Max);
  OptimizerState out;
  for (int64_t b = 0; b < known; ++b) {
    if (flags.data_ptr<int32_t>()[b] == 0) continue;
    const std::string& buffer = kKnownBuffers[static_cast<size_t>(b)];
    for (size_t si = 0; si < spaces_.size(); ++si) {
      const Tensor flat = gather_space(si, [&](size_t k) -> const void* {
        const auto& buffers = inner_->state(pieces_[k].group, shard_index_[k]).buffers;
        const auto it = buffers.find(buffer);
        return it == buffers.end() ? nullptr : it->second.raw_data();
      });
      if (rank != to) continue;
      for (const Space::Entry& e : spaces_[si]->entries) {
        if (step[first[e.group] + static_cast<int64_t>(e.index)] == 0) continue;
        out.tensors.emplace_back(fmt::format("state.{}.{}.{}", e.group, e.index, buffer),
                                 flat.narrow(0, e.offset, e.numel).reshape(shapes_[e.group][e.index]).clone());
      }
    }
  }
  if (rank != to) return {};
  std::sort(out.tensors.begin(), out.tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  json groups = json::array(), states = json::array();
  for (size_t g = 0; g < groups_.size(); ++g) {
    json shapes = json::array(), group_states = json::array();
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      shapes.push_back(shapes_[g][i].vec());
      const int64_t n = step[first[g] + static_cast<int64_t>(i)];
      group_states.push_back(n == 0 ? json(nullptr) : json{{"step", n}});
    }
    groups.push_back(
        {{"lr", groups_[g].lr}, {"weight_decay", groups_[g].weight_decay}, {"param_shapes", std::move(shapes)}});
    states.push_back(std::move(group_states));
  }
  out.scalars = {{"optimizer", inner_name_},
                 {"options", inner_options_},
                 {"param_groups", std::move(groups)},
                 {"state", std::move(states)}};
  return out;
}

json ZeroRedundancyOptimizer::options_json() const {
  return {{"inner", inner_name_},
          {"inner_options", inner_options_},
          {"reduce_gradients", options_.reduce_gradients},
          {"max_grad_norm", options_.max_grad_norm}};
}

void ZeroRedundancyOptimizer::load_options_json(const json&) {
  fail(kOp, "options are loaded through load_state_dict of the shard or of a full state");
}

std::vector<std::string> ZeroRedundancyOptimizer::buffer_names(const json&) const { return {}; }

}  // namespace heed::dist
