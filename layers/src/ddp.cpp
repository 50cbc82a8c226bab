// layers/src/ddp.cpp — DistributedDataParallel (see heed/ddp.h).
//
// Invariants: a round starts with the first gradient hook after the previous round finished;
// in a round every bucket is reduced exactly once, in bucket order; a parameter's gradient is
// copied into its bucket's flat buffer when its hook fires (old .grad + incoming, computed as
// the engine would, and .grad dropped so the engine stores the returned tensor as is); after
// a bucket's all_reduce the averaged values are written into the .grad of its parameters
// (the parameter whose hook completed the bucket gets them as its hook's return value).
#include "heed/ddp.h"

#include <chrono>
#include <cstring>

#include "heed/autograd.h"
#include "heed/error.h"
#include "heed/ops.h"

namespace heed::dist {

struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<size_t> params;   // indices into `params`
    std::vector<int64_t> offset;  // element offset of each in `flat`
    int64_t numel = 0;
    DType dtype = kFloat32;
    Tensor flat;  // (numel,)
    size_t pending = 0;
  };
  std::shared_ptr<ProcessGroup> group;
  DDPOptions options;
  std::vector<Tensor> params;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of, slot_of;
  std::vector<bool> ready;
  size_t next_to_reduce = 0;
  bool round_active = false;
  bool sync_enabled = true;
  Counters counters;

  void start_round() {
    for (Bucket& b : buckets) b.pending = b.params.size();
    std::fill(ready.begin(), ready.end(), false);
    next_to_reduce = 0;
    round_active = true;
  }

  Tensor slice_of(size_t param_index) const {
    const Bucket& b = buckets[bucket_of[param_index]];
    const int64_t off = b.offset[slot_of[param_index]];
    const Tensor& p = params[param_index];
    return b.flat.narrow(0, off, p.numel()).reshape(p.shape());
  }

  void reduce_bucket(Bucket& b) {
    const auto start = std::chrono::steady_clock::now();
    group->all_reduce(b.flat, ReduceOp::Avg);
    counters.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    counters.reductions += 1;
    counters.bytes += b.numel * static_cast<int64_t>(dtype_size(b.dtype));
  }

  // Writes the averaged values of bucket `b` into the .grad of its parameters except `skip`.
  void write_back(const Bucket& b, size_t skip) {
    for (size_t s = 0; s < b.params.size(); ++s) {
      const size_t j = b.params[s];
      if (j == skip) continue;
      Tensor p = params[j];
      Tensor reduced = slice_of(j);
      Tensor g = p.grad();
      if (g.defined() && g.is_contiguous() && g.dtype() == b.dtype && g.device() == kCPU) {
        std::memcpy(g.raw_data(), reduced.raw_data(), static_cast<size_t>(p.numel()) * dtype_size(b.dtype));
      } else {
        p.set_grad(reduced.clone());
      }
    }
  }

  // Reduces every complete bucket from next_to_reduce on, in order. Returns the averaged
  // gradient of `current` when its bucket was reduced now, else an undefined tensor.
  Tensor reduce_ready(size_t current) {
    Tensor result;
    while (next_to_reduce < buckets.size() && buckets[next_to_reduce].pending == 0) {
      Bucket& b = buckets[next_to_reduce];
      reduce_bucket(b);
      write_back(b, current);
      if (current < params.size() && bucket_of[current] == next_to_reduce) result = slice_of(current).clone();
      ++next_to_reduce;
    }
    if (next_to_reduce == buckets.size()) {
      round_active = false;
      counters.syncs += 1;
    }
    return result;
  }

  Tensor on_gradient(size_t i, const Tensor& incoming) {
    if (!sync_enabled) return Tensor();
    if (!round_active) start_round();
    HEED_CHECK(!ready[i], "dist::DistributedDataParallel",
               "parameter {} got a second gradient in one synchronised backward (backward called twice without "
               "no_sync, or a reduction was left pending: call finish_gradient_sync())",
               i);
    NoGradGuard no_grad;
    Tensor p = params[i];
    Tensor total = incoming;
    if (Tensor old = p.grad(); old.defined()) {
      total = old.clone();
      total.add_(incoming);  // old + incoming, as the engine would accumulate
    }
    if (total.dtype() != p.dtype()) total = total.to(p.dtype());
    total = total.contiguous();
    Bucket& b = buckets[bucket_of[i]];
    std::memcpy(slice_of(i).raw_data(), total.raw_data(), static_cast<size_t>(p.numel()) * p.element_size());
    ready[i] = true;
    b.pending -= 1;
    p.zero_grad();  // the engine stores what we return as the new .grad
    Tensor reduced = reduce_ready(i);
    return reduced.defined() ? reduced : total;
  }

  void finish() {
    if (!round_active) return;
    NoGradGuard no_grad;
    for (size_t k = next_to_reduce; k < buckets.size(); ++k) {
      Bucket& b = buckets[k];
      for (size_t s = 0; s < b.params.size(); ++s) {
        const size_t j = b.params[s];
        if (ready[j]) continue;
        // A parameter without a gradient in this backward: its local .grad (from no_sync
        // micro-steps, if any) or zeros.
        Tensor dst = slice_of(j);
        Tensor g = params[j].grad();
        if (g.defined())
          std::memcpy(dst.raw_data(), g.contiguous().to(b.dtype).raw_data(),
                      static_cast<size_t>(dst.numel()) * dtype_size(b.dtype));
        else
          std::memset(dst.raw_data(), 0, static_cast<size_t>(dst.numel()) * dtype_size(b.dtype));
        ready[j] = true;
        b.pending -= 1;
      }
    }
    reduce_ready(params.size());
  }
};

