// kernels/cuda/emulation/cuda_emulation.cpp — the CPU emulator of the CUDA runtime and cuBLAS
// subset (see cuda_emulation.h for what it models and checks).
//
// Invariants: one kernel or copy runs at a time (a global mutex); the device arena is readable
// only while one runs; emulated threads are ucontext fibers on private stacks, switched only
// at __syncthreads, at warp collectives and at thread exit; a block whose live threads cannot
// all reach a barrier aborts with a message (a deadlock on a GPU); a warp collective releases
// its warp only when all 32 lanes (fewer in a block's last, partial warp) wait at the same one;
// every device block is followed by a guard zone that must still hold 0xFF bytes whenever a
// kernel, copy or memset ends.
#include "kernels/cuda/emulation/cuda_emulation.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "heed/dtype.h"

namespace heed_emu {

namespace {

[[noreturn]] void die(const char* what, const char* detail) {
  std::fprintf(stderr, "heed CUDA emulator: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  std::abort();
}

std::recursive_mutex& big_lock() {
  static std::recursive_mutex* mutex = new std::recursive_mutex();
  return *mutex;
}

cudaError_t& last_error() {
  static cudaError_t error = cudaSuccess;
  return error;
}

cudaError_t record(cudaError_t error) {
  if (error != cudaSuccess) last_error() = error;
  return error;
}

long env_long(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return (end && *end == 0) ? v : fallback;
}

int emulated_devices() {
  static const int devices = static_cast<int>(env_long("HEED_CUDA_EMULATION_DEVICES", 1));
  return devices;
}
int max_shared_optin() {
  static const int bytes = static_cast<int>(env_long("HEED_CUDA_EMULATION_SMEM", 232448));
  return bytes;
}
constexpr int kDefaultShared = 48 * 1024;
constexpr int kMultiprocessors = 4;

// ---- the device arena -----------------------------------------------------------------------

constexpr size_t kArenaBytes = size_t{64} << 30;  // virtual reservation
constexpr size_t kAlign = 256;
constexpr size_t kGuardBytes = 256;  // after every block, 0xFF, checked

struct Arena {
  char* base = nullptr;
  size_t used = 0;                           // bump pointer
  size_t protected_end = 0;                  // [base, base + protected_end) has its access set
  std::multimap<size_t, char*> free_blocks;  // usable size -> block (each followed by its guard)
  std::map<const char*, size_t> live;        // block -> usable size (the guard zone follows)
  int open = 0;                              // nesting of accessible sections
};

Arena& arena() {
  static Arena* a = [] {
    auto* arena = new Arena();
    void* p = mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot reserve the device arena", nullptr);
    arena->base = static_cast<char*>(p);
    return arena;
  }();
  return *a;
}

size_t page_round(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

void set_access(bool accessible) {
  Arena& a = arena();
  const size_t end = page_round(a.used);
  if (end == 0) return;
  if (mprotect(a.base, end, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    die("mprotect of the device arena failed", std::strerror(errno));
  a.protected_end = end;
}

// Makes device memory accessible for its lifetime (nests).
class DeviceAccess {
 public:
  DeviceAccess() {
    if (arena().open++ == 0) set_access(true);
  }
  ~DeviceAccess() {
    if (--arena().open == 0) set_access(false);
  }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

bool in_arena(const void* p) {
  const Arena& a = arena();
  const char* c = static_cast<const char*>(p);
  return c >= a.base && c < a.base + a.used;
}

// Whether [p, p + n) lies inside one live block.
bool valid_device_range(const void* p, size_t n) {
  const Arena& a = arena();
  const char* c = static_cast<const char*>(p);
  auto it = a.live.upper_bound(c);
  if (it == a.live.begin()) return false;
  --it;
  return c >= it->first && c + n <= it->first + it->second;
}

// Aborts when a guard zone lost its 0xFF bytes (a write past the end of a block); `after`
// names the operation that just ended. The arena must be accessible.
void check_guards(const char* after) {
  const Arena& a = arena();
  for (const auto& [block, size] : a.live) {
    const unsigned char* guard = reinterpret_cast<const unsigned char*>(block) + size;
    for (size_t i = 0; i < kGuardBytes; ++i)
      if (guard[i] != 0xFF) {
        std::fprintf(stderr,
                     "heed CUDA emulator: a write past the end of a %zu-byte device block (byte %zu after its end) "
                     "during %s\n",
                     size, i, after);
        std::abort();
      }
  }
}

// ---- fibers ---------------------------------------------------------------------------------

constexpr size_t kStackBytes = 256 * 1024;

struct Fiber {
  ucontext_t context;
  ThreadIndex index;
  unsigned linear = 0;  // x + y * bx + z * bx * by; lane = linear % 32
  enum class State { Ready, Waiting, WarpWaiting, Done } state = State::Ready;
  const char* warp_collective = nullptr;  // what it waits at when WarpWaiting
};

struct WarpBoard {
  MmaBoard mma;
  uint64_t lanes[32];
};

struct BlockRun {
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;
  ucontext_t scheduler;
  Body body = nullptr;
  void* closure = nullptr;
  std::vector<unsigned char> shared;
  std::vector<WarpBoard> warps;
  Fiber* running = nullptr;
};

BlockRun& block_run() {
  static BlockRun* run = new BlockRun();
  return *run;
}

bool in_kernel = false;

void fiber_entry() {
  BlockRun& run = block_run();
  Fiber* self = run.running;
  run.body(run.closure);
  self->state = Fiber::State::Done;
  // returning resumes uc_link (the scheduler)
}

// getcontext and swapcontext return twice; they live in functions of their own (never
// inlined) so no local variable of the launch loops is live across them (-Wclobbered).
[[gnu::noinline]] void start_fiber(BlockRun& run, Fiber& f, char* stack) {
  if (getcontext(&f.context) != 0) die("getcontext failed", nullptr);
  f.context.uc_stack.ss_sp = stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = &run.scheduler;
  makecontext(&f.context, fiber_entry, 0);
}

[[gnu::noinline]] void resume_fiber(BlockRun& run, Fiber& f) {
  run.running = &f;
  if (swapcontext(&run.scheduler, &f.context) != 0) die("swapcontext failed", nullptr);
  run.running = nullptr;
}

std::map<KernelKey, int>& shared_attributes() {
  static auto* m = new std::map<KernelKey, int>();
  return *m;
}

}  // namespace

cudaError_t set_max_dynamic_shared(KernelKey kernel, int bytes) {
  std::lock_guard<std::recursive_mutex> lock(big_lock());
  if (bytes < 0 || bytes > max_shared_optin()) return record(cudaErrorInvalidValue);
  shared_attributes()[kernel] = bytes;
  return cudaSuccess;
}

const ThreadIndex& current_thread() {
  BlockRun& run = block_run();
  if (!in_kernel || !run.running) die("threadIdx/blockIdx used outside a kernel", nullptr);
  return run.running->index;
}

void sync_threads() {
  BlockRun& run = block_run();
  if (!in_kernel || !run.running) die("__syncthreads called outside a kernel", nullptr);
  Fiber* self = run.running;
  self->state = Fiber::State::Waiting;
  if (swapcontext(&self->context, &run.scheduler) != 0) die("swapcontext failed", nullptr);
}

namespace {

Fiber& running_fiber(const char* what) {
  BlockRun& run = block_run();
  if (!in_kernel || !run.running) die("a warp operation used outside a kernel", what);
  return *run.running;
}

unsigned lanes_in_warp(const BlockRun& run, unsigned warp) {
  const size_t first = static_cast<size_t>(warp) * 32;
  return static_cast<unsigned>(std::min<size_t>(32, run.fibers.size() - first));
}

// Releases every warp whose live lanes all wait at the same collective; aborts when a warp is
// split between a collective and anything else. Returns whether a warp was released.
bool release_warps(BlockRun& run, const char* kernel) {
  bool released = false;
  const unsigned warps = static_cast<unsigned>((run.fibers.size() + 31) / 32);
  for (unsigned w = 0; w < warps; ++w) {
    Fiber* first = &run.fibers[static_cast<size_t>(w) * 32];
    const unsigned lanes = lanes_in_warp(run, w);
    const Fiber* at_collective = nullptr;
    for (unsigned l = 0; l < lanes; ++l)
      if (first[l].state == Fiber::State::WarpWaiting) at_collective = &first[l];
    if (!at_collective) continue;
    for (unsigned l = 0; l < lanes; ++l) {
      const Fiber& f = first[l];
      const char* elsewhere = f.state == Fiber::State::Done      ? "has exited"
                              : f.state == Fiber::State::Waiting ? "waits at __syncthreads"
                              : std::strcmp(f.warp_collective, at_collective->warp_collective) != 0 ? f.warp_collective
                                                                                                    : nullptr;
      if (elsewhere) {
        std::fprintf(stderr,
                     "heed CUDA emulator: divergent warp in %s (block %u,%u,%u, warp %u): lane %u is at %s while lane "
                     "%u %s%s\n",
                     kernel, f.index.block_idx.x, f.index.block_idx.y, f.index.block_idx.z, w,
                     at_collective->linear % 32, at_collective->warp_collective, l,
                     f.state == Fiber::State::WarpWaiting ? "is at " : "", elsewhere);
        std::abort();
      }
    }
    for (unsigned l = 0; l < lanes; ++l) first[l].state = Fiber::State::Ready;
    released = true;
  }
  return released;
}

}  // namespace

unsigned lane_id() { return running_fiber("lane_id").linear % 32; }

void sync_warp(unsigned mask, const char* what) {
  BlockRun& run = block_run();
  Fiber& self = running_fiber(what);
  const unsigned lanes = lanes_in_warp(run, self.linear / 32);
  const unsigned full = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  if (mask != full) {
    std::fprintf(stderr,
                 "heed CUDA emulator: %s with mask 0x%08x; the emulator models whole-warp masks (0x%08x) only\n", what,
                 mask, full);
    std::abort();
  }
  self.state = Fiber::State::WarpWaiting;
  self.warp_collective = what;
  if (swapcontext(&self.context, &run.scheduler) != 0) die("swapcontext failed", nullptr);
}

uint64_t exchange_lane(unsigned mask, uint64_t value, unsigned source, const char* what) {
  BlockRun& run = block_run();
  Fiber& self = running_fiber(what);
  const unsigned warp = self.linear / 32;
  if (source >= lanes_in_warp(run, warp)) die("a shuffle reads a lane the block does not have", what);
  run.warps[warp].lanes[self.linear % 32] = value;
  sync_warp(mask, what);
  const uint64_t got = run.warps[warp].lanes[source];
  sync_warp(mask, what);
  return got;
}

MmaBoard& mma_board() {
  BlockRun& run = block_run();
  return run.warps[running_fiber("wmma::mma_sync").linear / 32].mma;
}

uint16_t float_to_half_bits(float f) { return heed::float_to_half_bits_portable(f); }
float half_bits_to_float(uint16_t h) { return heed::half_bits_to_float_portable(h); }
uint16_t float_to_bfloat16_bits(float f) { return heed::float_to_bfloat16_bits(f); }
float bfloat16_bits_to_float(uint16_t b) { return heed::bfloat16_bits_to_float(b); }

unsigned char* dynamic_shared_memory() {
  BlockRun& run = block_run();
  if (!in_kernel) die("shared memory used outside a kernel", nullptr);
  // 128-byte aligned, as heed's kernels declare their dynamic shared memory.
  const uintptr_t at = reinterpret_cast<uintptr_t>(run.shared.data());
  return run.shared.data() + ((128 - at % 128) % 128);
}

void run_kernel(const char* name, KernelKey key, dim3 grid, dim3 block, size_t shared_bytes, Body body, void* closure) {
  std::lock_guard<std::recursive_mutex> lock(big_lock());
  if (in_kernel) die("a kernel launched from inside a kernel", name);
  const unsigned long long threads = static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535 || grid.x > 2147483647u) {
    std::fprintf(stderr, "heed CUDA emulator: bad launch configuration of %s: grid (%u, %u, %u), block (%u, %u, %u)\n",
                 name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
    record(cudaErrorInvalidConfiguration);
    return;
  }
  int allowed = kDefaultShared;
  auto attribute = shared_attributes().find(key);
  if (attribute != shared_attributes().end() && attribute->second > allowed) allowed = attribute->second;
  if (shared_bytes > static_cast<size_t>(allowed)) {
    std::fprintf(stderr,
                 "heed CUDA emulator: %s asks for %zu bytes of dynamic shared memory, %d allowed (set "
                 "cudaFuncAttributeMaxDynamicSharedMemorySize)\n",
                 name, shared_bytes, allowed);
    record(cudaErrorInvalidValue);
    return;
  }

  DeviceAccess access;
  BlockRun& run = block_run();
  run.body = body;
  run.closure = closure;
  run.shared.assign(shared_bytes + 128, 0xFF);  // room to align the start to 128 bytes
  run.fibers.resize(threads);
  run.warps.resize((threads + 31) / 32);
  while (run.stacks.size() < threads) run.stacks.push_back(std::make_unique<char[]>(kStackBytes));
  in_kernel = true;
  unsigned long long block_counter = 0;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx, ++block_counter) {
        std::fill(run.shared.begin(), run.shared.end(), static_cast<unsigned char>(0xFF));
        for (unsigned long long t = 0; t < threads; ++t) {
          Fiber& f = run.fibers[t];
          f.state = Fiber::State::Ready;
          f.linear = static_cast<unsigned>(t);
          f.warp_collective = nullptr;
          f.index.thread_idx = {static_cast<unsigned>(t % block.x), static_cast<unsigned>((t / block.x) % block.y),
                                static_cast<unsigned>(t / (static_cast<unsigned long long>(block.x) * block.y))};
          f.index.block_idx = {bx, by, bz};
          f.index.block_dim = block;
          f.index.grid_dim = grid;
          start_fiber(run, f, run.stacks[t].get());
        }
        for (unsigned long long phase = 0;; ++phase) {
          const bool backward = ((phase + block_counter) & 1) != 0;
          for (unsigned long long i = 0; i < threads; ++i) {
            Fiber& f = run.fibers[backward ? threads - 1 - i : i];
            if (f.state != Fiber::State::Ready) continue;
            resume_fiber(run, f);
          }
          if (release_warps(run, name)) continue;
          bool any_waiting = false, any_done = false;
          for (Fiber& f : run.fibers) {
            if (f.state == Fiber::State::Ready) die("a thread neither finished nor reached a barrier", name);
            any_waiting = any_waiting || f.state == Fiber::State::Waiting;
            any_done = any_done || f.state == Fiber::State::Done;
          }
          if (!any_waiting) break;
          if (any_done) die("a thread exited while others of its block wait at __syncthreads", name);
          for (Fiber& f : run.fibers)
            if (f.state == Fiber::State::Waiting) f.state = Fiber::State::Ready;
        }
      }
  in_kernel = false;
  check_guards(name);
}

}  // namespace heed_emu

namespace nvcuda::wmma::detail {

void check_access(const void* ptr, unsigned ldm, size_t element_bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(ptr) % 32 != 0 || (ldm * element_bytes) % 16 != 0 || ldm < 16) {
    std::fprintf(stderr,
                 "heed CUDA emulator: %s at %p with ldm %u (%zu-byte elements): the pointer must be 32-byte aligned "
                 "and ldm a multiple of 16 bytes, at least 16 elements\n",
                 what, ptr, ldm, element_bytes);
    std::abort();
  }
}

}  // namespace nvcuda::wmma::detail

using heed_emu::DeviceAccess;

// ---- runtime API --------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return heed_emu::record(cudaErrorInvalidValue);
  *count = heed_emu::emulated_devices() > 0 ? heed_emu::emulated_devices() : 0;
  return *count > 0 ? cudaSuccess : heed_emu::record(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return heed_emu::record(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  const cudaError_t e = heed_emu::last_error();
  heed_emu::last_error() = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected (emulated)";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
  }
  return "unknown error";
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

cudaError_t cudaMalloc(void** ptr, size_t nbytes) {
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  if (!ptr) return heed_emu::record(cudaErrorInvalidValue);
  heed_emu::Arena& a = heed_emu::arena();
  const size_t size = (std::max<size_t>(nbytes, 1) + heed_emu::kAlign - 1) / heed_emu::kAlign * heed_emu::kAlign;
  char* block = nullptr;
  auto it = a.free_blocks.lower_bound(size);
  if (it != a.free_blocks.end() && it->first == size) {
    block = it->second;
    a.free_blocks.erase(it);
  } else {
    if (a.used + size + heed_emu::kGuardBytes > heed_emu::kArenaBytes)
      return heed_emu::record(cudaErrorMemoryAllocation);
    block = a.base + a.used;
    a.used += size + heed_emu::kGuardBytes;
  }
  a.live[block] = size;
  {
    DeviceAccess access;
    std::memset(block, 0xFF, size + heed_emu::kGuardBytes);
  }
  *ptr = block;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  if (!ptr) return cudaSuccess;
  heed_emu::Arena& a = heed_emu::arena();
  auto it = a.live.find(static_cast<const char*>(ptr));
  if (it == a.live.end()) return heed_emu::record(cudaErrorInvalidDevicePointer);
  {
    DeviceAccess access;
    heed_emu::check_guards("cudaFree");
  }
  a.free_blocks.emplace(it->second, static_cast<char*>(ptr));
  a.live.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind) {
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  if (nbytes == 0) return cudaSuccess;
  if (!dst || !src) return heed_emu::record(cudaErrorInvalidValue);
  const bool dst_device = heed_emu::in_arena(dst), src_device = heed_emu::in_arena(src);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dst_device && !src_device;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_device && src_device;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_device && src_device;
      break;
    case cudaMemcpyHostToHost:
      ok = !dst_device && !src_device;
      break;
    case cudaMemcpyDefault:
      break;
  }
  if (ok && dst_device) ok = heed_emu::valid_device_range(dst, nbytes);
  if (ok && src_device) ok = heed_emu::valid_device_range(src, nbytes);
  if (!ok) {
    std::fprintf(stderr, "heed CUDA emulator: cudaMemcpy of %zu bytes with kind %d from %s to %s memory\n", nbytes,
                 static_cast<int>(kind), src_device ? "device" : "host", dst_device ? "device" : "host");
    return heed_emu::record(cudaErrorInvalidValue);
  }
  DeviceAccess access;
  std::memmove(dst, src, nbytes);
  if (dst_device) heed_emu::check_guards("cudaMemcpy");
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t nbytes) {
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  if (nbytes == 0) return cudaSuccess;
  if (!heed_emu::valid_device_range(ptr, nbytes)) return heed_emu::record(cudaErrorInvalidValue);
  DeviceAccess access;
  std::memset(ptr, value, nbytes);
  heed_emu::check_guards("cudaMemset");
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return heed_emu::record(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  const bool device = heed_emu::in_arena(ptr);
  attributes->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  attributes->device = device ? 0 : -1;
  attributes->devicePointer = device ? const_cast<void*>(ptr) : nullptr;
  attributes->hostPointer = device ? nullptr : const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!value || device != 0) return heed_emu::record(cudaErrorInvalidValue);
  switch (attribute) {
    case cudaDevAttrMultiProcessorCount:
      *value = heed_emu::kMultiprocessors;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = heed_emu::max_shared_optin();
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;  // an H100 / H200
      return cudaSuccess;
  }
  return heed_emu::record(cudaErrorInvalidValue);
}

// ---- cuBLAS ---------------------------------------------------------------------------------------

struct heed_emu_cublas_context {
  int unused = 0;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new heed_emu_cublas_context();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
  }
  return "unknown error";
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

namespace {

double read_element(const void* base, cudaDataType type, long long index) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[index];
    case CUDA_R_64F:
      return static_cast<const double*>(base)[index];
    case CUDA_R_16F:
      return heed::half_bits_to_float_portable(static_cast<const uint16_t*>(base)[index]);
    case CUDA_R_16BF:
      return heed::bfloat16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
  }
  return 0;
}

void write_element(void* base, cudaDataType type, long long index, double v) {
  switch (type) {
    case CUDA_R_32F:
      static_cast<float*>(base)[index] = static_cast<float>(v);
      return;
    case CUDA_R_64F:
      static_cast<double*>(base)[index] = v;
      return;
    case CUDA_R_16F:
      static_cast<uint16_t*>(base)[index] = heed::float_to_half_bits_portable(static_cast<float>(v));
      return;
    case CUDA_R_16BF:
      static_cast<uint16_t*>(base)[index] = heed::float_to_bfloat16_bits(static_cast<float>(v));
      return;
  }
}

// TF32: 10 explicit mantissa bits, round to nearest.
double to_tf32(double v) {
  uint32_t bits = heed::float_to_bits(static_cast<float>(v));
  if ((bits & 0x7f800000u) == 0x7f800000u) return v;
  bits = (bits + 0x1000u) & ~0x1fffu;
  return heed::bits_to_float(bits);
}

}  // namespace

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const auto max1 = [](int v) { return v > 1 ? v : 1; };
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || lda < max1(transa == CUBLAS_OP_N ? m : k) ||
      ldb < max1(transb == CUBLAS_OP_N ? k : n) || ldc < max1(m) || algo != CUBLAS_GEMM_DEFAULT) {
    std::fprintf(stderr,
                 "heed CUDA emulator: cublasGemmStridedBatchedEx invalid value: m %d n %d k %d lda %d ldb %d ldc %d "
                 "transa %d transb %d batch %d\n",
                 m, n, k, lda, ldb, ldc, transa, transb, batchCount);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (Atype != Btype || !alpha || !beta || heed_emu::in_arena(alpha) || heed_emu::in_arena(beta))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool compute64 = computeType == CUBLAS_COMPUTE_64F;
  if (compute64 != (Atype == CUDA_R_64F) || Ctype != Atype) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  if ((k > 0 && (!heed_emu::in_arena(A) || !heed_emu::in_arena(B))) || !heed_emu::in_arena(C)) {
    std::fprintf(stderr, "heed CUDA emulator: cublasGemmStridedBatchedEx with a host matrix pointer\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  struct GuardCheck {
    ~GuardCheck() {
      DeviceAccess access;
      heed_emu::check_guards("cublasGemmStridedBatchedEx");
    }
  } guard_check;
  const double a_scale = compute64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double b_scale = compute64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const bool tf32 = computeType == CUBLAS_COMPUTE_32F_FAST_TF32 && Atype == CUDA_R_32F;
  DeviceAccess access;
  // float32 GEMMs (16-bit and TF32 operands included) accumulate in float32 with one rounding
  // per step (as a fused multiply-add: the float product is exact in double); float64 ones in
  // float64.
  const auto accumulate = [compute64](double acc, double product) {
    return compute64 ? acc + product : static_cast<double>(static_cast<float>(acc + product));  // one rounding, as fma
  };
  for (int batch = 0; batch < batchCount; ++batch) {
    const long long a0 = batch * strideA, b0 = batch * strideB, c0 = batch * strideC;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0.0;
        for (int p = 0; p < k; ++p) {
          double av = read_element(
              A, Atype,
              a0 + (transa == CUBLAS_OP_N ? i + static_cast<long long>(p) * lda : p + static_cast<long long>(i) * lda));
          double bv = read_element(
              B, Btype,
              b0 + (transb == CUBLAS_OP_N ? p + static_cast<long long>(j) * ldb : j + static_cast<long long>(p) * ldb));
          if (tf32) {
            av = to_tf32(av);
            bv = to_tf32(bv);
          }
          acc = accumulate(acc, av * bv);
        }
        const long long at = c0 + i + static_cast<long long>(j) * ldc;
        double v = compute64 ? a_scale * acc : static_cast<float>(a_scale * acc);
        if (b_scale != 0.0)
          v = accumulate(v, compute64 ? b_scale * read_element(C, Ctype, at)
                                      : static_cast<float>(b_scale * read_element(C, Ctype, at)));
        if (!compute64) v = static_cast<float>(v);
        write_element(C, Ctype, at, v);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt -------------------------------------------------------------------------------------

namespace {
// cuBLASLt's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in the compute type.
template <typename C>
C gelu_tanh_form(C x) {
  const C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
  return C(0.5) * x * (C(1) + std::tanh(u));
}
}  // namespace

struct heed_emu_cublaslt_context {
  int unused = 0;
};
struct heed_emu_lt_desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int bias_type = -1;  // -1: D's type
  void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct heed_emu_lt_layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct heed_emu_lt_preference {
  uint64_t workspace = 0;
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new heed_emu_cublaslt_context();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  // The scale type cuBLASLt requires for each compute type heed uses.
  if ((compute == CUBLAS_COMPUTE_64F) != (scale == CUDA_R_64F)) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new heed_emu_lt_desc{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
template <typename T>
cublasStatus_t read_attribute(const void* value, size_t bytes, T* out) {
  if (!value || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(out, value, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t bytes) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return read_attribute(value, bytes, &desc->trans_a);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return read_attribute(value, bytes, &desc->trans_b);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t epilogue = 0;
      const cublasStatus_t status = read_attribute(value, bytes, &epilogue);
      desc->epilogue = static_cast<int>(epilogue);
      return status;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_attribute(value, bytes, &desc->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return read_attribute(value, bytes, &desc->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return read_attribute(value, bytes, &desc->aux_ld);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
      int32_t type = 0;
      const cublasStatus_t status = read_attribute(value, bytes, &type);
      desc->bias_type = type;
      return status;
    }
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout || ld < static_cast<int64_t>(rows > 1 ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new heed_emu_lt_layout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  if (!preference) return CUBLAS_STATUS_INVALID_VALUE;
  *preference = new heed_emu_lt_preference();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                                                    size_t bytes) {
  if (!preference) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t alignment = 0;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attribute(value, bytes, &preference->workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_attribute(value, bytes, &alignment);  // any alignment has an algorithm here
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

namespace {
// The problem a desc and its layouts describe, checked: op(A) (m, k), op(B) (k, n), D (m, n).
cublasStatus_t lt_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                          cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, uint64_t* m, uint64_t* n, uint64_t* k) {
  if (!desc || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc->epilogue != CUBLASLT_EPILOGUE_BIAS &&
      desc->epilogue != CUBLASLT_EPILOGUE_GELU_AUX && desc->epilogue != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
      desc->epilogue != CUBLASLT_EPILOGUE_BGRADB)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (a->type != b->type || c->type != d->type || a->type != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((desc->compute == CUBLAS_COMPUTE_64F) != (a->type == CUDA_R_64F)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc->bias_type != -1 && desc->bias_type != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  *m = desc->trans_a == CUBLAS_OP_N ? a->rows : a->cols;
  *k = desc->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
  *n = desc->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
  const uint64_t kb = desc->trans_b == CUBLAS_OP_N ? b->rows : b->cols;
  const bool gelu = desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (gelu && (desc->aux_ld % 8 != 0 || desc->aux_ld < static_cast<int64_t>(d->rows))) {
    std::fprintf(stderr, "heed CUDA emulator: GELU auxiliary leading dimension %lld (rows %llu; a multiple of 8)\n",
                 static_cast<long long>(desc->aux_ld), static_cast<unsigned long long>(d->rows));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (kb != *k || d->rows != *m || d->cols != *n || c->rows != *m || c->cols != *n || c->ld != d->ld) {
    std::fprintf(stderr,
                 "heed CUDA emulator: cublasLt layouts do not match: op(A) %llu x %llu, op(B) %llu x %llu, D %llu x "
                 "%llu\n",
                 static_cast<unsigned long long>(*m), static_cast<unsigned long long>(*k),
                 static_cast<unsigned long long>(kb), static_cast<unsigned long long>(*n),
                 static_cast<unsigned long long>(d->rows), static_cast<unsigned long long>(d->cols));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!preference || requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m = 0, n = 0, k = 0;
  const cublasStatus_t status = lt_problem(desc, a, b, c, d, &m, &n, &k);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = 0x6865656400000001ull;  // "heed", algorithm 1
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_layout, const void* B, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_layout, void* D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(heed_emu::big_lock());
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  uint64_t m = 0, n = 0, k = 0;
  const cublasStatus_t status = lt_problem(desc, a_layout, b_layout, c_layout, d_layout, &m, &n, &k);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (!algo || algo->data[0] != 0x6865656400000001ull || stream != nullptr || !alpha || !beta ||
      heed_emu::in_arena(alpha) || heed_emu::in_arena(beta) || C != D)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool with_bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS || desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu = desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool has_vector = with_bias || desc->epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if ((k > 0 && (!heed_emu::in_arena(A) || !heed_emu::in_arena(B))) || !heed_emu::in_arena(D) ||
      (has_vector && !heed_emu::in_arena(desc->bias)) || (gelu && !heed_emu::in_arena(desc->aux)) ||
      (workspace_bytes > 0 && !heed_emu::in_arena(workspace))) {
    std::fprintf(stderr, "heed CUDA emulator: cublasLtMatmul with a host pointer (or no bias vector)\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  struct GuardCheck {
    ~GuardCheck() {
      DeviceAccess access;
      heed_emu::check_guards("cublasLtMatmul");
    }
  } guard_check;
  const bool compute64 = desc->compute == CUBLAS_COMPUTE_64F;
  const double a_scale = compute64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double b_scale = compute64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const bool tf32 = desc->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a_layout->type == CUDA_R_32F;
  const cudaDataType type = d_layout->type;
  const auto accumulate = [compute64](double acc, double value) {
    return compute64 ? acc + value : static_cast<double>(static_cast<float>(acc + value));
  };
  const auto op_a = [&](uint64_t i, uint64_t p) {
    const long long at = desc->trans_a == CUBLAS_OP_N ? static_cast<long long>(i + p * a_layout->ld)
                                                      : static_cast<long long>(p + i * a_layout->ld);
    const double v = read_element(A, type, at);
    return tf32 ? to_tf32(v) : v;
  };
  const auto op_b = [&](uint64_t p, uint64_t j) {
    const long long at = desc->trans_b == CUBLAS_OP_N ? static_cast<long long>(p + j * b_layout->ld)
                                                      : static_cast<long long>(j + p * b_layout->ld);
    const double v = read_element(B, type, at);
    return tf32 ? to_tf32(v) : v;
  };
  DeviceAccess access;
  // BGRADB reads op(B) before D is written (D may not alias B in heed, but stay safe).
  if (desc->epilogue == CUBLASLT_EPILOGUE_BGRADB)
    for (uint64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (uint64_t p = 0; p < k; ++p) sum = accumulate(sum, op_b(p, j));
      write_element(desc->bias, type, static_cast<long long>(j), sum);
    }
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (uint64_t p = 0; p < k; ++p) acc = accumulate(acc, op_a(i, p) * op_b(p, j));
      const long long at = static_cast<long long>(i + j * d_layout->ld);
      double v = compute64 ? a_scale * acc : static_cast<float>(a_scale * acc);
      if (b_scale != 0.0)
        v = accumulate(v, compute64 ? b_scale * read_element(C, type, at)
                                    : static_cast<float>(b_scale * read_element(C, type, at)));
      if (with_bias) v = accumulate(v, read_element(desc->bias, type, static_cast<long long>(i)));
      if (gelu) {
        write_element(desc->aux, type, static_cast<long long>(i + j * desc->aux_ld), v);
        v = compute64 ? gelu_tanh_form(v) : static_cast<float>(gelu_tanh_form(static_cast<float>(v)));
      }
      write_element(D, type, at, v);
    }
  return CUBLAS_STATUS_SUCCESS;
}
