// layers/src/layers.cpp — Linear, Embedding, LayerNorm, Dropout, FeedForward, positional
// encodings.
#include "heed/nn/layers.h"

#include <cmath>

#include "heed/autograd.h"
#include "heed/nn/init.h"
#include "heed/ops.h"

namespace heed::nn {

// ---- Linear ---------------------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  HEED_CHECK(in_features > 0 && out_features > 0, "Linear", "features must be positive, got in={} out={}", in_features,
             out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));  // = U(-1/sqrt(in), 1/sqrt(in))
  if (with_bias) {
    bias = register_parameter("bias", empty({out_features}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) const { return F::linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features_, out_features_, bias.defined());
}

// ---- Embedding ------------------------------------------------------------------------------

Embedding::Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding_idx)
    : Module("Embedding"), num_(num_embeddings), dim_(dim), padding_idx_(padding_idx) {
  HEED_CHECK(num_embeddings > 0 && dim > 0, "Embedding", "sizes must be positive, got num={} dim={}", num_embeddings,
             dim);
  if (padding_idx) {
    HEED_CHECK(*padding_idx >= 0 && *padding_idx < num_embeddings, "Embedding", "padding_idx {} is outside [0, {})",
               *padding_idx, num_embeddings);
  }
  weight = register_parameter("weight", empty({num_embeddings, dim}));
  init::normal_(weight, 0.0, 1.0);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) const {
  Tensor out = F::embedding(weight, indices);  // (..., dim)
  if (padding_idx_ && weight.requires_grad() && grad_mode_enabled()) {
    // Positions holding padding_idx read a detached copy, so that row gets no gradient.
    Tensor is_pad = eq(indices, full({}, static_cast<double>(*padding_idx_), indices.options())).unsqueeze(-1);
    out = where(is_pad, out.detach(), out);
  }
  return out;
}

std::string Embedding::extra_repr() const {
  return padding_idx_ ? fmt::format("{}, {}, padding_idx={}", num_, dim_, *padding_idx_)
                      : fmt::format("{}, {}", num_, dim_);
}

// ---- LayerNorm ------------------------------------------------------------------------------

LayerNorm::LayerNorm(int64_t dim, double eps, bool elementwise_affine, bool with_bias)
    : Module("LayerNorm"), dim_(dim), eps_(eps) {
  HEED_CHECK(dim > 0, "LayerNorm", "dim must be positive, got {}", dim);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones({dim}));
    if (with_bias) bias = register_parameter("bias", zeros({dim}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  // Checked here too: without affine parameters F::layer_norm would normalise any last dim.
  HEED_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == dim_, "LayerNorm",
             "expects inputs of shape (..., {}), got {}", dim_, x.defined() ? shape_str(x.shape()) : "undefined");
  return F::layer_norm(x, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("({},), eps={}, elementwise_affine={}", dim_, eps_, weight.defined());
}

// ---- Dropout / activations / FeedForward ----------------------------------------------------

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  HEED_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "probability must be in [0, 1], got {}", p);
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", p_); }

Tensor activate(const Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::ReLU:
      return relu(x);
    case Activation::GELU:
      return gelu(x, GeluApproximation::None);
    case Activation::GELUTanh:
      return gelu(x, GeluApproximation::Tanh);
  }
  return x;
}

FeedForward::FeedForward(int64_t d_model, int64_t d_ff, double dropout_p, Activation activation, bool bias)
    : Module("FeedForward"), activation_(activation) {
  fc1 = register_module("fc1", std::make_shared<Linear>(d_model, d_ff, bias));
  fc2 = register_module("fc2", std::make_shared<Linear>(d_ff, d_model, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(dropout_p));
}

Tensor FeedForward::forward(const Tensor& x) const {
  // With a GELU and no dropout to apply, the whole block is one op (F::feed_forward: the GELU in
  // fc1's gemm epilogue, its gradient in the gemm of fc2's input gradient).
  const bool dropout_off = !dropout->is_training() || dropout->p() == 0.0;
  if (activation_ != Activation::ReLU && dropout_off)
    return F::feed_forward(x, fc1->weight, fc1->bias, fc2->weight, fc2->bias,
                           activation_ == Activation::GELUTanh ? GeluApproximation::Tanh : GeluApproximation::None);
  // GELU in fc1's gemm epilogue (F::linear_gelu); ReLU as its own op.
  const Tensor hidden =
      activation_ == Activation::ReLU
          ? activate(fc1->forward(x), activation_)
          : F::linear_gelu(x, fc1->weight, fc1->bias,
                           activation_ == Activation::GELUTanh ? GeluApproximation::Tanh : GeluApproximation::None);
  return fc2->forward(dropout->forward(hidden));
}

// ---- positional encodings -------------------------------------------------------------------

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t max_len, int64_t d_model)
    : Module("SinusoidalPositionalEncoding"), max_len_(max_len) {
  HEED_CHECK(max_len > 0 && d_model > 0, "SinusoidalPositionalEncoding", "sizes must be positive");
  std::vector<float> values(static_cast<size_t>(max_len * d_model));
  for (int64_t pos = 0; pos < max_len; ++pos)
    for (int64_t i = 0; i < d_model; ++i) {
      const double rate = std::pow(10000.0, -static_cast<double>(2 * (i / 2)) / static_cast<double>(d_model));
      const double angle = static_cast<double>(pos) * rate;
      values[static_cast<size_t>(pos * d_model + i)] =
          static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  table = register_buffer("table", from_vector(values, {max_len, d_model}), /*persistent=*/false);
}

Tensor SinusoidalPositionalEncoding::forward(int64_t length, int64_t offset) const {
  HEED_CHECK(offset >= 0 && length >= 0 && offset + length <= max_len_, "SinusoidalPositionalEncoding",
             "positions [{}, {}) exceed max_len {}", offset, offset + length, max_len_);
  return table.narrow(0, offset, length);
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(int64_t max_len, int64_t d_model)
    : Module("LearnedPositionalEmbedding"), max_len_(max_len) {
  HEED_CHECK(max_len > 0 && d_model > 0, "LearnedPositionalEmbedding", "sizes must be positive");
  weight = register_parameter("weight", empty({max_len, d_model}));
  init::normal_(weight, 0.0, 0.02);
}

Tensor LearnedPositionalEmbedding::forward(int64_t length, int64_t offset) const {
  HEED_CHECK(offset >= 0 && length >= 0 && offset + length <= max_len_, "LearnedPositionalEmbedding",
             "positions [{}, {}) exceed max_len {} (the model's context)", offset, offset + length, max_len_);
  return weight.narrow(0, offset, length);
}

}  // namespace heed::nn
