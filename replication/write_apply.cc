// Step 5 of a write (write_steps.h): apply the chosen value at every
// replica; and Complete, steps 4 and 5 in order.
#include <memory>

#include "base/strings.h"
#include "replication/write_steps.h"

namespace megastore::replication::internal {

void ApplyEverywhere(GroupClient* c, const GroupRef& group, uint64_t position,
                     const std::string& value, int wait_replica,
                     absl::AnyInvocable<void(absl::Status)> done) {
  ApplyRequest req;
  *req.mutable_group() = group;
  req.set_position(position);
  req.set_value(value);
  auto waited = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
  for (int i = 0; i < static_cast<int>(c->options().replicas.size()); ++i) {
    CallProto<ApplyReply>(c, c->options().replicas[i].replication, "repl.Apply", req,
                          [i, wait_replica, waited, position](absl::StatusOr<ApplyReply> r) {
                            if (i != wait_replica) return;
                            if (!r.ok()) return (*waited)(r.status());
                            // An apply that met a hole before the position
                            // answers with the position it did reach.
                            if (r->applied().position() < position)
                              return (*waited)(absl::UnavailableError(StrCat(
                                  "position ", position, " not applied: the replica applied up to ",
                                  r->applied().position())));
                            (*waited)(absl::OkStatus());
                          });
  }
  if (wait_replica < 0) (*waited)(absl::OkStatus());
}

void Complete(GroupClient* c, GroupRef group, uint64_t position, Chosen chosen, int wait_replica,
              int64_t deadline, CompleteCallback done) {
  std::string value = std::move(chosen.value);  // step 4 needs only who accepted it
  MakeVisible(c, group, position, chosen, deadline,
              [c, group, position, value = std::move(value), wait_replica,
               done = std::move(done)](absl::Status visible) mutable {
                if (!visible.ok()) return done(visible, absl::AbortedError("not applied"));
                auto finish = [done = std::move(done)](absl::Status applied) mutable {
                  done(absl::OkStatus(), applied);
                };
                ApplyEverywhere(c, group, position, value, wait_replica, std::move(finish));
              });
}

}  // namespace megastore::replication::internal
