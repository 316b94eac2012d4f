// A GPT-2-like decoder-only language model (Radford et al. 2019; the shape
// nanoGPT and llm.c train): token + learned position embeddings, N blocks of
// pre-LayerNorm causal self-attention and a GELU MLP (4x wide), a final
// LayerNorm, and an LM head that shares the token embedding's weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace gpt {

struct GptConfig {
  int64_t vocab = 256;   // tokens (byte-level data needs 256)
  int64_t context = 64;  // longest sequence (positions)
  int64_t layers = 2;
  int64_t heads = 2;
  int64_t dim = 64;      // embedding width; heads must divide it

  // "tiny" (CPU tests: 2 layers, 2 heads, 64 wide, 64 context, vocab 256) or
  // "small" (GPT-2 small: 12 layers, 12 heads, 768 wide, 1024 context, vocab
  // 50304 = 50257 padded to a multiple of 128 as llm.c and nanoGPT do).
  // Throws std::invalid_argument naming the preset.
  static GptConfig preset(const std::string& name);
  // Throws std::invalid_argument naming the offending field.
  void validate() const;
};

// Multi-head causal self-attention with one fused q/k/v projection.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, C] -> [B, T, C]

  torch::nn::Linear qkv{nullptr}, proj{nullptr};

 private:
  int64_t heads_;
};
TORCH_MODULE(CausalSelfAttention);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptConfig& c);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  torch::nn::Linear fc{nullptr}, fc_proj{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptConfig& c);
  // tokens [B, T] (int64, T <= context) -> logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);
  const GptConfig& config() const { return config_; }

  // Every parameter once (the LM head is the token embedding).
  int64_t num_parameters() const;
  // Model FLOPs per token of one training step (forward + backward), as in
  // PaLM's appendix B and llm.c: 6 N + 12 L H Q T, with N the parameters
  // without the position embedding (nanoGPT's convention), L layers, H heads,
  // Q the head width and T the sequence length used.
  double flops_per_token(int64_t seq_len) const;

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  GptConfig config_;
};
TORCH_MODULE(Gpt);

}  // namespace gpt
