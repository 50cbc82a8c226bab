// layers/src/transformer.cpp — Transformer layers, stacks, seq2seq model and language model.
#include "heed/nn/transformer.h"

#include <cmath>

#include "heed/autograd.h"
#include "heed/nn/init.h"
#include "heed/nn/recompute.h"
#include "heed/ops.h"

namespace heed::nn {

namespace {

MultiHeadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  MultiHeadAttentionOptions a = o.attention;
  a.d_model = o.d_model;
  a.heads = o.heads;
  a.dropout = o.attention_dropout;
  a.bias = o.bias;
  return a;
}

}  // namespace

// ---- encoder layer --------------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o)
    : Module("TransformerEncoderLayer"), norm_first_(o.norm_first) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(attention_options(o)));
  ff = register_module("ff", std::make_shared<FeedForward>(o.d_model, o.d_ff, o.dropout, o.activation, o.bias));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const F::AttentionMask& mask, KVCache* cache) const {
  if (norm_first_) {
    Tensor h = norm1->forward(x);
    Tensor y = x + dropout1->forward(self_attn->forward(h, mask, false, cache).output);
    return y + dropout2->forward(ff->forward(norm2->forward(y)));
  }
  Tensor y = norm1->forward(x + dropout1->forward(self_attn->forward(x, mask, false, cache).output));
  return norm2->forward(y + dropout2->forward(ff->forward(y)));
}

// ---- decoder layer --------------------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o)
    : Module("TransformerDecoderLayer"), norm_first_(o.norm_first) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(attention_options(o)));
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(attention_options(o)));
  ff = register_module("ff", std::make_shared<FeedForward>(o.d_model, o.d_ff, o.dropout, o.activation, o.bias));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(o.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& x, const Tensor& memory, const F::AttentionMask& self_mask,
                                        const F::AttentionMask& memory_mask, DecoderLayerCache* cache) const {
  KVCache* self_cache = cache ? &cache->self_attention : nullptr;
  KVCache* cross_cache = cache ? &cache->cross_attention : nullptr;
  if (norm_first_) {
    Tensor h = norm1->forward(x);
    Tensor y = x + dropout1->forward(self_attn->forward(h, self_mask, false, self_cache).output);
    Tensor z = y + dropout2->forward(
                       cross_attn->forward(norm2->forward(y), memory, memory, memory_mask, false, cross_cache).output);
    return z + dropout3->forward(ff->forward(norm3->forward(z)));
  }
  Tensor y = norm1->forward(x + dropout1->forward(self_attn->forward(x, self_mask, false, self_cache).output));
  Tensor z = norm2->forward(
      y + dropout2->forward(cross_attn->forward(y, memory, memory, memory_mask, false, cross_cache).output));
  return norm3->forward(z + dropout3->forward(ff->forward(z)));
}

// ---- stacks ---------------------------------------------------------------------------------

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers)
    : Module("TransformerEncoder"), recompute(o.recompute) {
  HEED_CHECK(num_layers > 0, "TransformerEncoder", "needs at least one layer, got {}", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerEncoderLayer>(o));
  if (o.norm_first) norm = register_module("norm", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
}

Tensor TransformerEncoder::forward(const Tensor& x, const F::AttentionMask& mask) const {
  Tensor h = x;  // (B,S,C)
  const bool checkpointed = recompute && grad_mode_enabled();
  for (size_t i = 0; i < layers->size(); ++i) {
    if (checkpointed) {
      h = checkpoint([layer = layer(i), mask](const std::vector<Tensor>& in) { return layer->forward(in[0], mask); },
                     {h});
    } else {
      h = layer(i)->forward(h, mask);
    }
  }
  return norm ? norm->forward(h) : h;
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers)
    : Module("TransformerDecoder"), recompute(o.recompute) {
  HEED_CHECK(num_layers > 0, "TransformerDecoder", "needs at least one layer, got {}", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerDecoderLayer>(o));
  if (o.norm_first) norm = register_module("norm", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps));
}

