// The agent's numbers for a cluster's monitoring: counters, gauges and
// histograms with labels, rendered in Prometheus's text exposition format
// (version 0.0.4, what `promtool check metrics` reads). The agent's loop
// writes (a few calls per event or progress reading, each a map update
// under a mutex); the metrics server's thread renders on a scrape. Neither
// ever waits on the other for longer than one such update or one render.
//
//   Metrics m;
//   m.describe("ddprun_heals_total", Metrics::kCounter, "Failed workers replaced while the others went on.");
//   m.add("ddprun_heals_total", {{"node", "a"}});
//   std::string text = m.render();
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ddprun {

class Metrics {
 public:
  enum Type { kCounter, kGauge, kHistogram };
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Labels every sample carries (job, node), before its own.
  explicit Metrics(Labels common = {});

  // Names a metric before its first sample: its type, help text and, for a
  // histogram, the upper bounds of its buckets (ascending; +Inf is added).
  // A metric described but never sampled is rendered with no samples.
  void describe(const std::string& name, Type type, const std::string& help, std::vector<double> buckets = {});

  // A counter grows by `by` (>= 0).
  void add(const std::string& name, const Labels& labels = {}, double by = 1);
  // A gauge is set.
  void set(const std::string& name, const Labels& labels, double value);
  void set(const std::string& name, double value) { set(name, {}, value); }
  // A gauge's sample goes (a rank that left, a straggler no longer scored).
  void erase(const std::string& name, const Labels& labels);
  // A histogram counts one observation.
  void observe(const std::string& name, const Labels& labels, double value);

  // The value a counter or gauge has (0 if none): for tests and the
  // job-wide view.
  double value(const std::string& name, const Labels& labels = {}) const;

  // Every metric in the text exposition format, in the order described.
  std::string render() const;

 private:
  struct Histogram {
    std::vector<double> counts;  // per bucket (not cumulative), the last +Inf
    double sum = 0;
    double count = 0;
  };
  struct Family {
    Type type = kGauge;
    std::string help;
    std::vector<double> buckets;
    std::map<Labels, double> values;        // counters and gauges
    std::map<Labels, Histogram> histograms;  // histograms
  };
  Family& family(const std::string& name);  // mu_ held; throws for one not described

  Labels common_;
  mutable std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

// A label's value as the exposition format quotes it (\\, \" and \n escaped).
std::string escape_label_value(const std::string& value);
// A sample's value: integers without a fraction, "+Inf", "NaN".
std::string format_sample(double value);

}  // namespace ddprun
