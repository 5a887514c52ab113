// The simulator's backups, as far as log clean-up sees them
// (docs/replication.md, "Cleaning up the log").
#pragma once

#include "base/proto_call.h"
#include "base/strings.h"
#include "sim/deployment.h"

namespace megastore::sim {

// Backups, as far as clean-up sees them: every so often a replica records
// that a backup covers each key-value group's log through what it applied
// (what `msadmin backup` records once a backup of the group is stored).
class BackupMarks {
 public:
  explicit BackupMarks(Cluster* c) : c_(c) { c_->net().AddNode("backup", 0); }

  void Start() { Schedule(); }
  void Stop() { stopped_ = true; }

 private:
  void Schedule() {
    c_->env().Schedule(absl::Milliseconds(1500), [this] {
      if (stopped_) return;
      Mark();
      Schedule();
    });
  }

  void Mark() {
    const int dc = next_++ % static_cast<int>(c_->size());
    Transport* t = c_->net().TransportFor("backup");
    for (int g = 0; g < c_->options().groups; ++g) {
      replication::StateRequest req;
      *req.mutable_group() = GroupOf(g);
      CallProto<replication::StateReply>(
          t, Cluster::ReplAddr(dc), "repl.State", req, absl::Seconds(1),
          [t, dc, g](absl::StatusOr<replication::StateReply> s) {
            if (!s.ok() || s->applied().position() == 0) return;
            replication::MarkBackupRequest mark;
            *mark.mutable_group() = GroupOf(g);
            mark.set_position(s->applied().position());
            t->Call(Cluster::ReplAddr(dc), "repl.MarkBackup", mark.SerializeAsString(),
                    absl::Seconds(1), [](absl::StatusOr<std::string>) {});
          });
    }
  }

  static GroupRef GroupOf(int g) {
    GroupRef r;
    r.set_table(kTable);
    r.set_root(StrCat("g", g));
    return r;
  }

  Cluster* const c_;
  int next_ = 0;
  bool stopped_ = false;
};

}  // namespace megastore::sim
