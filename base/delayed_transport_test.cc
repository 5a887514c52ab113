#include "base/delayed_transport.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace megastore {
namespace {

// Answers every call at once with "re:" + the request, recording when.
class EchoTransport : public Transport {
 public:
  explicit EchoTransport(Env* env) : env_(env) {}
  void Call(std::string_view to, std::string_view, std::string request, absl::Duration timeout,
            ReplyCallback done) override {
    arrivals.push_back({std::string(to), env_->MonotonicMicros()});
    timeouts.push_back(timeout);
    done("re:" + request);
  }
  std::vector<std::pair<std::string, int64_t>> arrivals;
  std::vector<absl::Duration> timeouts;

 private:
  Env* const env_;
};

TEST(DelayedTransportTest, RequestsAndRepliesEachTakeTheOneWayDelay) {
  ManualEnv env;
  EchoTransport inner(&env);
  DelayedTransport wan(&env, &inner, [](std::string_view to) {
    return to == "far" ? absl::Milliseconds(30) : absl::ZeroDuration();
  });
  const int64_t start = env.MonotonicMicros();
  std::optional<absl::StatusOr<std::string>> far, near;
  wan.Call("far", "m", "x", absl::Seconds(1), [&](auto r) { far = std::move(r); });
  wan.Call("near", "m", "y", absl::Seconds(1), [&](auto r) { near = std::move(r); });
  ASSERT_TRUE(near.has_value()) << "no delay to a node in the same place";
  EXPECT_EQ(**near, "re:y");
  env.Advance(absl::Milliseconds(29));
  EXPECT_EQ(inner.arrivals.size(), 1u) << "the far request is still on its way";
  env.Advance(absl::Milliseconds(1));
  ASSERT_EQ(inner.arrivals.size(), 2u);
  EXPECT_EQ(inner.arrivals[1].second - start, 30'000);
  EXPECT_EQ(inner.timeouts[1], absl::Milliseconds(940))
      << "the round trip comes out of the timeout";
  env.Advance(absl::Milliseconds(29));
  EXPECT_FALSE(far.has_value()) << "the reply is on its way back";
  env.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(far.has_value());
  EXPECT_EQ(**far, "re:x");
}

TEST(DelayedTransportTest, ATimeoutShorterThanTheRoundTripFailsAtTheTimeout) {
  ManualEnv env;
  EchoTransport inner(&env);
  DelayedTransport wan(&env, &inner, [](std::string_view) { return absl::Milliseconds(30); });
  std::optional<absl::StatusOr<std::string>> r;
  wan.Call("far", "m", "x", absl::Milliseconds(50), [&](auto x) { r = std::move(x); });
  env.Advance(absl::Milliseconds(49));
  EXPECT_FALSE(r.has_value());
  env.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(absl::IsDeadlineExceeded(r->status())) << r->status();
  EXPECT_TRUE(inner.arrivals.empty()) << "it was never sent";
}

}  // namespace
}  // namespace megastore
