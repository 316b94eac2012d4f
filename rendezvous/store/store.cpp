#include "rendezvous/store/store.h"

#include <string>

namespace ddprun {

StoreTimeout::StoreTimeout(std::string key, std::chrono::milliseconds timeout)
    : StoreError("store: timed out after " + std::to_string(timeout.count()) +
                 " ms waiting for key '" + key + "'"),
      key_(std::move(key)),
      timeout_(timeout) {}

PrefixStore::PrefixStore(std::string prefix, Store& inner)
    : prefix_(std::move(prefix)), inner_(inner) {}

void PrefixStore::set(const std::string& key, std::string_view value) {
  inner_.set(full(key), value);
}

std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_.get(full(key), timeout);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& k : keys) prefixed.push_back(full(k));
  inner_.wait(prefixed, timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return inner_.add(full(key), delta);
}

}  // namespace ddprun
