// tools/layer_cases.cpp — gradient-check cases for LayerNorm, the attention functions and every
// nn layer (registered after the op groups of op_cases.cpp; heed-gradcheck and
// tests/test_gradcheck.cpp run them like any other case).
//
// Attention functions take their q/k/v (and LayerNorm its weight and bias) as ordinary inputs.
// A layer case builds a fresh module from the case's seed, converts it to float64, puts it in
// eval mode (no dropout) and hands its parameters to gradcheck after the data inputs: the
// finite differences perturb the module's own parameter tensors in place, and the analytic
// gradients are taken with respect to those same tensors, so every parameter of every layer
// is checked, not only the gradient of the input.
//
// Invariants: sizes are tiny (d_model 8, a few tokens) so one case runs in well under a second;
// several cases use sizes that are not multiples of the fused kernel's blocks, and one uses
// more than one block (T = S = 70) so the online softmax crosses block boundaries.
#include <heed/heed.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "op_cases.h"

namespace heed::op_cases {

namespace {
using In = const std::vector<Tensor>&;
using S = InputSpec;

// The inputs of an attention function: q (B,H,T,D), k (B,H,S,D), v (B,H,S,Dv).
std::vector<InputSpec> qkv_specs(int64_t B, int64_t H, int64_t T, int64_t Sk, int64_t D, int64_t Dv) {
  return {S::uniform({B, H, T, D}), S::uniform({B, H, Sk, D}), S::uniform({B, H, Sk, Dv})};
}

Tensor index_tensor(std::vector<int64_t> values, Dims shape) { return from_vector(values, std::move(shape)); }

// A case whose module M is built by `build` (under manual_seed(seed)) and applied by `apply`
// to the data inputs x[0..data.size()); x[data.size()..] are the module's parameters.
template <typename M>
OpCase module_case(std::string name, std::string description, std::vector<InputSpec> data,
                   std::function<std::shared_ptr<M>()> build, std::function<Tensor(const M&, In)> apply) {
  auto module = std::make_shared<std::shared_ptr<M>>();
  OpCase c;
  c.name = std::move(name);
  c.description = std::move(description);
  c.inputs = data;
  c.custom_inputs = [module, data, build](uint64_t seed) {
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < data.size(); ++i)
      inputs.push_back(make_input(data[i], seed + 0x9E3779B97F4A7C15ull * (i + 1)));
    manual_seed(seed & ((1ull << 62) - 1));
    std::shared_ptr<M> m = build();
    m->to(kFloat64);
    m->eval();
    *module = m;
    for (const auto& [parameter_name, parameter] : m->named_parameters()) inputs.push_back(parameter);
    return inputs;
  };
  c.custom_inputs_description = "+ module parameters";
  c.fn = [module, apply](In x) { return apply(**module, x); };
  return c;
}

nn::MultiHeadAttentionOptions mha(nn::ProjectionLayout layout, int64_t heads = 2) {
  nn::MultiHeadAttentionOptions o;
  o.d_model = 8;
  o.heads = heads;
  o.layout = layout;
  return o;
}

nn::TransformerLayerOptions layer_options(bool norm_first) {
  nn::TransformerLayerOptions o;
  o.d_model = 8;
  o.heads = 2;
  o.d_ff = 12;
  o.dropout = 0.1;  // eval mode: must not matter
  o.norm_first = norm_first;
  return o;
}
}  // namespace