Tensor TransformerDecoder::forward(const Tensor& x, const Tensor& memory, const F::AttentionMask& self_mask,
                                   const F::AttentionMask& memory_mask, std::vector<DecoderLayerCache>* caches) const {
  HEED_CHECK(!caches || caches->size() == layers->size(), "TransformerDecoder", "got {} layer caches for {} layers",
             caches ? caches->size() : 0, layers->size());
  Tensor h = x;  // (B,T,C)
  const bool checkpointed = recompute && grad_mode_enabled() && !caches;
  for (size_t i = 0; i < layers->size(); ++i) {
    if (checkpointed) {
      h = checkpoint(
          [layer = layer(i), self_mask, memory_mask](const std::vector<Tensor>& in) {
            return layer->forward(in[0], in[1], self_mask, memory_mask);
          },
          {h, memory});
    } else {
      h = layer(i)->forward(h, memory, self_mask, memory_mask, caches ? &(*caches)[i] : nullptr);
    }
  }
  return norm ? norm->forward(h) : h;
}

// ---- encoder-decoder Transformer ------------------------------------------------------------

Transformer::Transformer(const TransformerOptions& o) : Module("Transformer"), options_(o) {
  const int64_t C = o.layer.d_model;
  HEED_CHECK(o.src_vocab > 0 && o.tgt_vocab > 0, "Transformer", "vocabulary sizes must be positive, got {} and {}",
             o.src_vocab, o.tgt_vocab);
  HEED_CHECK(!o.share_embeddings || o.src_vocab == o.tgt_vocab, "Transformer",
             "shared embeddings need one vocabulary size, got {} and {}", o.src_vocab, o.tgt_vocab);
  // Embeddings ~ N(0, 1/C), scaled by sqrt(C) on lookup (unit variance; fairseq's recipe).
  tgt_embed = register_module("tgt_embed", std::make_shared<Embedding>(o.tgt_vocab, C, o.pad_id));
  init::normal_(tgt_embed->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(C)));
  {
    NoGradGuard no_grad;
    tgt_embed->weight.select(0, o.pad_id).zero_();
  }
  if (o.share_embeddings) {
    src_embed = tgt_embed;
  } else {
    src_embed = register_module("src_embed", std::make_shared<Embedding>(o.src_vocab, C, o.pad_id));
    init::normal_(src_embed->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(C)));
    NoGradGuard no_grad;
    src_embed->weight.select(0, o.pad_id).zero_();
  }
  if (o.positional == PositionalKind::Sinusoidal) {
    sinusoidal = register_module("positions", std::make_shared<SinusoidalPositionalEncoding>(o.max_len, C));
  } else {
    src_positions = register_module("src_positions", std::make_shared<LearnedPositionalEmbedding>(o.max_len, C));
    tgt_positions = register_module("tgt_positions", std::make_shared<LearnedPositionalEmbedding>(o.max_len, C));
  }
  embed_dropout = register_module("embed_dropout", std::make_shared<Dropout>(o.layer.dropout));
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(o.layer, o.encoder_layers));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(o.layer, o.decoder_layers));
  if (!o.tie_output) output = register_module("output", std::make_shared<Linear>(C, o.tgt_vocab, false));
}

Tensor Transformer::embed(const Embedding& table, const LearnedPositionalEmbedding* learned, const Tensor& tokens,
                          int64_t offset) const {
  HEED_CHECK(tokens.dim() == 2, "Transformer", "expects (B, L) token ids, got shape {}", shape_str(tokens.shape()));
  const int64_t L = tokens.size(1);
  const double scale = std::sqrt(static_cast<double>(options_.layer.d_model));
  Tensor positions = learned ? learned->forward(L, offset) : sinusoidal->forward(L, offset);  // (L,C)
  return embed_dropout->forward(table.forward(tokens) * scale + positions);
}

