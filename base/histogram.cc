#include "base/histogram.h"

#include "base/strings.h"

namespace megastore {

std::string LatencyHistogram::Prometheus(std::string_view name, std::string_view help,
                                         std::string_view labels) const {
  return StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n",
                PrometheusSamples(name, labels));
}

std::string LatencyHistogram::PrometheusSamples(std::string_view name,
                                                std::string_view labels) const {
  std::string out;
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBoundsMs.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le =
        i + 1 == kBoundsMs.size() ? "+Inf" : fmt::format("{:g}", kBoundsMs[i] / 1000.0);
    out += StrCat(name, "_bucket{", labels, sep, "le=\"", le, "\"} ", cumulative, "\n");
  }
  const std::string braces = labels.empty() ? "" : StrCat("{", labels, "}");
  out += StrCat(name, "_sum", braces, " ",
                fmt::format("{:g}", static_cast<double>(sum_micros_.load()) / 1e6), "\n");
  out += StrCat(name, "_count", braces, " ", cumulative, "\n");
  return out;
}

}  // namespace megastore
