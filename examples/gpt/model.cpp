#include "model.h"

#include <torch/version.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace gpt {

namespace {

// A Linear layer applied as PyTorch's F.linear is: at::linear, which for a
// [B, T, C] input with a bias makes one GEMM with the bias in it (addmm on
// the [B*T, C] view). The C++ frontend's torch::nn::Linear (its
// functional::linear) instead makes a matmul and then adds the bias in a
// second pass over the whole output, in the forward and again in the
// backward: a fifth of GPT-2 small's forward time on an H200.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

}  // namespace

GptConfig GptConfig::preset(const std::string& name) {
  GptConfig c;
  if (name == "tiny") return c;
  if (name == "small") {
    c.vocab = 50304;
    c.context = 1024;
    c.layers = 12;
    c.heads = 12;
    c.dim = 768;
    return c;
  }
  throw std::invalid_argument("--model " + name + ": unknown preset (expected tiny or small)");
}

void GptConfig::validate() const {
  auto positive = [](int64_t v, const char* flag) {
    if (v <= 0) throw std::invalid_argument(std::string(flag) + " " + std::to_string(v) + ": must be positive");
  };
  positive(vocab, "--vocab");
  positive(context, "--context");
  positive(layers, "--layers");
  positive(heads, "--heads");
  positive(dim, "--dim");
  if (dim % heads != 0) {
    throw std::invalid_argument("--heads " + std::to_string(heads) + " does not divide --dim " +
                                std::to_string(dim));
  }
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c)
    : qkv(register_module("qkv", torch::nn::Linear(c.dim, 3 * c.dim))),
      proj(register_module("proj", torch::nn::Linear(c.dim, c.dim))),
      heads_(c.heads) {}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads_;
  // [B, T, 3C] -> three [B, heads, T, hd]
  auto parts = linear(qkv, x).view({B, T, 3, heads_, hd}).permute({2, 0, 3, 1, 4}).unbind(0);
  const torch::Tensor &q = parts[0], &k = parts[1], &v = parts[2];
#if TORCH_VERSION_MAJOR >= 2
  // Fused attention (flash or memory-efficient kernels on CUDA).
  torch::Tensor y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  // LibTorch 1.x has no fused attention: softmax(q k^T / sqrt(hd)) v with
  // the future masked out.
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  torch::Tensor future = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  torch::Tensor y = torch::matmul(torch::softmax(scores, -1), v);
#endif
  return linear(proj, y.transpose(1, 2).contiguous().view({B, T, C}));
}

BlockImpl::BlockImpl(const GptConfig& c)
    : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})))),
      ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})))),
      attn(register_module("attn", CausalSelfAttention(c))),
      fc(register_module("fc", torch::nn::Linear(c.dim, 4 * c.dim))),
      fc_proj(register_module("fc_proj", torch::nn::Linear(4 * c.dim, c.dim))) {}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + attn(ln1(x));
  // GPT-2's GELU is the tanh approximation.
  return x + linear(fc_proj, torch::gelu(linear(fc, ln2(x)), "tanh"));
}

GptImpl::GptImpl(const GptConfig& c) : config_(c) {
  c.validate();
  wte = register_module("wte", torch::nn::Embedding(c.vocab, c.dim));
  wpe = register_module("wpe", torch::nn::Embedding(c.context, c.dim));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));

  // GPT-2's initialisation: weights N(0, 0.02), biases 0, and the two
  // projections that write into the residual stream scaled by 1/sqrt(2L).
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    torch::Tensor t = p.value();
    if (name.find("ln") != std::string::npos) continue;  // LayerNorm: ones and zeros
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      t.zero_();
    } else if (name.find("proj.weight") != std::string::npos) {
      t.normal_(0, residual_std);
    } else {
      t.normal_(0, 0.02);
    }
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  if (T > config_.context) {
    throw std::invalid_argument("sequence of " + std::to_string(T) + " tokens exceeds the context of " +
                                std::to_string(config_.context));
  }
  torch::Tensor pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  torch::Tensor x = wte(tokens) + wpe(pos);
  for (const auto& block : *blocks) x = block->as<Block>()->forward(x);
  // The LM head is the token embedding, transposed (weight tying).
  return torch::nn::functional::linear(ln_f(x), wte->weight);
}

int64_t GptImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

double GptImpl::flops_per_token(int64_t seq_len) const {
  const double n = static_cast<double>(num_parameters() - wpe->weight.numel());
  const double L = config_.layers, H = config_.heads, Q = config_.dim / config_.heads;
  return 6 * n + 12 * L * H * Q * static_cast<double>(seq_len);
}

}  // namespace gpt
