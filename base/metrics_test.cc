#include "base/metrics.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace informerd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsRegistryTest, RendersCountersAndGaugesInPrometheusTextFormat) {
  MetricsRegistry registry;
  registry.GetCounter("adds_total", "Adds.", {{"name", "pods"}})->Inc(3);
  registry.GetGauge("depth", "Depth.", {{"name", "pods"}})->Set(2);
  std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("# HELP adds_total Adds.\n# TYPE adds_total counter\n"
                              "adds_total{name=\"pods\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE depth gauge\ndepth{name=\"pods\"} 2\n"));
}

TEST(MetricsRegistryTest, SameNameAndLabelsReturnTheSameSeries) {
  MetricsRegistry registry;
  Counter* a = registry.GetCounter("c", "h", {{"name", "x"}});
  Counter* b = registry.GetCounter("c", "h", {{"name", "x"}});
  Counter* other = registry.GetCounter("c", "h", {{"name", "y"}});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
}

TEST(MetricsRegistryTest, AFamilyKeepsTheTypeOfItsFirstUse) {
  MetricsRegistry registry;
  ASSERT_NE(registry.GetCounter("m", "h", {}), nullptr);
  EXPECT_EQ(registry.GetGauge("m", "h", {}), nullptr);
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  MetricsRegistry registry;
  Histogram* h = registry.GetHistogram("lat", "Latency.", {{"name", "q"}}, {0.1, 1, 10});
  h->Observe(0.05);
  h->Observe(0.1);  // le is inclusive
  h->Observe(5);
  h->Observe(100);
  std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("lat_bucket{name=\"q\",le=\"0.10000000000000001\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("lat_bucket{name=\"q\",le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("lat_bucket{name=\"q\",le=\"10\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("lat_bucket{name=\"q\",le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("lat_sum{name=\"q\"} 105.15000000000001\n"));
  EXPECT_THAT(text, HasSubstr("lat_count{name=\"q\"} 4\n"));
}

TEST(MetricsRegistryTest, ReadHistogramsGivesEachSeriesBuckets) {
  MetricsRegistry registry;
  registry.GetHistogram("lat", "Latency.", {{"name", "a"}}, {0.1, 1})->Observe(0.5);
  Histogram* b = registry.GetHistogram("lat", "Latency.", {{"name", "b"}}, {0.1, 1});
  b->Observe(0.05);
  b->Observe(7);
  registry.GetCounter("adds", "Adds.", {})->Inc();
  std::vector<MetricsRegistry::HistogramReading> r = registry.ReadHistograms("lat");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].labels, (Labels{{"name", "a"}}));
  EXPECT_EQ(r[0].upper_bounds, (std::vector<double>{0.1, 1}));
  EXPECT_EQ(r[0].buckets, (std::vector<uint64_t>{0, 1, 0}));
  EXPECT_EQ(r[1].buckets, (std::vector<uint64_t>{1, 0, 1}));
  EXPECT_TRUE(registry.ReadHistograms("adds").empty());
  EXPECT_TRUE(registry.ReadHistograms("missing").empty());
}

TEST(MetricsRegistryTest, LabelValuesAreEscaped) {
  MetricsRegistry registry;
  registry.GetGauge("g", "h", {{"name", "a\"b\\c\nd"}})->Set(1);
  EXPECT_THAT(registry.Render(), HasSubstr("g{name=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(MetricsRegistryTest, ConcurrentIncrementsAreAllCounted) {
  MetricsRegistry registry;
  Counter* c = registry.GetCounter("c", "h", {});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([c] {
      for (int i = 0; i < 10000; ++i) c->Inc();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Value(), 40000);
}

TEST(MetricsRegistryTest, RemoveSeriesDropsTheMatchingSeriesAndAnEmptyFamily) {
  MetricsRegistry registry;
  registry.GetCounter("c", "h", {{"name", "x"}, {"handler", "a"}})->Inc();
  registry.GetCounter("c", "h", {{"name", "x"}, {"handler", "b"}})->Inc();
  registry.GetCounter("c", "h", {{"name", "y"}, {"handler", "a"}})->Inc();
  registry.GetHistogram("h_seconds", "h", {{"name", "x"}}, {1, 2});
  EXPECT_EQ(registry.RemoveSeries("c", {{"name", "x"}}), 2);
  EXPECT_EQ(registry.RemoveSeries("h_seconds", {{"name", "x"}}), 1);
  EXPECT_EQ(registry.RemoveSeries("absent", {{"name", "x"}}), 0);
  const std::string text = registry.Render();
  EXPECT_THAT(text, Not(HasSubstr("name=\"x\"")));
  EXPECT_THAT(text, HasSubstr("c{name=\"y\",handler=\"a\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("h_seconds")));
  // The same labels again: a new series, from zero.
  EXPECT_EQ(registry.GetCounter("c", "h", {{"name", "x"}, {"handler", "a"}})->Value(), 0);
}

TEST(ExponentialBucketsTest, MultipliesFromTheStart) {
  EXPECT_EQ(ExponentialBuckets(1, 10, 3), (std::vector<double>{1, 10, 100}));
}

}  // namespace
}  // namespace informerd
