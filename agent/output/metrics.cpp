#include "agent/output/metrics.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace ddprun {
namespace {

const char* type_name(Metrics::Type t) {
  switch (t) {
    case Metrics::kCounter: return "counter";
    case Metrics::kGauge: return "gauge";
    case Metrics::kHistogram: return "histogram";
  }
  return "untyped";
}

// HELP text escapes only \ and newlines.
std::string escape_help(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// {a="1",b="2"}: the common labels, the sample's, then `extra` (a bucket's le).
std::string label_text(const Metrics::Labels& common, const Metrics::Labels& own,
                       const std::pair<std::string, std::string>* extra = nullptr) {
  std::string out;
  auto put = [&](const std::pair<std::string, std::string>& l) {
    out += out.empty() ? "{" : ",";
    out += l.first + "=\"" + escape_label_value(l.second) + "\"";
  };
  for (const auto& l : common) put(l);
  for (const auto& l : own) put(l);
  if (extra) put(*extra);
  if (!out.empty()) out += "}";
  return out;
}

}  // namespace

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_sample(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  return buf;
}

Metrics::Metrics(Labels common) : common_(std::move(common)) {}

void Metrics::describe(const std::string& name, Type type, const std::string& help, std::vector<double> buckets) {
  std::lock_guard lock(mu_);
  if (families_.count(name)) return;
  Family f;
  f.type = type;
  f.help = help;
  f.buckets = std::move(buckets);
  families_.emplace(name, std::move(f));
  order_.push_back(name);
}

Metrics::Family& Metrics::family(const std::string& name) {
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("metrics: '" + name + "' was not described");
  return it->second;
}

void Metrics::add(const std::string& name, const Labels& labels, double by) {
  std::lock_guard lock(mu_);
  family(name).values[labels] += by;
}

void Metrics::set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  family(name).values[labels] = value;
}

void Metrics::erase(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mu_);
  family(name).values.erase(labels);
}

void Metrics::observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  Family& f = family(name);
  Histogram& h = f.histograms[labels];
  if (h.counts.empty()) h.counts.assign(f.buckets.size() + 1, 0);
  size_t i = 0;
  while (i < f.buckets.size() && value > f.buckets[i]) ++i;
  h.counts[i] += 1;
  h.sum += value;
  h.count += 1;
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto v = it->second.values.find(labels);
  return v == it->second.values.end() ? 0 : v->second;
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);
    out += "# HELP " + name + " " + escape_help(f.help) + "\n";
    out += "# TYPE " + name + " " + type_name(f.type) + "\n";
    for (const auto& [labels, v] : f.values) out += name + label_text(common_, labels) + " " + format_sample(v) + "\n";
    for (const auto& [labels, h] : f.histograms) {
      // Buckets are cumulative in the exposition: each counts the
      // observations at or below its bound.
      double cumulative = 0;
      for (size_t i = 0; i < h.counts.size(); ++i) {
        cumulative += h.counts[i];
        const std::pair<std::string, std::string> le{
            "le", i < f.buckets.size() ? format_sample(f.buckets[i]) : std::string("+Inf")};
        out += name + "_bucket" + label_text(common_, labels, &le) + " " + format_sample(cumulative) + "\n";
      }
      out += name + "_sum" + label_text(common_, labels) + " " + format_sample(h.sum) + "\n";
      out += name + "_count" + label_text(common_, labels) + " " + format_sample(h.count) + "\n";
    }
  }
  return out;
}

}  // namespace ddprun