Tensor Transformer::encode(const Tensor& src) const {
  F::AttentionMask mask;
  mask.key_padding = eq(src, full({}, static_cast<double>(options_.pad_id), src.options()));
  return encoder->forward(embed(*src_embed, src_positions.get(), src, 0), mask);
}

Tensor Transformer::decode(const Tensor& tgt, const Tensor& memory, const Tensor& src,
                           std::vector<DecoderLayerCache>* caches) const {
  const int64_t offset = caches && !caches->empty() ? (*caches)[0].self_attention.length() : 0;
  F::AttentionMask self_mask;
  self_mask.causal = true;
  F::AttentionMask memory_mask;
  memory_mask.key_padding = eq(src, full({}, static_cast<double>(options_.pad_id), src.options()));
  Tensor h =
      decoder->forward(embed(*tgt_embed, tgt_positions.get(), tgt, offset), memory, self_mask, memory_mask, caches);
  return output ? output->forward(h) : matmul(h, tgt_embed->weight.t());  // (B,T,V)
}

// ---- decoder-only language model ------------------------------------------------------------

TransformerLM::TransformerLM(const TransformerLMOptions& o) : Module("TransformerLM"), options_(o) {
  HEED_CHECK(o.vocab > 0 && o.context > 0 && o.layers > 0, "TransformerLM",
             "vocab, context and layers must be positive, got {}, {}, {}", o.vocab, o.context, o.layers);
  tok_embed = register_module("tok_embed", std::make_shared<Embedding>(o.vocab, o.d_model));
  pos_embed = register_module("pos_embed", std::make_shared<LearnedPositionalEmbedding>(o.context, o.d_model));
  init::normal_(pos_embed->weight, 0.0, 1.0);  // nn.Embedding's default, as the reference models use
  embed_dropout = register_module("embed_dropout", std::make_shared<Dropout>(o.dropout));
  TransformerLayerOptions layer;
  layer.d_model = o.d_model;
  layer.heads = o.heads;
  layer.d_ff = o.d_ff > 0 ? o.d_ff : 4 * o.d_model;
  layer.dropout = o.dropout;
  layer.attention_dropout = o.dropout;
  layer.norm_first = true;
  layer.activation = o.activation;
  layer.bias = o.bias;
  layer.attention.layout = o.layout;
  layer.attention.scale = o.scale;
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < o.layers; ++i) blocks->push_back(std::make_shared<TransformerEncoderLayer>(layer));
  norm = register_module("norm", std::make_shared<LayerNorm>(o.d_model));
  if (!o.tie_embeddings) head = register_module("head", std::make_shared<Linear>(o.d_model, o.vocab, o.bias));
}

Tensor TransformerLM::forward(const Tensor& idx, std::vector<KVCache>* caches) const {
  HEED_CHECK(idx.dim() == 2, "TransformerLM", "expects (B, T) token ids, got shape {}", shape_str(idx.shape()));
  HEED_CHECK(!caches || caches->size() == blocks->size(), "TransformerLM", "got {} caches for {} layers",
             caches ? caches->size() : 0, blocks->size());
  const int64_t T = idx.size(1);
  const int64_t offset = caches ? (*caches)[0].length() : 0;
  Tensor x = embed_dropout->forward(tok_embed->forward(idx) + pos_embed->forward(T, offset));  // (B,T,C)
  F::AttentionMask causal;
  causal.causal = options_.causal;
  const bool checkpointed = options_.recompute && grad_mode_enabled() && !caches;
  for (size_t i = 0; i < blocks->size(); ++i) {
    if (checkpointed) {
      x = checkpoint([blk = block(i), causal](const std::vector<Tensor>& in) { return blk->forward(in[0], causal); },
                     {x});
    } else {
      x = block(i)->forward(x, causal, caches ? &(*caches)[i] : nullptr);
    }
  }
  x = norm->forward(x);
  return head ? head->forward(x) : matmul(x, tok_embed->weight.t());  // (B,T,V)
}

}  // namespace heed::nn
