#include "data_parallel/bucket_plan.h"

#include <algorithm>
#include <map>

namespace ddp {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params,
                                                size_t first_cap_bytes, size_t cap_bytes) {
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    bool first = true;  // the key's first bucket uses the first cap
  };
  struct Closed {
    size_t started_at;  // position in the walk of its first member
    std::vector<size_t> members;
  };
  std::map<std::string, Open> open;
  std::map<std::string, size_t> started;  // walk position of each open bucket's first member
  std::vector<Closed> closed;

  // Walk from the last registered parameter to the first.
  for (size_t walk = 0; walk < params.size(); ++walk) {
    const size_t i = params.size() - 1 - walk;
    Open& b = open[params[i].key];
    if (b.members.empty()) started[params[i].key] = walk;
    b.members.push_back(i);
    b.bytes += params[i].bytes;
    if (b.bytes >= (b.first ? first_cap_bytes : cap_bytes)) {
      closed.push_back({started[params[i].key], std::move(b.members)});
      b.members.clear();
      b.bytes = 0;
      b.first = false;
    }
  }
  for (auto& [key, b] : open) {
    if (!b.members.empty()) closed.push_back({started[key], std::move(b.members)});
  }
  // Launch order: the bucket whose first gradient comes first goes first.
  std::sort(closed.begin(), closed.end(),
            [](const Closed& a, const Closed& b) { return a.started_at < b.started_at; });
  std::vector<std::vector<size_t>> out;
  for (auto& c : closed) out.push_back(std::move(c.members));
  return out;
}

}  // namespace ddp
