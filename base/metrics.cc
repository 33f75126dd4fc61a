#include "base/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace informerd {
namespace {

void AtomicAdd(std::atomic<double>& target, double by) {
  double cur = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(cur, cur + by, std::memory_order_relaxed)) {
  }
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}

std::string EscapeLabelValue(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="x",b="y"}`, with `extra` appended (for histogram `le`); empty string when no labels.
std::string LabelText(const Labels& labels, const std::pair<std::string, std::string>* extra) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::pair<std::string, std::string>& l) {
    if (!first) out += ",";
    first = false;
    absl::StrAppend(&out, l.first, "=\"", EscapeLabelValue(l.second), "\"");
  };
  for (const auto& l : labels) add(l);
  if (extra != nullptr) add(*extra);
  out += "}";
  return out;
}

}  // namespace

void Counter::Inc(double by) { AtomicAdd(value_, by); }
void Gauge::Add(double by) { AtomicAdd(value_, by); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      buckets_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

MetricsRegistry::Family* MetricsRegistry::FamilyLocked(absl::string_view name,
                                                       absl::string_view help, Type type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{type, std::string(help), {}, {}, {}}).first;
  }
  return it->second.type == type ? &it->second : nullptr;
}

Counter* MetricsRegistry::GetCounter(absl::string_view name, absl::string_view help,
                                     const Labels& labels) {
  return SharedCounter(name, help, labels).get();
}

Gauge* MetricsRegistry::GetGauge(absl::string_view name, absl::string_view help,
                                 const Labels& labels) {
  return SharedGauge(name, help, labels).get();
}

Histogram* MetricsRegistry::GetHistogram(absl::string_view name, absl::string_view help,
                                         const Labels& labels,
                                         const std::vector<double>& upper_bounds) {
  return SharedHistogram(name, help, labels, upper_bounds).get();
}

std::shared_ptr<Counter> MetricsRegistry::SharedCounter(absl::string_view name,
                                                        absl::string_view help,
                                                        const Labels& labels) {
  MutexLock lock(&mu_);
  Family* family = FamilyLocked(name, help, Type::kCounter);
  if (family == nullptr) return nullptr;
  auto& slot = family->counters[labels];
  if (slot == nullptr) slot = std::make_shared<Counter>();
  return slot;
}

std::shared_ptr<Gauge> MetricsRegistry::SharedGauge(absl::string_view name, absl::string_view help,
                                                    const Labels& labels) {
  MutexLock lock(&mu_);
  Family* family = FamilyLocked(name, help, Type::kGauge);
  if (family == nullptr) return nullptr;
  auto& slot = family->gauges[labels];
  if (slot == nullptr) slot = std::make_shared<Gauge>();
  return slot;
}

std::shared_ptr<Histogram> MetricsRegistry::SharedHistogram(
    absl::string_view name, absl::string_view help, const Labels& labels,
    const std::vector<double>& upper_bounds) {
  MutexLock lock(&mu_);
  Family* family = FamilyLocked(name, help, Type::kHistogram);
  if (family == nullptr) return nullptr;
  auto& slot = family->histograms[labels];
  if (slot == nullptr) {
    std::vector<double> sorted = upper_bounds;
    std::sort(sorted.begin(), sorted.end());
    slot = std::make_shared<Histogram>(std::move(sorted));
  }
  return slot;
}

namespace {

bool Includes(const Labels& labels, const Labels& match) {
  for (const auto& m : match) {
    if (std::find(labels.begin(), labels.end(), m) == labels.end()) return false;
  }
  return true;
}

template <typename Map>
size_t EraseMatching(Map& series, const Labels& match) {
  size_t n = 0;
  for (auto it = series.begin(); it != series.end();) {
    if (Includes(it->first, match)) {
      it = series.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

}  // namespace

size_t MetricsRegistry::RemoveSeries(absl::string_view name, const Labels& match) {
  MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  Family& family = it->second;
  const size_t n = EraseMatching(family.counters, match) + EraseMatching(family.gauges, match) +
                   EraseMatching(family.histograms, match);
  if (family.counters.empty() && family.gauges.empty() && family.histograms.empty()) {
    families_.erase(it);
  }
  return n;
}

std::string MetricsRegistry::Render() const {
  MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    const char* type = family.type == Type::kCounter ? "counter"
                       : family.type == Type::kGauge ? "gauge"
                                                     : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family.help), "\n");
    absl::StrAppend(&out, "# TYPE ", name, " ", type, "\n");
    for (const auto& [labels, c] : family.counters) {
      absl::StrAppend(&out, name, LabelText(labels, nullptr), " ", FormatValue(c->Value()), "\n");
    }
    for (const auto& [labels, g] : family.gauges) {
      absl::StrAppend(&out, name, LabelText(labels, nullptr), " ", FormatValue(g->Value()), "\n");
    }
    for (const auto& [labels, h] : family.histograms) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= h->upper_bounds().size(); ++i) {
        cumulative += h->BucketCount(i);
        std::pair<std::string, std::string> le{
            "le", i < h->upper_bounds().size() ? FormatValue(h->upper_bounds()[i]) : "+Inf"};
        absl::StrAppend(&out, name, "_bucket", LabelText(labels, &le), " ", cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(labels, nullptr), " ", FormatValue(h->Sum()),
                      "\n");
      absl::StrAppend(&out, name, "_count", LabelText(labels, nullptr), " ", h->Count(), "\n");
    }
  }
  return out;
}

std::vector<MetricsRegistry::HistogramReading> MetricsRegistry::ReadHistograms(
    absl::string_view name) const {
  std::vector<HistogramReading> readings;
  MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != Type::kHistogram) return readings;
  for (const auto& [labels, h] : it->second.histograms) {
    HistogramReading& r = readings.emplace_back();
    r.labels = labels;
    r.upper_bounds = h->upper_bounds();
    r.buckets.reserve(h->upper_bounds().size() + 1);
    for (size_t i = 0; i <= h->upper_bounds().size(); ++i) r.buckets.push_back(h->BucketCount(i));
  }
  return readings;
}

}  // namespace informerd