void add_attention_function_cases(OpCaseRegistry& r) {
  r.add({"layer_norm",
         "F::layer_norm over the last dim with weight and bias",
         {S::uniform({3, 5}, -2.0, 2.0), S::uniform({5}, 0.5, 1.5), S::uniform({5})},
         [](In x) { return F::layer_norm(x[0], x[1], x[2]); }});
  r.add({"layer_norm_no_affine",
         "F::layer_norm without weight and bias, 3-D input",
         {S::uniform({2, 3, 4}, -2.0, 2.0)},
         [](In x) { return F::layer_norm(x[0]); }});
  r.add({"layer_norm_strided",
         "F::layer_norm of a non-contiguous input",
         {S::uniform({4, 6}, -2.0, 2.0).strided(), S::uniform({6}, 0.5, 1.5), S::uniform({6})},
         [](In x) { return F::layer_norm(x[0], x[1], x[2]); }});

  // The composed reference path (matmul, masked_fill, softmax, matmul).
  r.add({"sdpa_composed", "composed attention, T=3 S=5 D=4 Dv=3", qkv_specs(2, 2, 3, 5, 4, 3),
         [](In x) { return F::scaled_dot_product_attention_with_weights(x[0], x[1], x[2]).output; }});
  r.add({"sdpa_composed_weights", "the attention weights of the composed path", qkv_specs(1, 2, 3, 4, 4, 2),
         [](In x) { return F::scaled_dot_product_attention_with_weights(x[0], x[1], x[2]).weights; }});
  r.add({"sdpa_composed_causal_lengths", "composed attention, causal and key lengths", qkv_specs(2, 1, 4, 4, 3, 3),
         [](In x) {
           F::AttentionMask mask{.causal = true, .key_lengths = index_tensor({4, 2}, {2}).to(x[0].device())};
           return F::scaled_dot_product_attention_with_weights(x[0], x[1], x[2], mask).output;
         }});
  {
    std::vector<InputSpec> specs = qkv_specs(1, 2, 3, 4, 4, 4);
    specs.push_back(S::uniform({3, 4}));
    r.add({"sdpa_additive_mask_grad", "an additive float mask that itself needs a gradient (composed path)", specs,
           [](In x) { return F::scaled_dot_product_attention(x[0], x[1], x[2], {.additive = x[3]}); }});
  }
  r.add({"sdpa_default", "F::scaled_dot_product_attention (dispatches to the fused kernel)",
         qkv_specs(2, 2, 3, 5, 4, 3), [](In x) { return F::scaled_dot_product_attention(x[0], x[1], x[2]); }});

  // The fused (flash) kernel, every mask kind.
  r.add({"flash_attention", "fused attention, odd sizes T=5 S=7 D=3 Dv=2", qkv_specs(2, 2, 5, 7, 3, 2),
         [](In x) { return F::flash_attention(x[0], x[1], x[2]); }});
  r.add({"flash_attention_multiblock", "fused attention over several key and query blocks (T=S=70), causal",
         qkv_specs(1, 1, 70, 70, 2, 2), [](In x) { return F::flash_attention(x[0], x[1], x[2], {}, 0.0, 0.7, true); }});
  r.add({"flash_attention_causal_cross", "causal with S > T (queries aligned to the last keys)",
         qkv_specs(1, 2, 3, 6, 4, 4), [](In x) { return F::flash_attention(x[0], x[1], x[2], {.causal = true}); }});
  {
    std::vector<InputSpec> specs = qkv_specs(2, 1, 4, 5, 3, 3);
    specs.push_back(S::mask({4, 5}, 0.7));
    r.add({"flash_attention_keep_mask", "a boolean keep mask (rows may be fully masked: zeros)", specs,
           [](In x) { return F::flash_attention(x[0], x[1], x[2], {.keep = x[3]}); }});
  }
  r.add({"flash_attention_key_lengths", "per-batch key lengths, one batch with no keys at all",
         qkv_specs(3, 1, 3, 4, 3, 3), [](In x) {
           return F::flash_attention(x[0], x[1], x[2], {.key_lengths = index_tensor({4, 1, 0}, {3}).to(x[0].device())});
         }});
  r.add({"flash_attention_key_padding", "a (B, S) key padding mask", qkv_specs(2, 2, 3, 4, 2, 2), [](In x) {
           const Tensor padding = from_vector(std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1}, {2, 4}) > 0.5;
           return F::flash_attention(x[0], x[1], x[2], {.key_padding = padding});
         }});
  r.add({"flash_attention_window", "local attention of half-width 1", qkv_specs(1, 1, 6, 6, 3, 3),
         [](In x) { return F::flash_attention(x[0], x[1], x[2], {.window = 1}); }});
  {
    std::vector<InputSpec> specs = qkv_specs(1, 2, 3, 4, 3, 3);
    specs.push_back(S::uniform({3, 4}, -2.0, 2.0).no_grad());
    r.add({"flash_attention_additive", "a constant additive mask inside the fused kernel", specs,
           [](In x) { return F::flash_attention(x[0], x[1], x[2], {.additive = x[3]}); }});
  }
  r.add({"flash_attention_dropout", "attention dropout 0.3, regenerated from the seed in backward",
         qkv_specs(1, 2, 4, 5, 3, 3), [](In x) {
           manual_seed(11);
           return F::flash_attention(x[0], x[1], x[2], {}, 0.3);
         }});
  r.add({"flash_attention_transposed_q",
         "q given as a transposed (non-contiguous) view",
         {S::uniform({1, 2, 4, 3}).transposed(), S::uniform({1, 2, 3, 3}), S::uniform({1, 2, 3, 2})},
         [](In x) { return F::flash_attention(x[0], x[1], x[2]); }});
  r.add({"flash_attention_packed",
         "self-attention from packed projections (B, T, 3C), 2 heads, causal",
         {S::uniform({2, 4, 12})},
         [](In x) { return F::flash_attention_packed(x[0], 2, {.causal = true}); }});
}

