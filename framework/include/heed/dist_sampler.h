// heed/dist_sampler.h — dist::DistributedSampler: each rank's share of a dataset's indices,
// reshuffled every epoch from a seed (PyTorch's DistributedSampler).
//
// Invariants:
//  * The permutation of an epoch depends only on (seed, epoch, dataset size): every rank
//    computes the same one without communication (splitmix64 + Fisher-Yates, no
//    implementation-defined std distributions).
//  * Without drop_last the permutation is padded by wrapping around to a multiple of the
//    world size, so every rank gets ceil(N / world) indices (a few repeat); with drop_last it
//    is cut to floor(N / world) per rank. Rank r takes positions r, r + world, r + 2*world...
//  * Over one epoch the ranks' indices are disjoint and cover the dataset (up to the padding
//    or the dropped tail).
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "heed/error.h"

namespace heed::dist {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, uint64_t seed = 0, bool shuffle = true,
                     bool drop_last = false)
      : size_(dataset_size), rank_(rank), world_(world_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
    HEED_CHECK(dataset_size >= 0 && world_size >= 1 && rank >= 0 && rank < world_size, "dist::DistributedSampler",
               "bad arguments: dataset_size {}, rank {}, world_size {}", dataset_size, rank, world_size);
  }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return drop_last_ ? size_ / world_ : (size_ + world_ - 1) / world_; }
  // This rank's indices for the current epoch, in order.
  std::vector<int64_t> indices() const {
    std::vector<int64_t> order(static_cast<size_t>(size_));
    std::iota(order.begin(), order.end(), int64_t{0});
    if (shuffle_) {
      uint64_t state = seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch_) + 0x632BE59BD9B4E019ull;
      for (int64_t i = size_ - 1; i > 0; --i) {
        const uint64_t j = next(state) % static_cast<uint64_t>(i + 1);
        std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
      }
    }
    const int64_t total = num_samples() * world_;
    std::vector<int64_t> mine;
    mine.reserve(static_cast<size_t>(num_samples()));
    for (int64_t pos = rank_; pos < total && size_ > 0; pos += world_)
      mine.push_back(order[static_cast<size_t>(pos % size_)]);
    return mine;
  }

 private:
  static uint64_t next(uint64_t& state) {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t size_;
  int rank_, world_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int64_t epoch_ = 0;
};

}  // namespace heed::dist
