#include "ddp/training_state.h"

#include "checkpoint/staged_state.h"
#include "verify/tensor_fingerprint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace ddp {
namespace {

constexpr const char* kFormat = "ddprun-checkpoint/1";

at::Tensor host_copy(const at::Tensor& t) {
  if (!t.defined()) return t;
  return t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

// Copies t into `into` when that is a host tensor of the same shape and
// dtype (no allocation, no page faults), else makes a new copy. Shared: a
// contiguous host tensor is itself.
at::Tensor host_copy_into(const at::Tensor& t, at::Tensor into, StateTensors mode = StateTensors::kCopy) {
  if (!t.defined()) return t;
  if (mode == StateTensors::kShare && t.device().is_cpu() && t.is_contiguous()) return t.detach();
  if (into.defined() && into.device().is_cpu() && into.sizes() == t.sizes() &&
      into.scalar_type() == t.scalar_type() && into.is_contiguous()) {
    into.copy_(t.detach());
    return into;
  }
  return host_copy(t);
}

// The tensor under `key` in m, or an undefined one.
at::Tensor take(std::map<std::string, at::Tensor>* m, const std::string& key) {
  if (!m) return at::Tensor();
  auto it = m->find(key);
  return it == m->end() ? at::Tensor() : std::move(it->second);
}

// The optimizer's state map is keyed by the parameter's TensorImpl, as a
// string in LibTorch 1.13 and as a pointer in later versions.
template <typename Map>
typename Map::key_type state_key(const Map&, const at::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    // LibTorch 1.13 printed the pointer into an ostream (c10::guts::to_string,
    // gone in 2.x): "0x" and hex digits.
    std::ostringstream key;
    key << static_cast<const void*>(p.unsafeGetTensorImpl());
    return key.str();
  } else {
    return reinterpret_cast<Key>(p.unsafeGetTensorImpl());
  }
}

std::vector<at::Tensor> optimizer_params(torch::optim::Optimizer& opt) {
  std::vector<at::Tensor> out;
  for (auto& g : opt.param_groups()) {
    for (auto& p : g.params()) out.push_back(p);
  }
  return out;
}

template <typename AdamState>
void capture_adam(const AdamState& s, std::map<std::string, at::Tensor>& out,
                  std::map<std::string, at::Tensor>* reuse, StateTensors mode) {
  out["step"] = at::tensor(s.step(), at::kLong);
  out["exp_avg"] = host_copy_into(s.exp_avg(), take(reuse, "exp_avg"), mode);
  out["exp_avg_sq"] = host_copy_into(s.exp_avg_sq(), take(reuse, "exp_avg_sq"), mode);
  if (s.max_exp_avg_sq().defined()) {
    out["max_exp_avg_sq"] = host_copy_into(s.max_exp_avg_sq(), take(reuse, "max_exp_avg_sq"), mode);
  }
}

// The optimizer's own copy of a state tensor on p's device; shared: the
// tensor itself where it is there already.
at::Tensor adopt(const at::Tensor& t, const at::Tensor& p, StateTensors mode) {
  if (mode == StateTensors::kShare && t.device() == p.device()) return t;
  return t.to(p.device()).clone();
}

template <typename AdamState>
std::unique_ptr<AdamState> restore_adam(const std::map<std::string, at::Tensor>& in,
                                        const at::Tensor& p, StateTensors mode) {
  auto s = std::make_unique<AdamState>();
  s->step(in.at("step").template item<int64_t>());
  s->exp_avg(adopt(in.at("exp_avg"), p, mode));
  s->exp_avg_sq(adopt(in.at("exp_avg_sq"), p, mode));
  if (in.count("max_exp_avg_sq")) s->max_exp_avg_sq(adopt(in.at("max_exp_avg_sq"), p, mode));
  return s;
}

std::string kind_of(torch::optim::Optimizer& opt) {
  if (dynamic_cast<torch::optim::SGD*>(&opt)) return "sgd";
  if (dynamic_cast<torch::optim::AdamW*>(&opt)) return "adamw";
  if (dynamic_cast<torch::optim::Adam*>(&opt)) return "adam";
  return "archive";
}

OptimizerState capture_optimizer(torch::optim::Optimizer& opt, OptimizerState* reuse, StateTensors mode) {
  OptimizerState o;
  o.kind = kind_of(opt);
  for (auto& g : opt.param_groups()) o.lr.push_back(g.options().get_lr());
  if (o.kind == "archive") {
    // Unknown optimizer: LibTorch's own serialisation, done now (slower).
    torch::serialize::OutputArchive archive;
    opt.save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    o.archive = bytes.str();
    return o;
  }
  auto& state = opt.state();
  const auto params = optimizer_params(opt);
  const bool can_reuse = reuse && reuse->kind == o.kind && reuse->params.size() == params.size();
  for (size_t i = 0; i < params.size(); ++i) {
    std::map<std::string, at::Tensor> entry;
    auto* old = can_reuse ? &reuse->params[i] : nullptr;
    auto it = state.find(state_key(state, params[i]));
    if (it != state.end()) {
      if (o.kind == "sgd") {
        const auto& s = static_cast<const torch::optim::SGDParamState&>(*it->second);
        if (s.momentum_buffer().defined()) {
          entry["momentum_buffer"] = host_copy_into(s.momentum_buffer(), take(old, "momentum_buffer"), mode);
        }
      } else if (o.kind == "adamw") {
        capture_adam(static_cast<const torch::optim::AdamWParamState&>(*it->second), entry, old, mode);
      } else {
        capture_adam(static_cast<const torch::optim::AdamParamState&>(*it->second), entry, old, mode);
      }
    }
    o.params.push_back(std::move(entry));
  }
  return o;
}

void apply_optimizer(const OptimizerState& o, torch::optim::Optimizer& opt, StateTensors mode) {
  const std::string kind = kind_of(opt);
  if (kind != o.kind) {
    throw std::runtime_error("ddp: the checkpoint holds " + o.kind + " optimizer state but this run uses " +
                             kind);
  }
  auto& groups = opt.param_groups();
  if (o.lr.size() != groups.size()) {
    throw std::runtime_error("ddp: the checkpoint has " + std::to_string(o.lr.size()) +
                             " parameter groups, the optimizer " + std::to_string(groups.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(o.lr[g]);
  if (kind == "archive") {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(o.archive);
    archive.load_from(bytes);
    opt.load(archive);
    return;
  }
  const auto params = optimizer_params(opt);
  if (params.size() != o.params.size()) {
    throw std::runtime_error("ddp: the checkpoint has optimizer state for " + std::to_string(o.params.size()) +
                             " parameters, the optimizer has " + std::to_string(params.size()));
  }
  auto& state = opt.state();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& entry = o.params[i];
    const auto key = state_key(state, params[i]);
    if (entry.empty()) {
      state.erase(key);
      continue;
    }
    if (kind == "sgd") {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(adopt(entry.at("momentum_buffer"), params[i], mode));
      state[key] = std::move(s);
    } else if (kind == "adamw") {
      state[key] = restore_adam<torch::optim::AdamWParamState>(entry, params[i], mode);
    } else {
      state[key] = restore_adam<torch::optim::AdamParamState>(entry, params[i], mode);
    }
  }
}

c10::impl::GenericDict tensor_dict(const std::map<std::string, at::Tensor>& m) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [k, v] : m) d.insert(k, v);
  return d;
}

std::map<std::string, at::Tensor> tensor_map(const c10::IValue& v) {
  std::map<std::string, at::Tensor> out;
  for (const auto& e : v.toGenericDict()) out[e.key().toStringRef()] = e.value().toTensor();
  return out;
}

at::Tensor bytes_tensor(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

// torch::pickle_save's file (the zip torch.save writes), with the dicts and
// lists pickled as plain ones. pickle_save tags each with its type through
// torch.jit._pickle.restore_type_tag, a global that torch.load's safe
// default (weights_only=True, PyTorch 2.6+) refuses; untagged, the file
// holds only what that default allows: dicts, lists, strings, numbers and
// tensors. LibTorch reads both forms.
void save_untagged(const c10::IValue& value, const ByteSink& sink) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* buf, size_t n) { pickled.insert(pickled.end(), buf, buf + n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  // The zip writer hands over each tensor's record straight from the
  // tensor's memory (host tensors are not copied on the way). An exception
  // must not cross it (miniz is C, and its destructor writes again): the
  // sink's first one is kept, what follows is not written, and it is
  // thrown once the writer is done.
  std::exception_ptr failed;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* buf, size_t n) {
    if (failed) return n;
    try {
      sink(buf, n);
    } catch (...) {
      failed = std::current_exception();
    }
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

TrainingState capture_state(const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            int64_t step, int64_t epoch, int64_t sampler_position, TrainingState* reuse,
                            StateTensors tensors) {
  at::NoGradGuard no_grad;
  TrainingState s;
  s.step = step;
  s.epoch = epoch;
  s.sampler_position = sampler_position;
  auto* old_model = reuse ? &reuse->model : nullptr;
  for (const auto& p : model.named_parameters(true)) {
    s.model[p.key()] = host_copy_into(p.value(), take(old_model, p.key()), tensors);
  }
  for (const auto& b : model.named_buffers(true)) {
    s.model[b.key()] = host_copy_into(b.value(), take(old_model, b.key()), tensors);
  }
  s.optimizer = capture_optimizer(optimizer, reuse ? &reuse->optimizer : nullptr, tensors);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.rng = gen.get_state();
  }
  return s;
}

StagedState refer_to_state(const torch::nn::Module& model, torch::optim::Optimizer& optimizer, int64_t step,
                           int64_t epoch, int64_t sampler_position, TrainingState* reuse) {
  at::NoGradGuard no_grad;
  StagedState staged;
  // Host tensors as themselves (others, a GPU's, are copied here).
  staged.state = capture_state(model, optimizer, step, epoch, sampler_position, nullptr, StateTensors::kShare);
  auto* old_model = reuse ? &reuse->model : nullptr;
  for (const auto& b : model.named_buffers(true)) {
    at::Tensor& t = staged.state.model[b.key()];
    t = host_copy_into(t, take(old_model, b.key()));
  }
  for (const auto& p : model.named_parameters(true)) staged.parameters.push_back(p.key());
  return staged;
}

void stage_state(StagedState& staged, TrainingState* reuse) {
  at::NoGradGuard no_grad;
  TrainingState& s = staged.state;
  auto* old_model = reuse ? &reuse->model : nullptr;
  for (const auto& name : staged.parameters) {
    at::Tensor& t = s.model.at(name);
    t = host_copy_into(t, take(old_model, name));
  }
  OptimizerState* old = reuse ? &reuse->optimizer : nullptr;
  const bool can_reuse = old && old->kind == s.optimizer.kind && old->params.size() == s.optimizer.params.size();
  for (size_t i = 0; i < s.optimizer.params.size(); ++i) {
    for (auto& [key, t] : s.optimizer.params[i]) {
      if (key == "step") continue;  // made afresh by the capture
      t = host_copy_into(t, take(can_reuse ? &old->params[i] : nullptr, key));
    }
  }
}

void apply_state(const TrainingState& s, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                 StateTensors tensors) {
  at::NoGradGuard no_grad;
  auto put = [&](const std::string& name, at::Tensor& target) {
    auto it = s.model.find(name);
    if (it == s.model.end()) {
      throw std::runtime_error("ddp: the checkpoint has no tensor '" + name + "' for this model");
    }
    if (it->second.sizes() != target.sizes()) {
      std::ostringstream msg;
      msg << "ddp: checkpoint tensor '" << name << "' has shape " << it->second.sizes()
          << ", the model's has " << target.sizes();
      throw std::runtime_error(msg.str());
    }
    if (target.data_ptr() == it->second.data_ptr()) return;  // the module's own (a heal received it in place)
    target.copy_(it->second);
  };
  for (auto& p : model.named_parameters(true)) put(p.key(), p.value());
  for (auto& b : model.named_buffers(true)) put(b.key(), b.value());
  apply_optimizer(s.optimizer, optimizer, tensors);
  if (s.rng.defined()) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(s.rng);
  }
}

uint64_t state_fingerprint(const TrainingState& s) {
  std::vector<at::Tensor> tensors;
  for (const auto& [name, t] : s.model) tensors.push_back(t);
  for (const auto& per_param : s.optimizer.params) {
    for (const auto& [key, t] : per_param) tensors.push_back(t);
  }
  return fingerprint_of_all(fingerprints_of(tensors));
}

void encode_state_to(const TrainingState& s, const ByteSink& sink) {
  c10::impl::GenericDict opt(c10::StringType::get(), c10::AnyType::get());
  opt.insert("kind", s.optimizer.kind);
  // A float64 tensor: a List<double> pickles as torch.jit._pickle.build_doublelist,
  // and a plain list of floats is refused by PyTorch 1.13's weights_only.
  opt.insert("lr", at::tensor(s.optimizer.lr, at::kDouble));
  c10::impl::GenericList per_param(c10::DictType::create(c10::StringType::get(), c10::TensorType::get()));
  for (const auto& entry : s.optimizer.params) per_param.push_back(tensor_dict(entry));
  opt.insert("state", per_param);
  opt.insert("archive", bytes_tensor(s.optimizer.archive));

  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format", std::string(kFormat));
  d.insert("step", s.step);
  d.insert("epoch", s.epoch);
  d.insert("sampler_position", s.sampler_position);
  d.insert("model", tensor_dict(s.model));
  d.insert("optimizer", opt);
  d.insert("rng", s.rng.defined() ? s.rng : at::empty({0}, at::kByte));
  d.insert("fingerprint", static_cast<int64_t>(state_fingerprint(s)));
  save_untagged(d, sink);
}

std::vector<char> encode_state(const TrainingState& s) {
  std::vector<char> file;
  encode_state_to(s, [&](const void* p, size_t n) {
    const char* bytes = static_cast<const char*>(p);
    file.insert(file.end(), bytes, bytes + n);
  });
  return file;
}

TrainingState decode_state(const std::vector<char>& bytes) {
  c10::IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("not a readable checkpoint: ") + e.what());
  }
  if (!v.isGenericDict()) throw std::runtime_error("not a ddprun checkpoint (not a dict)");
  auto d = v.toGenericDict();
  if (!d.contains("format") || d.at("format").toStringRef() != kFormat) {
    throw std::runtime_error(std::string("not a ddprun checkpoint (format is not ") + kFormat + ")");
  }
  TrainingState s;
  s.step = d.at("step").toInt();
  s.epoch = d.at("epoch").toInt();
  s.sampler_position = d.at("sampler_position").toInt();
  s.model = tensor_map(d.at("model"));
  auto opt = d.at("optimizer").toGenericDict();
  s.optimizer.kind = opt.at("kind").toStringRef();
  // A float64 tensor; files written before 2026-11 hold a List<double>.
  const c10::IValue lr = opt.at("lr");
  if (lr.isTensor()) {
    at::Tensor t = lr.toTensor().to(at::kDouble).contiguous();
    s.optimizer.lr.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  } else {
    for (double x : lr.toDoubleList()) s.optimizer.lr.push_back(x);
  }
  for (const auto& entry : opt.at("state").toList()) s.optimizer.params.push_back(tensor_map(entry));
  at::Tensor archive = opt.at("archive").toTensor().contiguous();
  s.optimizer.archive.assign(static_cast<const char*>(archive.data_ptr()), archive.numel());
  s.rng = d.at("rng").toTensor();
  if (s.rng.numel() == 0) s.rng = at::Tensor();
  if (d.contains("fingerprint")) {
    const auto recorded = static_cast<uint64_t>(d.at("fingerprint").toInt());
    const uint64_t found = state_fingerprint(s);
    if (found != recorded) {
      char text[160];
      std::snprintf(text, sizeof(text), "its tensors' fingerprint is %016llx, not the %016llx it was written with",
                    static_cast<unsigned long long>(found), static_cast<unsigned long long>(recorded));
      throw std::runtime_error(text);
    }
  }
  return s;
}

}  // namespace ddp