void add_layer_cases(OpCaseRegistry& r) {
  using namespace nn;
  r.add(module_case<Linear>(
      "layer_linear", "nn::Linear 5 -> 4 with bias on a (2, 3, 5) input", {S::uniform({2, 3, 5})},
      [] { return std::make_shared<Linear>(5, 4); }, [](const Linear& m, In x) { return m(x[0]); }));
  r.add(module_case<Linear>(
      "layer_linear_no_bias", "nn::Linear without bias", {S::uniform({3, 4})},
      [] { return std::make_shared<Linear>(4, 3, false); }, [](const Linear& m, In x) { return m(x[0]); }));
  r.add(module_case<Embedding>(
      "layer_embedding",
      "nn::Embedding (repeated indices accumulate; padding_idx 0 is not looked up, since its "
      "row deliberately gets no gradient)",
      {S::fixed_indices({2, 3}, {2, 3, 1, 3, 4, 2})}, [] { return std::make_shared<Embedding>(5, 4, 0); },
      [](const Embedding& m, In x) { return m(x[0]); }));
  r.add(module_case<LayerNorm>(
      "layer_layer_norm", "nn::LayerNorm(6) with affine parameters", {S::uniform({2, 3, 6}, -2.0, 2.0)},
      [] {
        auto m = std::make_shared<LayerNorm>(6);
        NoGradGuard no_grad;  // non-trivial affine parameters, so their gradients matter
        m->weight.copy_(uniform({6}, 0.5, 1.5));
        m->bias.copy_(uniform({6}, -0.5, 0.5));
        return m;
      },
      [](const LayerNorm& m, In x) { return m(x[0]); }));
  r.add(module_case<FeedForward>(
      "layer_feed_forward_gelu", "nn::FeedForward 6 -> 10 -> 6, GELU", {S::uniform({2, 3, 6})},
      [] { return std::make_shared<FeedForward>(6, 10, 0.1, Activation::GELU); },
      [](const FeedForward& m, In x) { return m(x[0]); }));
  r.add(module_case<FeedForward>(
      "layer_feed_forward_relu",
      "nn::FeedForward with ReLU (inputs away from the kink are not "
      "guaranteed, so the hidden pre-activations are kept positive by a large bias)",
      {S::uniform({3, 4})},
      [] {
        auto m = std::make_shared<FeedForward>(4, 6, 0.0, Activation::ReLU);
        NoGradGuard no_grad;
        m->fc1->bias.fill_(3.0);
        return m;
      },
      [](const FeedForward& m, In x) { return m(x[0]); }));
  r.add(module_case<LearnedPositionalEmbedding>(
      "layer_learned_positions", "nn::LearnedPositionalEmbedding rows 2..5, scaled by an input", {S::uniform({3, 4})},
      [] { return std::make_shared<LearnedPositionalEmbedding>(8, 4); },
      [](const LearnedPositionalEmbedding& m, In x) { return m.forward(3, 2) * x[0]; }));

  // Single-head attention with every scale mode.
  for (const char* mode : {"sqrt_dk", "none", "learnable", "affine", "cosine"}) {
    const std::string name = std::string("layer_sdpa_") + mode;
    r.add(module_case<ScaledDotProductAttention>(
        name, std::string("nn::ScaledDotProductAttention, scale mode ") + mode + ", causal",
        qkv_specs(2, 1, 4, 4, 4, 3),
        [mode] { return std::make_shared<ScaledDotProductAttention>(4, parse_attention_scale(mode)); },
        [](const ScaledDotProductAttention& m, In x) { return m.forward(x[0], x[1], x[2], {.causal = true}).output; }));
  }

  // Multi-head attention: every projection layout and option.
  struct MhaCase {
    const char* name;
    const char* description;
    MultiHeadAttentionOptions options;
  };
  std::vector<MhaCase> mha_cases = {
      {"layer_mha_separate", "nn::MultiHeadAttention, separate q/k/v projections, causal",
       mha(ProjectionLayout::Separate)},
      {"layer_mha_fused_qkv", "fused QKV projection (the packed fused-kernel path), causal",
       mha(ProjectionLayout::FusedQKV)},
      {"layer_mha_per_head", "independent per-head projections (seed 003 sec. 3.2.1), causal",
       mha(ProjectionLayout::PerHead)},
  };
  {
    MultiHeadAttentionOptions o = mha(ProjectionLayout::Separate);
    o.shared_kv = true;
    mha_cases.push_back({"layer_mha_shared_kv", "one projection shared by K and V (seed 003 sec. 5.3)", o});
    o = mha(ProjectionLayout::Separate);
    o.window = 1;
    mha_cases.push_back({"layer_mha_window", "local windowed attention, half-width 1 (seed 001 sec. 6.2)", o});
    o = mha(ProjectionLayout::FusedQKV);
    o.scale = AttentionScale::Learnable;
    mha_cases.push_back({"layer_mha_learnable_scale", "a learnable per-head scale", o});
    o = mha(ProjectionLayout::Separate);
    o.scale = AttentionScale::Cosine;
    mha_cases.push_back({"layer_mha_cosine", "cosine attention with a learnable temperature", o});
    o = mha(ProjectionLayout::FusedQKV);
    o.bias = false;
    o.orthogonal_output = true;
    o.qk_gain = 0.5;
    mha_cases.push_back({"layer_mha_no_bias_orthogonal", "no biases, orthogonal output init, small Q/K gain", o});
  }
  for (const MhaCase& c : mha_cases) {
    const MultiHeadAttentionOptions options = c.options;
    r.add(module_case<MultiHeadAttention>(
        c.name, c.description, {S::uniform({2, 4, 8})},
        [options] { return std::make_shared<MultiHeadAttention>(options); },
        [](const MultiHeadAttention& m, In x) { return m.forward(x[0], {.causal = true}).output; }));
  }
  r.add(module_case<MultiHeadAttention>(
      "layer_mha_cross_padding", "cross-attention (T=3 queries, S=5 memory) with key lengths",
      {S::uniform({2, 3, 8}), S::uniform({2, 5, 8})},
      [] { return std::make_shared<MultiHeadAttention>(mha(ProjectionLayout::Separate)); },
      [](const MultiHeadAttention& m, In x) {
        return m.forward(x[0], x[1], x[1], {.key_lengths = index_tensor({5, 2}, {2})}).output;
      }));
  r.add(module_case<MultiHeadAttention>(
      "layer_mha_weights", "the per-head attention weights (B, H, T, S) returned by need_weights",
      {S::uniform({1, 3, 8})}, [] { return std::make_shared<MultiHeadAttention>(mha(ProjectionLayout::FusedQKV)); },
      [](const MultiHeadAttention& m, In x) { return m.forward(x[0], {}, true).weights; }));
  r.add(module_case<AdditiveAttention>(
      "layer_additive_attention", "nn::AdditiveAttention (Bahdanau, seed 001 sec. 6.1) with key lengths",
      {S::uniform({2, 3, 4}), S::uniform({2, 5, 6}), S::uniform({2, 5, 3})},
      [] { return std::make_shared<AdditiveAttention>(4, 6, 7); },
      [](const AdditiveAttention& m, In x) {
        return m.forward(x[0], x[1], x[2], {.key_lengths = index_tensor({5, 3}, {2})}).output;
      }));

  // Transformer blocks and whole models.
  for (bool norm_first : {true, false}) {
    const std::string suffix = norm_first ? "pre_ln" : "post_ln";
    r.add(module_case<TransformerEncoderLayer>(
        "layer_encoder_" + suffix,
        std::string("nn::TransformerEncoderLayer, ") + (norm_first ? "pre-LN" : "post-LN") + ", key padding",
        {S::uniform({2, 3, 8})},
        [norm_first] { return std::make_shared<TransformerEncoderLayer>(layer_options(norm_first)); },
        [](const TransformerEncoderLayer& m, In x) {
          return m.forward(x[0], {.key_lengths = index_tensor({3, 2}, {2})});
        }));
    r.add(module_case<TransformerDecoderLayer>(
        "layer_decoder_" + suffix,
        std::string("nn::TransformerDecoderLayer, ") + (norm_first ? "pre-LN" : "post-LN") +
            ", causal self-attention and cross-attention",
        {S::uniform({2, 3, 8}), S::uniform({2, 4, 8})},
        [norm_first] { return std::make_shared<TransformerDecoderLayer>(layer_options(norm_first)); },
        [](const TransformerDecoderLayer& m, In x) { return m.forward(x[0], x[1], {.causal = true}); }));
  }
  for (bool tied : {false, true}) {
    r.add(module_case<TransformerLM>(
        tied ? "layer_transformer_lm_tied" : "layer_transformer_lm",
        std::string("nn::TransformerLM (vocab 11, d 8, 2 heads, 1 layer), ") + (tied ? "tied" : "untied") +
            " output embedding; log-softmax of the logits",
        {S::fixed_indices({1, 4}, {3, 7, 1, 10})},
        [tied] {
          TransformerLMOptions o;
          o.vocab = 11;
          o.d_model = 8;
          o.heads = 2;
          o.layers = 1;
          o.d_ff = 12;
          o.context = 6;
          o.tie_embeddings = tied;
          return std::make_shared<TransformerLM>(o);
        },
        [](const TransformerLM& m, In x) { return F::log_softmax(m(x[0]), -1); }));
  }
  r.add(module_case<Transformer>(
      "layer_transformer_seq2seq",
      "nn::Transformer (1+1 layers, d 8, learned positions, tied output, padded source; the target avoids the pad "
      "token, whose embedding row deliberately gets no gradient)",
      {S::fixed_indices({2, 4}, {4, 5, 6, 0, 7, 8, 0, 0}), S::fixed_indices({2, 3}, {1, 5, 9, 1, 6, 2})},
      [] {
        TransformerOptions o;
        o.src_vocab = 10;
        o.tgt_vocab = 10;
        o.encoder_layers = 1;
        o.decoder_layers = 1;
        o.max_len = 6;
        o.positional = PositionalKind::Learned;
        o.layer = layer_options(true);
        return std::make_shared<Transformer>(o);
      },
      [](const Transformer& m, In x) { return m.forward(x[0], x[1]); }));
}

}  // namespace heed::op_cases
