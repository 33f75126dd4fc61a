#include "server/service/queue_spec.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/informer/field_path.h"
#include "server/informer/label_selector.h"
#include "server/service/names.h"
#include "server/service/status.h"

namespace informerd::service {
namespace {

using workqueue::RateLimiter;

// max_of may nest; bound it so a hostile spec cannot recurse deeply.
constexpr int kMaxLimiterDepth = 8;
constexpr int kMaxFieldPaths = 32;
constexpr absl::string_view kClusterSeparator = "//";

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return InvalidField(field, why);
}

absl::Status CheckDelay(absl::string_view field, int64_t ms, bool positive) {
  if (positive ? ms <= 0 : ms < 0) return Invalid(field, positive ? "must be > 0" : "must be >= 0");
  if (ms > kMaxDelayMs) return Invalid(field, absl::StrCat("must be at most ", kMaxDelayMs));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RateLimiter>> BuildLimiter(const v1::RateLimiterSpec& spec,
                                                          const std::string& field, int depth,
                                                          Clock* clock) {
  if (depth > kMaxLimiterDepth) return Invalid(field, "max_of nested too deeply");
  switch (spec.kind_case()) {
    case v1::RateLimiterSpec::KIND_NOT_SET:
    case v1::RateLimiterSpec::kDefaultController:
      return workqueue::DefaultControllerRateLimiter(clock);
    case v1::RateLimiterSpec::kExponential: {
      const auto& e = spec.exponential();
      const std::string f = field + ".exponential";
      if (auto s = CheckDelay(f + ".base_delay_ms", e.base_delay_ms(), true); !s.ok()) return s;
      if (auto s = CheckDelay(f + ".max_delay_ms", e.max_delay_ms(), true); !s.ok()) return s;
      if (e.max_delay_ms() < e.base_delay_ms()) {
        return Invalid(f + ".max_delay_ms", "must be >= base_delay_ms");
      }
      auto l = workqueue::ItemExponentialFailureRateLimiter::Create(
          absl::Milliseconds(e.base_delay_ms()), absl::Milliseconds(e.max_delay_ms()));
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
    case v1::RateLimiterSpec::kFastSlow: {
      const auto& fs = spec.fast_slow();
      const std::string f = field + ".fast_slow";
      if (auto s = CheckDelay(f + ".fast_delay_ms", fs.fast_delay_ms(), false); !s.ok()) return s;
      if (auto s = CheckDelay(f + ".slow_delay_ms", fs.slow_delay_ms(), false); !s.ok()) return s;
      if (fs.max_fast_attempts() < 0) return Invalid(f + ".max_fast_attempts", "must be >= 0");
      auto l = workqueue::ItemFastSlowRateLimiter::Create(absl::Milliseconds(fs.fast_delay_ms()),
                                                         absl::Milliseconds(fs.slow_delay_ms()),
                                                         fs.max_fast_attempts());
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
    case v1::RateLimiterSpec::kBucket: {
      const auto& b = spec.bucket();
      const std::string f = field + ".bucket";
      if (!(b.qps() > 0) || !std::isfinite(b.qps())) return Invalid(f + ".qps", "must be > 0");
      if (b.burst() < 1) return Invalid(f + ".burst", "must be >= 1");
      auto l = workqueue::BucketRateLimiter::Create(b.qps(), b.burst(), clock);
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
    case v1::RateLimiterSpec::kMaxOf: {
      const std::string f = field + ".max_of.limiters";
      if (spec.max_of().limiters().empty()) return Invalid(f, "at least one limiter required");
      std::vector<std::unique_ptr<RateLimiter>> limiters;
      for (int i = 0; i < spec.max_of().limiters_size(); ++i) {
        auto l = BuildLimiter(spec.max_of().limiters(i), absl::StrCat(f, "[", i, "]"), depth + 1,
                              clock);
        if (!l.ok()) return l.status();
        limiters.push_back(std::move(*l));
      }
      auto l = workqueue::MaxOfRateLimiter::Create(std::move(limiters));
      if (!l.ok()) return Invalid(f, l.status().message());
      return std::unique_ptr<RateLimiter>(std::move(*l));
    }
  }
  return Invalid(field, "unknown rate limiter kind");
}

absl::Status ValidatePredicate(const v1::Predicate& p, const std::string& f) {
  switch (p.kind_case()) {
    case v1::Predicate::kGenerationChanged:
    case v1::Predicate::kLabelsChanged:
    case v1::Predicate::kAnnotationsChanged:
      return absl::OkStatus();
    case v1::Predicate::kFieldsChanged: {
      const auto& paths = p.fields_changed().field_paths();
      const std::string pf = f + ".fields_changed.field_paths";
      if (paths.empty()) return Invalid(pf, "at least one field path required");
      if (paths.size() > kMaxFieldPaths) {
        return Invalid(pf, absl::StrCat("at most ", kMaxFieldPaths, " paths"));
      }
      for (int i = 0; i < paths.size(); ++i) {
        auto path = informer::FieldPath::Parse(paths[i]);
        if (!path.ok()) return Invalid(absl::StrCat(pf, "[", i, "]"), path.status().message());
      }
      return absl::OkStatus();
    }
    case v1::Predicate::KIND_NOT_SET:
      break;
  }
  return Invalid(f, "one of generation_changed, labels_changed, annotations_changed, "
                    "fields_changed required");
}

absl::Status ValidateSourceShape(const v1::QueueSource& src, const std::string& f) {
  if (src.informer_id().empty()) return Invalid(f + ".informer_id", "required");
  auto selector = informer::LabelSelector::Parse(src.label_selector());
  if (!selector.ok()) return Invalid(f + ".label_selector", selector.status().message());
  switch (src.map_to_case()) {
    case v1::QueueSource::MAP_TO_NOT_SET:
    case v1::QueueSource::kObject:
      break;
    case v1::QueueSource::kOwner:
      if (src.owner().kind().empty()) return Invalid(f + ".owner.kind", "required");
      break;
    case v1::QueueSource::kIndex: {
      const v1::IndexLookup& ix = src.index();
      if (ix.informer_id().empty()) return Invalid(f + ".index.informer_id", "required");
      if (ix.index_name().empty()) return Invalid(f + ".index.index_name", "required");
      if (!v1::IndexLookup::ValueFrom_IsValid(ix.value_from())) {
        return Invalid(f + ".index.value_from", "must be KEY or NAME");
      }
      break;
    }
  }
  for (int i = 0; i < src.predicates_size(); ++i) {
    if (absl::Status s = ValidatePredicate(src.predicates(i), absl::StrCat(f, ".predicates[", i, "]"));
        !s.ok()) {
      return s;
    }
  }
  if (src.has_priorities()) {
    const v1::SourcePriorities& p = src.priorities();
    const std::string pf = f + ".priorities";
    if (p.has_initial_list()) {
      if (absl::Status s = ValidatePriority(p.initial_list(), pf + ".initial_list"); !s.ok()) {
        return s;
      }
    }
    if (p.has_unchanged()) {
      if (absl::Status s = ValidatePriority(p.unchanged(), pf + ".unchanged"); !s.ok()) return s;
    }
    if (p.has_changed()) {
      if (absl::Status s = ValidatePriority(p.changed(), pf + ".changed"); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string InvalidKeyReason(absl::string_view key) {
  if (key.empty()) return "must not be empty";
  if (key.size() > kMaxKeyBytes) {
    return absl::StrCat("is ", key.size(), " bytes, at most ", kMaxKeyBytes, " allowed");
  }
  return "";
}

absl::Status ValidatePriority(int32_t priority, absl::string_view field) {
  if (priority >= kMinPriority && priority <= kMaxPriority) return absl::OkStatus();
  return Invalid(std::string(field),
                 absl::StrCat("must be in ", kMinPriority, "..", kMaxPriority, ", got ", priority));
}

absl::Duration PriorityAging(const v1::QueueSpec& spec) {
  return absl::Milliseconds(spec.priority_aging_ms() == 0 ? kDefaultPriorityAgingMs
                                                          : spec.priority_aging_ms());
}

std::string QueueKey(absl::string_view cluster, absl::string_view object_key) {
  if (cluster.empty()) return std::string(object_key);
  return absl::StrCat(cluster, kClusterSeparator, object_key);
}

QueueKeyParts SplitQueueKey(absl::string_view key) {
  const size_t at = key.find(kClusterSeparator);
  if (at == absl::string_view::npos) return {.cluster = "", .object_key = key};
  return {.cluster = key.substr(0, at), .object_key = key.substr(at + kClusterSeparator.size())};
}

absl::StatusOr<v1::QueueSpec> NormalizeQueueSpec(const v1::QueueSpec& in) {
  if (std::string why = Dns1123SubdomainError(in.name()); !why.empty()) {
    return Invalid("spec.name", why);
  }
  v1::QueueSpec spec = in;
  if (spec.rate_limiter().kind_case() == v1::RateLimiterSpec::KIND_NOT_SET) {
    spec.mutable_rate_limiter()->mutable_default_controller();
  }
  // Built once to validate; the registry builds the one it uses on its clock.
  auto limiter = BuildRateLimiter(spec.rate_limiter(), "spec.rate_limiter", Clock::Real());
  if (!limiter.ok()) return limiter.status();
  if (spec.resync_period_ms() != 0 &&
      (spec.resync_period_ms() < 1000 || spec.resync_period_ms() > kMaxDelayMs)) {
    return Invalid("spec.resync_period_ms", absl::StrCat("must be 0 or in 1000..", kMaxDelayMs));
  }
  if (spec.lease_timeout_ms() != 0 && (spec.lease_timeout_ms() < kMinLeaseTimeoutMs ||
                                       spec.lease_timeout_ms() > kMaxLeaseTimeoutMs)) {
    return Invalid("spec.lease_timeout_ms", absl::StrCat("must be 0 or in ", kMinLeaseTimeoutMs,
                                                         "..", kMaxLeaseTimeoutMs));
  }
  if (spec.priority_aging_ms() != 0 && (spec.priority_aging_ms() < kMinLeaseTimeoutMs ||
                                        spec.priority_aging_ms() > kMaxLeaseTimeoutMs)) {
    return Invalid("spec.priority_aging_ms", absl::StrCat("must be 0 or in ", kMinLeaseTimeoutMs,
                                                          "..", kMaxLeaseTimeoutMs));
  }
  if (spec.sources_size() > kMaxQueueSources) {
    return Invalid("spec.sources", absl::StrCat(spec.sources_size(), " sources, at most ",
                                                kMaxQueueSources));
  }
  for (int i = 0; i < spec.sources_size(); ++i) {
    if (absl::Status s = ValidateSourceShape(spec.sources(i), absl::StrCat("spec.sources[", i, "]"));
        !s.ok()) {
      return s;
    }
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<workqueue::RateLimiter>> BuildRateLimiter(
    const v1::RateLimiterSpec& spec, absl::string_view field, Clock* clock) {
  return BuildLimiter(spec, std::string(field), 0, clock);
}

}  // namespace informerd::service
