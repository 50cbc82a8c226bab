// layers/src/ddp.cpp — DistributedDataParallel (see heed/ddp.h).
//
// Invariants: a round starts with the first gradient hook of a synchronised backward pass and
// ends when that pass ends (a callback queued on the engine) or at finish_gradient_sync(); in
// a round every bucket is reduced exactly once, in bucket order. A parameter's gradient is
// copied into its bucket's flat buffer when its hook fires (old .grad + incoming, computed as
// the engine would; .grad is dropped so the engine stores the returned local total as is).
// A complete bucket is handed to the communication thread (overlap on) or reduced at once
// (overlap off); buckets are launched strictly in bucket order. At the end of the round the
// main thread waits for the last reduction and writes the averaged values into every
// parameter's .grad. The communication thread touches only the flat buffers of launched
// buckets and the group; everything else stays on the thread running backward.
#include "heed/ddp.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "heed/autograd.h"
#include "heed/error.h"
#include "heed/ops.h"

namespace heed::dist {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// dst = src (same shape): a memcpy for contiguous CPU tensors of one dtype, else copy_ (other
// devices, dtype conversion). Never recorded by autograd.
void copy_values(Tensor dst, const Tensor& src) {
  if (dst.device() == kCPU && src.device() == kCPU && dst.dtype() == src.dtype() && dst.is_contiguous() &&
      src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), static_cast<size_t>(dst.numel()) * dst.element_size());
    return;
  }
  NoGradGuard no_grad;
  dst.copy_(src);
}
}  // namespace

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
  size_t next_to_launch = 0;
  bool round_active = false;
  uint64_t round_pass = 0;  // current_engine_pass_id() of the round's backward pass
  bool sync_enabled = true;
  Counters counters;
  std::chrono::steady_clock::time_point round_start;

  // The communication thread (started at the first launch with overlap on). Guarded by mu:
  // queue, completed, comm_seconds, error, stop.
  std::thread worker;
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<size_t> queue;
  size_t completed = 0;  // buckets reduced in this round
  double comm_seconds = 0.0;
  std::exception_ptr error;
  bool stop = false;

  ~State() {
    if (worker.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
      }
      work_cv.notify_all();
      worker.join();
    }
  }

  void worker_loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (stop) return;
      const size_t k = queue.front();
      queue.pop_front();
      const bool failed = error != nullptr;  // after a failure no more collectives
      lock.unlock();
      const auto start = std::chrono::steady_clock::now();
      std::exception_ptr caught;
      if (!failed) {
        try {
          group->all_reduce(buckets[k].flat, ReduceOp::Avg);
        } catch (...) {
          caught = std::current_exception();
        }
      }
      const double took = seconds_since(start);
      lock.lock();
      if (caught && !error) error = caught;
      comm_seconds += took;
      completed += 1;
      done_cv.notify_all();
    }
  }

  void start_round(uint64_t pass) {
    for (Bucket& b : buckets) b.pending = b.params.size();
    std::fill(ready.begin(), ready.end(), false);
    next_to_launch = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      completed = 0;
      comm_seconds = 0.0;
      error = nullptr;
    }
    round_active = true;
    round_pass = pass;
    round_start = std::chrono::steady_clock::now();
  }

  // A round whose backward pass threw before its end callback ran: wait for the reductions it
  // launched (the buffers must not be reused under the communication thread), then drop it.
  // .grad keeps the local gradients of that failed pass.
  void abandon_round() {
    wait_for_launched();
    round_active = false;
  }

  Tensor slice_of(size_t param_index) const {
    const Bucket& b = buckets[bucket_of[param_index]];
    const int64_t off = b.offset[slot_of[param_index]];
    const Tensor& p = params[param_index];
    return b.flat.narrow(0, off, p.numel()).reshape(p.shape());
  }

  void launch(size_t k) {
    Bucket& b = buckets[k];
    counters.reductions += 1;
    counters.bytes += b.numel * static_cast<int64_t>(dtype_size(b.dtype));
    if (!options.overlap) {  // the backward thread is blocked for the whole reduction
      const auto start = std::chrono::steady_clock::now();
      group->all_reduce(b.flat, ReduceOp::Avg);
      const double took = seconds_since(start);
      counters.wait_seconds += took;
      std::lock_guard<std::mutex> lock(mu);
      comm_seconds += took;
      completed += 1;
      return;
    }
    if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(k);
    }
    work_cv.notify_one();
  }

  // Launches every complete bucket from next_to_launch on, in order.
  void launch_ready() {
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) launch(next_to_launch++);
  }

  // Blocks until every launched bucket was reduced; returns the seconds waited.
  double wait_for_launched() {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return completed == next_to_launch; });
    return seconds_since(start);
  }

  // Writes the averaged values of every bucket into the .grad of its parameters.
  void write_back() {
    for (const Bucket& b : buckets) {
      for (const size_t j : b.params) {
        Tensor p = params[j];
        Tensor reduced = slice_of(j);
        Tensor g = p.grad();
        if (g.defined() && g.is_contiguous() && g.dtype() == b.dtype && g.device() == b.flat.device()) {
          copy_values(g, reduced);
        } else {
          p.set_grad(reduced.clone());
        }
      }
    }
  }

  Tensor on_gradient(size_t i, const Tensor& incoming, const std::weak_ptr<State>& self) {
    if (!sync_enabled) return Tensor();
    constexpr const char* kOp = "dist::DistributedDataParallel";
    HEED_CHECK(current_engine_pass() != EnginePass::Grad, kOp,
               "heed::grad() through a DistributedDataParallel model would leave .grad reduced but return "
               "the local gradient; use backward() (the averaged gradients land in .grad), or no_sync()");
    const uint64_t pass = current_engine_pass_id();
    if (round_active && round_pass != pass) abandon_round();  // its backward threw
    if (!round_active) {
      start_round(pass);
      queue_backward_callback([self] {
        if (auto state = self.lock()) state->finish();
      });
    }
    HEED_CHECK(!ready[i], kOp,
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
    copy_values(slice_of(i), total);
    ready[i] = true;
    b.pending -= 1;
    p.zero_grad();  // the engine stores what we return as the new (local) .grad
    launch_ready();
    return total;
  }

  // Ends the round: parameters without a gradient in it count as their local .grad (from
  // no_sync micro-steps) or zeros, the remaining buckets are reduced, and the averaged
  // gradients are written into .grad. Runs at the end of every synchronised backward pass.
  void finish() {
    if (!round_active) return;
    NoGradGuard no_grad;
    for (size_t k = next_to_launch; k < buckets.size(); ++k) {
      Bucket& b = buckets[k];
      for (size_t s = 0; s < b.params.size(); ++s) {
        const size_t j = b.params[s];
        if (ready[j]) continue;
        Tensor dst = slice_of(j);
        Tensor g = params[j].grad();
        if (g.defined()) {
          copy_values(dst, g);
        } else {
          NoGradGuard no_grad;
          dst.zero_();
        }
        ready[j] = true;
        b.pending -= 1;
      }
    }
    launch_ready();
    const double waited = wait_for_launched();
    round_active = false;
    std::exception_ptr failure;
    {
      std::lock_guard<std::mutex> lock(mu);
      failure = error;
      counters.seconds += comm_seconds;
    }
    counters.wait_seconds += waited;
    counters.backward_seconds += seconds_since(round_start);
    if (failure) std::rethrow_exception(failure);
    write_back();
    counters.syncs += 1;
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
    auto named = module.named_parameters();
    const Device first_device = named.empty() ? kCPU : named.front().second.device();
    for (auto& [name, p] : named) {
      HEED_CHECK(p.is_contiguous(), kOp, "parameter '{}' of shape {} must be contiguous", name, shape_str(p.shape()));
      HEED_CHECK(p.device() == first_device, kOp,
                 "parameter '{}' is on {}, the first parameter on {}: all parameters must be on one device", name,
                 p.device() == kCPU ? "the CPU" : "CUDA", first_device == kCPU ? "the CPU" : "CUDA");
      st.group->broadcast(p, 0);
    }
    if (options.broadcast_buffers)
      for (auto& [name, b] : module.named_buffers()) {
        Tensor t = b;
        if (t.is_contiguous()) st.group->broadcast(t, 0);
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
  const Device device = st.params.empty() ? kCPU : st.params.front().device();
  for (State::Bucket& b : st.buckets) b.flat = zeros({b.numel}, TensorOptions(b.dtype).device(device));
  // CUDA parameters: reductions run in the hooks, on the thread that queues heed's CUDA work
  // (staged through the host or through NCCL, both on the default stream).
  if (device != kCPU) st.options.overlap = false;
  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < n; ++k) {
    st.params[k].register_hook([weak, k](const Tensor& grad) -> Tensor {
      auto state = weak.lock();
      if (!state) return Tensor();
      return state->on_gradient(k, grad, weak);
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
