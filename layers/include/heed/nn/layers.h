// heed/nn/layers.h — the basic layers: Linear, Embedding, LayerNorm, Dropout, activations,
// FeedForward and positional encodings.
//
// Invariants: default initialisations follow PyTorch (Linear: U(+-1/sqrt(in)) for weight and
// bias; Embedding: N(0, 1) with the padding row zeroed; LayerNorm: weight 1, bias 0);
// inputs are (..., C) with the feature dim last.
#pragma once

#include <cstdint>
#include <optional>

#include "heed/functional.h"
#include "heed/nn/module.h"

namespace heed::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

 protected:
  std::string extra_repr() const override;

 private:
  int64_t in_features_, out_features_;
};

class Embedding : public Module {
 public:
  // padding_idx: that row starts at zero and never receives gradient.
  Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) const;  // int64 (...) -> (..., dim)
  Tensor operator()(const Tensor& indices) const { return forward(indices); }
  Tensor weight;  // (num, dim)
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

 protected:
  std::string extra_repr() const override;

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  Tensor forward(const Tensor& x) const;  // (..., dim) -> (..., dim)
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight;  // (dim) or undefined
  Tensor bias;    // (dim) or undefined
  double eps() const { return eps_; }

 protected:
  std::string extra_repr() const override;

 private:
  int64_t dim_;
  double eps_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  // Identity in eval mode.
  Tensor forward(const Tensor& x) const { return F::dropout(x, p_, is_training()); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  double p() const { return p_; }

 protected:
  std::string extra_repr() const override;

 private:
  double p_;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) const { return relu(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::None)
      : Module("GELU"), approximation_(approximation) {}
  Tensor forward(const Tensor& x) const { return gelu(x, approximation_); }
  Tensor operator()(const Tensor& x) const { return forward(x); }

 private:
  GeluApproximation approximation_;
};

enum class Activation { ReLU, GELU, GELUTanh };
Tensor activate(const Tensor& x, Activation activation);

// Position-wise feed-forward: fc2(dropout(act(fc1(x)))), d_model -> d_ff -> d_model.
class FeedForward : public Module {
 public:
  FeedForward(int64_t d_model, int64_t d_ff, double dropout = 0.0, Activation activation = Activation::GELU,
              bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Dropout> dropout;

 private:
  Activation activation_;
};

// The fixed sin/cos table of "Attention is all you need": pe[pos, 2i] = sin(pos / 10000^(2i/d)),
// pe[pos, 2i+1] = cos(...). A non-persistent buffer (max_len, d_model).
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(int64_t max_len, int64_t d_model);
  // Rows [offset, offset + length) of the table: (length, d_model).
  Tensor forward(int64_t length, int64_t offset = 0) const;
  Tensor table;

 private:
  int64_t max_len_;
};

// A learned table of positions (max_len, d_model), N(0, 0.02) initialised (GPT-2 style).
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t d_model);
  Tensor forward(int64_t length, int64_t offset = 0) const;  // (length, d_model)
  Tensor weight;

 private:
  int64_t max_len_;
};

}  // namespace heed::nn
