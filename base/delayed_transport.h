// A Transport that adds a one-way delay to every request and its reply:
// emulated WAN latency between datacenters for benchmarks and demos that
// otherwise run on loopback (docs/architecture.md).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/env.h"
#include "base/lifetime.h"
#include "base/transport.h"

namespace megastore {

class DelayedTransport : public Transport {
 public:
  // How long a message to node `to` takes one way (zero: no delay).
  using OneWay = std::function<absl::Duration(std::string_view to)>;

  // `env` (timers) must outlive this; `inner` (the real transport) must
  // outlive this. Destroying it waits for delay timers running on other
  // threads; later ones do nothing (their callers are not answered).
  DelayedTransport(Env* env, Transport* inner, OneWay one_way);
  ~DelayedTransport() override;

  // The request leaves after the delay and the reply arrives after it
  // again; `timeout` covers the whole round trip, delays included.
  void Call(std::string_view to, std::string_view method, std::string request,
            absl::Duration timeout, ReplyCallback done) override;

 private:
  Env* const env_;
  Transport* const inner_;
  const OneWay one_way_;
  // Entered by the delay timers: they run only while the transport lives.
  std::shared_ptr<Lifetime> life_ = std::make_shared<Lifetime>();
};

}  // namespace megastore
