// A Transport that adds a one-way delay to every request and its reply:
// emulated WAN latency between datacenters for benchmarks and demos that
// otherwise run on loopback (DESIGN.md §7).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "base/env.h"
#include "base/transport.h"

namespace megastore {

class DelayedTransport : public Transport {
 public:
  // How long a message to node `to` takes one way (zero: no delay).
  using OneWay = std::function<absl::Duration(std::string_view to)>;

  // `env` (timers) and `inner` (the real transport) must outlive this and
  // every call in flight.
  DelayedTransport(Env* env, Transport* inner, OneWay one_way)
      : env_(env), inner_(inner), one_way_(std::move(one_way)) {}

  // The request leaves after the delay and the reply arrives after it
  // again; `timeout` covers the whole round trip, delays included.
  void Call(std::string_view to, std::string_view method, std::string request,
            absl::Duration timeout, ReplyCallback done) override;

 private:
  Env* const env_;
  Transport* const inner_;
  const OneWay one_way_;
};

}  // namespace megastore
