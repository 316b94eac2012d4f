// The agent's view of rank 0's progress: rates from successive reports,
// the ETA, and the line that shows them (unknown fields left out).
#include <gtest/gtest.h>

#include "agent/output/progress.h"

namespace ddprun {
namespace {

using channel::Progress;

constexpr int64_t kSecond = 1000000000;

Progress report(int64_t step, int64_t samples, int64_t at_ns) {
  Progress p;
  p.step = step;
  p.total_steps = 1000;
  p.samples = samples;
  p.updated_ns = at_ns;
  p.flags = Progress::kHasStep | Progress::kHasTotalSteps;
  return p;
}

TEST(ProgressFormat, EveryFieldKnown) {
  Progress p = report(120, 0, 0);
  p.epoch = 1;
  p.loss = 0.5321;
  p.flags |= Progress::kHasEpoch | Progress::kHasLoss;
  EXPECT_EQ(format_progress(p, ProgressRates{2300.0, 62.0}),
            "step 120/1000 \u00b7 epoch 2 \u00b7 loss 0.5321 \u00b7 2.3k samples/s \u00b7 ETA 1m02s");
}

TEST(ProgressFormat, UnknownFieldsAreLeftOut) {
  Progress p;
  EXPECT_EQ(format_progress(p, {}), "");  // nothing reported yet
  p.step = 7;
  p.total_steps = 99;  // no kHasTotalSteps: not shown
  p.epoch = 3;         // no kHasEpoch
  p.flags = Progress::kHasStep;
  EXPECT_EQ(format_progress(p, {}), "step 7");
  p.flags = Progress::kHasLoss;
  p.loss = 2.0;
  EXPECT_EQ(format_progress(p, ProgressRates{12.0, std::nullopt}), "loss 2 \u00b7 12 samples/s");
}

TEST(ProgressFormat, RatesAndDurations) {
  EXPECT_EQ(format_rate(0.5), "0.5");
  EXPECT_EQ(format_rate(850), "850");
  EXPECT_EQ(format_rate(2345), "2.3k");
  EXPECT_EQ(format_rate(45678), "46k");
  EXPECT_EQ(format_rate(1.5e6), "1.5M");
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(62), "1m02s");
  EXPECT_EQ(format_duration(2 * 3600 + 5 * 60 + 30), "2h05m");
  EXPECT_EQ(format_duration(-3), "0s");
}

TEST(ProgressMeter, RatesComeFromSuccessiveReports) {
  ProgressMeter m;
  EXPECT_FALSE(m.add(Progress{}));  // nothing reported: no report
  EXPECT_TRUE(m.add(report(100, 6400, 10 * kSecond)));
  EXPECT_FALSE(m.rates().samples_per_s);  // one report: no rate yet
  EXPECT_FALSE(m.rates().eta_s);
  EXPECT_FALSE(m.add(report(100, 6400, 10 * kSecond)));  // the same report again
  // 10 steps of 64 samples in 2 s: 320 samples/s, 5 steps/s, 890 steps left.
  EXPECT_TRUE(m.add(report(110, 7040, 12 * kSecond)));
  ASSERT_TRUE(m.rates().samples_per_s);
  EXPECT_DOUBLE_EQ(*m.rates().samples_per_s, 320);
  ASSERT_TRUE(m.rates().eta_s);
  EXPECT_DOUBLE_EQ(*m.rates().eta_s, 890 / 5.0);
  // Smoothed: a step twice as slow moves the rate, does not replace it.
  m.add(report(120, 7680, 16 * kSecond));
  EXPECT_DOUBLE_EQ(*m.rates().samples_per_s, 0.7 * 320 + 0.3 * 160);
}

TEST(ProgressMeter, NoTotalNoEta) {
  ProgressMeter m;
  Progress a = report(1, 0, kSecond), b = report(2, 0, 2 * kSecond);
  a.flags = b.flags = Progress::kHasStep;
  m.add(a);
  m.add(b);
  EXPECT_FALSE(m.rates().eta_s);
  EXPECT_FALSE(m.rates().samples_per_s);  // samples never moved
}

}  // namespace
}  // namespace ddprun
