// kernels/cpu/index.cpp — index_select / index_add and gather / scatter_add.
//
// Invariants: indices were validated by the op; additions into the same destination
// happen in index order inside one thread, so scatter results do not depend on the
// thread count.
#include <cstring>

#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

void index_select(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner, const int64_t* index,
                  int64_t index_count, void* out) {
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(dtype);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  parallel_for(outer * index_count, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t t = begin; t < end; ++t) {
                   const int64_t o = t / index_count, j = t % index_count;
                   std::memcpy(dst + static_cast<size_t>(t) * row_bytes,
                               src + static_cast<size_t>(o * in_extent + index[j]) * row_bytes, row_bytes);
                 }
               });
}

void index_add(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* index,
               int64_t index_count, const void* src) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      fail("index_add", "bool tensors cannot be accumulated");
    } else {
      T* dst = static_cast<T*>(out);
      const T* s = static_cast<const T*>(src);
      // Parallel over (outer, column chunk); every chunk walks the indices in order.
      constexpr int64_t kChunk = 512;
      const int64_t chunks = (inner + kChunk - 1) / kChunk;
      parallel_for(outer * chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t o = task / chunks, c0 = (task % chunks) * kChunk, width = std::min(kChunk, inner - c0);
          for (int64_t j = 0; j < index_count; ++j) {
            T* drow = dst + (o * out_extent + index[j]) * inner + c0;
            const T* srow = s + (o * index_count + j) * inner + c0;
            for (int64_t i = 0; i < width; ++i) store(drow + i, load(drow + i) + load(srow + i));
          }
        }
      });
    }
  });
}

void gather(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner, const int64_t* index,
            int64_t index_extent, void* out) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    parallel_for(outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o)
        for (int64_t j = 0; j < index_extent; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t at = (o * index_extent + j) * inner + i;
            dst[at] = src[(o * in_extent + index[at]) * inner + i];
          }
    });
  });
}

void scatter_add(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* index,
                 int64_t index_extent, const void* src) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      fail("scatter_add", "bool tensors cannot be accumulated");
    } else {
      T* dst = static_cast<T*>(out);
      const T* s = static_cast<const T*>(src);
      parallel_for(outer, 1, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o)
          for (int64_t j = 0; j < index_extent; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              const int64_t at = (o * index_extent + j) * inner + i;
              T* d = dst + (o * out_extent + index[at]) * inner + i;
              store(d, load(d) + load(s + at));
            }
      });
    }
  });
}

}  // namespace heed::kernels::cpu
