// heed/nn/transformer.h — Transformer encoder/decoder layers and stacks, the encoder-decoder
// Transformer for sequence-to-sequence, and the decoder-only TransformerLM.
//
// Invariants:
//  * norm_first = true is pre-LN (x + sublayer(norm(x)), with a final LayerNorm on the stack);
//    false is post-LN (norm(x + sublayer(x))), as in the original paper.
//  * Token tensors are int64 (B, L); activations (B, L, d_model); logits (B, L, vocab).
//  * Incremental decoding with caches reproduces the full forward pass (tested at 1e-5).
#pragma once

#include <memory>
#include <vector>

#include "heed/nn/attention.h"
#include "heed/nn/layers.h"

namespace heed::nn {

struct TransformerLayerOptions {
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t d_ff = 2048;
  double dropout = 0.1;            // residual and feed-forward dropout
  double attention_dropout = 0.0;  // on the attention weights
  bool norm_first = true;          // pre-LN
  Activation activation = Activation::GELU;
  double layer_norm_eps = 1e-5;
  bool bias = true;
  // Projection layout, scale mode, shared K/V, window, init of the attention sublayers.
  MultiHeadAttentionOptions attention;
  // The encoder/decoder stacks checkpoint every layer (nn::checkpoint): backward recomputes a
  // layer's forward from its inputs instead of keeping its activations. Training only (no
  // effect with grad mode off or with caches).
  bool recompute = false;
};

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options);
  // x (B, S, C); mask: the source key padding (encoder) or causal (decoder-only LM). With a
  // cache, x holds only the new positions.
  Tensor forward(const Tensor& x, const F::AttentionMask& mask = {}, KVCache* cache = nullptr) const;
  std::shared_ptr<MultiHeadAttention> self_attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;

 private:
  bool norm_first_;
};

// Caches of one decoder layer for incremental decoding.
struct DecoderLayerCache {
  KVCache self_attention;
  KVCache cross_attention{Tensor(), Tensor(), true};
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options);
  // x (B, T, C) target side, memory (B, S, C) from the encoder. self_mask is usually causal
  // (+ target padding), memory_mask the source key padding.
  Tensor forward(const Tensor& x, const Tensor& memory, const F::AttentionMask& self_mask = {},
                 const F::AttentionMask& memory_mask = {}, DecoderLayerCache* cache = nullptr) const;
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;

 private:
  bool norm_first_;
};

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& options, int64_t num_layers);
  Tensor forward(const Tensor& x, const F::AttentionMask& mask = {}) const;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // pre-LN only
  size_t size() const { return layers->size(); }
  std::shared_ptr<TransformerEncoderLayer> layer(size_t i) const { return layers->at<TransformerEncoderLayer>(i); }
  bool recompute = false;  // checkpoint every layer (TransformerLayerOptions::recompute)
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& options, int64_t num_layers);
  Tensor forward(const Tensor& x, const Tensor& memory, const F::AttentionMask& self_mask = {},
                 const F::AttentionMask& memory_mask = {}, std::vector<DecoderLayerCache>* caches = nullptr) const;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // pre-LN only
  size_t size() const { return layers->size(); }
  std::shared_ptr<TransformerDecoderLayer> layer(size_t i) const { return layers->at<TransformerDecoderLayer>(i); }
  bool recompute = false;  // checkpoint every layer (TransformerLayerOptions::recompute)
};

enum class PositionalKind { Sinusoidal, Learned };

struct TransformerOptions {
  int64_t src_vocab = 0;
  int64_t tgt_vocab = 0;
  int64_t encoder_layers = 3;
  int64_t decoder_layers = 3;
  int64_t max_len = 256;
  int64_t pad_id = 0;             // padding token of both vocabularies
  bool share_embeddings = false;  // one embedding for source and target (same vocabulary)
  bool tie_output = true;         // output projection = target embedding^T
  PositionalKind positional = PositionalKind::Sinusoidal;
  TransformerLayerOptions layer;  // d_model, heads, d_ff, dropout, ...
};

// Encoder-decoder Transformer for sequence-to-sequence.
class Transformer : public Module {
 public:
  explicit Transformer(const TransformerOptions& options);
  // src (B, S) -> memory (B, S, C); padding positions (== pad_id) are masked out as keys.
  Tensor encode(const Tensor& src) const;
  // tgt (B, T), the encoder memory and the source tokens (for their padding) -> logits (B, T, V).
  // With caches (one per decoder layer), tgt holds only the new positions.
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& src,
                std::vector<DecoderLayerCache>* caches = nullptr) const;
  Tensor forward(const Tensor& src, const Tensor& tgt) const { return decode(tgt, encode(src), src); }
  std::vector<DecoderLayerCache> make_caches() const { return std::vector<DecoderLayerCache>(decoder->size()); }
  const TransformerOptions& options() const { return options_; }

  std::shared_ptr<Embedding> src_embed, tgt_embed;
  std::shared_ptr<SinusoidalPositionalEncoding> sinusoidal;
  std::shared_ptr<LearnedPositionalEmbedding> src_positions, tgt_positions;
  std::shared_ptr<Dropout> embed_dropout;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
  std::shared_ptr<Linear> output;  // untied only

 private:
  Tensor embed(const Embedding& table, const LearnedPositionalEmbedding* learned, const Tensor& tokens,
               int64_t offset) const;
  TransformerOptions options_;
};

struct TransformerLMOptions {
  int64_t vocab = 256;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t layers = 4;
  int64_t d_ff = 0;      // 0: 4 * d_model
  int64_t context = 64;  // longest sequence (learned positions)
  double dropout = 0.0;
  bool tie_embeddings = false;
  bool bias = true;
  Activation activation = Activation::GELU;
  ProjectionLayout layout = ProjectionLayout::FusedQKV;
  AttentionScale scale = AttentionScale::SqrtDk;
  bool causal = true;  // false only to plant a fault for the doctor's tests
  // Checkpoint every block (nn::checkpoint): backward recomputes each block's forward from its
  // input instead of keeping its activations. No effect with grad mode off or with caches.
  bool recompute = false;
};

// Decoder-only language model: token + learned position embeddings, pre-LN causal blocks,
// final LayerNorm and a (tied or untied) output head.
class TransformerLM : public Module {
 public:
  explicit TransformerLM(const TransformerLMOptions& options);
  // idx (B, T) -> logits (B, T, vocab). With caches (one per layer), idx holds the new
  // positions only and continues after cache length.
  Tensor forward(const Tensor& idx, std::vector<KVCache>* caches = nullptr) const;
  Tensor operator()(const Tensor& idx) const { return forward(idx); }
  std::vector<KVCache> make_caches() const { return std::vector<KVCache>(blocks->size()); }
  const TransformerLMOptions& options() const { return options_; }
  std::shared_ptr<TransformerEncoderLayer> block(size_t i) const { return blocks->at<TransformerEncoderLayer>(i); }

  std::shared_ptr<Embedding> tok_embed;
  std::shared_ptr<LearnedPositionalEmbedding> pos_embed;
  std::shared_ptr<Dropout> embed_dropout;
  std::shared_ptr<ModuleList> blocks;  // TransformerEncoderLayer with causal self-attention
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> head;  // untied only

 private:
  TransformerLMOptions options_;
};

}  // namespace heed::nn