DistributedDataParallel::DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group,
                                                 DDPOptions options)
    : module_(module), state_(std::make_shared<State>()) {
  constexpr const char* kOp = "dist::DistributedDataParallel";
  HEED_CHECK(group != nullptr, kOp, "null process group");
  HEED_CHECK(options.first_bucket_bytes > 0 && options.bucket_bytes > 0, kOp,
             "bucket sizes must be positive (first {}, others {})", options.first_bucket_bytes, options.bucket_bytes);
  State& st = *state_;
  st.group = std::move(group);
  st.options = options;
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : module.named_parameters()) {
      HEED_CHECK(p.device() == kCPU && p.is_contiguous(), kOp,
                 "parameter '{}' must be a contiguous CPU tensor (Gloo; NCCL: not yet)", name);
      st.group->broadcast(p, 0);
    }
    if (options.broadcast_buffers)
      for (auto& [name, b] : module.named_buffers()) {
        Tensor t = b;
        if (t.is_contiguous() && t.device() == kCPU) st.group->broadcast(t, 0);
      }
  }
  for (const Tensor& p : module.parameters())
    if (p.requires_grad()) st.params.push_back(p);
  const size_t n = st.params.size();
  st.bucket_of.assign(n, 0);
  st.slot_of.assign(n, 0);
  st.ready.assign(n, false);
  // Fixed layout in reverse parameter order; a new bucket when the dtype changes or the
  // bucket would exceed its byte limit (a parameter larger than the limit gets its own).
  for (size_t k = n; k-- > 0;) {
    const Tensor& p = st.params[k];
    bool open_new = st.buckets.empty();
    if (!open_new) {
      const State::Bucket& last = st.buckets.back();
      const int64_t last_limit = st.buckets.size() == 1 ? options.first_bucket_bytes : options.bucket_bytes;
      open_new =
          last.dtype != p.dtype() ||
          (last.numel > 0 && (last.numel + p.numel()) * static_cast<int64_t>(dtype_size(last.dtype)) > last_limit);
    }
    if (open_new) {
      st.buckets.emplace_back();
      st.buckets.back().dtype = p.dtype();
    }
    State::Bucket& b = st.buckets.back();
    st.bucket_of[k] = st.buckets.size() - 1;
    st.slot_of[k] = b.params.size();
    b.params.push_back(k);
    b.offset.push_back(b.numel);
    b.numel += p.numel();
  }
  for (State::Bucket& b : st.buckets) b.flat = zeros({b.numel}, b.dtype);
  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < n; ++k) {
    st.params[k].register_hook([weak, k](const Tensor& grad) -> Tensor {
      auto state = weak.lock();
      if (!state) return Tensor();
      return state->on_gradient(k, grad);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

ProcessGroup& DistributedDataParallel::group() { return *state_->group; }

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.state_->sync_enabled) {
  ddp_.state_->sync_enabled = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->sync_enabled = previous_; }

void DistributedDataParallel::finish_gradient_sync() { state_->finish(); }

DistributedDataParallel::Counters DistributedDataParallel::counters() const { return state_->counters; }
void DistributedDataParallel::reset_counters() { state_->counters = {}; }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : state_->buckets) out.push_back(b.params);
  return out;
}

}  // namespace heed::dist
