// heed/functional.h — the neural-network functions (namespace heed::F), PyTorch style.
//
// softmax/log_softmax subtract the row maximum; a row that is entirely -inf gives zeros
// (softmax) or -inf (log_softmax) and a zero gradient, never NaN. cross_entropy is fused
// (log-softmax + NLL): it keeps only one log-sum-exp per row for backward.
#pragma once

#include <cstdint>

#include "heed/ops.h"

namespace heed::F {

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::None);
// x @ weight^T + bias; weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias), approximation) with the GELU in the gemm's epilogue (cuBLASLt's
// GELU_AUX_BIAS on CUDA for the tanh form; block by block while in cache on the CPU): the same
// values up to rounding (bit for bit on the CPU in float32/float64), one pass over the
// (..., out) activations fewer. Autograd keeps the GELU's input, as gelu after linear would.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   GeluApproximation approximation = GeluApproximation::None);
// linear(linear_gelu(x, w1, b1, approximation), w2, b2): a Transformer's feed-forward block as
// one op with the same values and gradients (bit for bit on the CPU), whose backward computes
// the GELU's gradient inside the gemm that produces it (on the CPU; elsewhere a pass after it)
// instead of a separate pass over the (..., hidden) activations. nn::FeedForward uses it when its
// dropout is off. w1 (hidden, in), b1 (hidden) or undefined, w2 (out, hidden), b2 (out) or
// undefined.
Tensor feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                    GeluApproximation approximation = GeluApproximation::None);
// Rows of `weight` (num, dim) picked by int64 `indices` of any shape: (..., dim).
Tensor embedding(const Tensor& weight, const Tensor& indices);

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
// logits (N, C) with targets (N), or (B, T, C) with (B, T), etc.: class dim last.
// Mean over the targets that are not ignore_index; if every target is ignored the loss is 0
// with zero gradient (PyTorch gives NaN; a fully padded batch should not poison training).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {});

// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p).
// Identity when !training or p == 0. The mask comes from the default generator's Philox
// stream (or `generator`'s) and is regenerated in backward from its (seed, offset), never
// stored.
Tensor dropout(const Tensor& x, double p, bool training = true);
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator);

// Layer normalization over the last dim (size C): (x - mean) / sqrt(var + eps) * weight + bias,
// with the biased variance; weight/bias (C) may be undefined. Fused forward and backward
// kernels; only the per-row mean and 1/std are saved.
Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace heed::F
