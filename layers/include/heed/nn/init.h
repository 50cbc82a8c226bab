// heed/nn/init.h — parameter initialisers (namespace heed::nn::init), PyTorch semantics.
//
// Each writes into the tensor in place (no autograd history) from `generator` (the default
// generator when null, PyTorch's generator= argument) and returns it. Fans are computed as
// PyTorch does: for a (out, in, ...) weight, fan_in = in * receptive, fan_out = out * receptive.
#pragma once

#include <utility>

#include "heed/random.h"
#include "heed/tensor.h"

namespace heed::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);

Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* generator = nullptr);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* generator = nullptr);
// U(-b, b), b = gain(a) * sqrt(3 / fan_in), gain(a) = sqrt(2 / (1 + a^2)) (leaky-ReLU gain).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, Generator* generator = nullptr);
// A (semi-)orthogonal matrix (rows or columns orthonormal) times gain, from the QR
// decomposition of a Gaussian matrix with R's diagonal made positive (PyTorch's recipe).
Tensor& orthogonal_(Tensor& t, double gain = 1.0, Generator* generator = nullptr);

}  // namespace heed::nn::init
