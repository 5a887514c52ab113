// The PhotoApp example application (the paper's schema): an app server in
// one datacenter of a running cluster creates users and their photos,
// queries them by time and by tag, shares a photo between two users'
// entity groups through a queue, reads at another datacenter, and prints
// what happened — what was written, how long each commit took, which
// replica served each read. `./ms demo` runs it against the embedded
// default (megastored --local=3).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/connect.h"
#include "api/database.h"
#include "base/cli.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/strings.h"
#include "photoapp/PhotoApp.schema.h"
#include "server/cluster.h"

namespace {

// Says why the demo stops, on stdout with the rest of its report.
int Failed(const absl::Status& s) {
  std::printf("  FAILED: %s\n", s.ToString().c_str());
  return 1;
}

using megastore::CommitInfo;
using megastore::Database;
using megastore::StrCat;
using megastore::Transaction;
using photoapp::Photo;
using photoapp::User;

// The emulated round trip between two datacenters (twice the one-way delay).
int RoundTripMs(const megastore::server::ClusterConfig& c, const std::string& a,
                const std::string& b) {
  for (const auto& l : c.links())
    if ((l.a() == a && l.b() == b) || (l.a() == b && l.b() == a))
      return 2 * static_cast<int>(l.one_way_ms());
  return 0;
}

// Why the report's latencies are what they are, from the cluster's own
// topology: a commit waits for the farthest full replica, a first read at a
// datacenter for the nearest majority.
void Explain(const megastore::server::ClusterConfig& c, const std::string& local,
             const std::string& other) {
  std::vector<std::pair<int, std::string>> voters, fulls;  // (round trip from `local`, name)
  size_t n_voters = 0;
  for (const auto& dc : c.datacenters()) {
    const bool full = dc.type().empty() || dc.type() == "full";
    if (full || dc.type() == "witness") ++n_voters;
    if (dc.name() == local) continue;
    if (full || dc.type() == "witness")
      voters.emplace_back(RoundTripMs(c, local, dc.name()), dc.name());
    if (full) fulls.emplace_back(RoundTripMs(c, local, dc.name()), dc.name());
  }
  std::sort(voters.begin(), voters.end());
  std::sort(fulls.begin(), fulls.end());
  const size_t others_needed = n_voters / 2;  // a majority, counting this datacenter
  if (others_needed == 0 || others_needed > voters.size() || fulls.empty()) return;
  const auto& majority = voters[others_needed - 1];
  const auto& farthest = fulls.back();
  std::printf("\nWhy these numbers (one round trip = twice the one-way delay):\n");
  std::printf(
      "  * A commit needs a majority of accepts (%s and %s: %d ms), but it returns only once "
      "every\n"
      "    full replica has accepted or had its coordinator invalidated, so that a current read\n"
      "    there never misses the write: it waits for the farthest full replica, %s, %d ms.\n",
      local.c_str(), majority.second.c_str(), majority.first, farthest.second.c_str(),
      farthest.first);
  std::printf(
      "  * A new user's transaction first reads its group currently; %s's coordinator has not\n"
      "    seen the group, so the read asks a majority for the log position (%d ms) before the\n"
      "    commit's %d ms, plus the local Bigtable writes: each user commit above.\n",
      local.c_str(), majority.first, farthest.first);
  std::vector<std::pair<int, std::string>> from_other;
  for (const auto& dc : c.datacenters()) {
    if (dc.name() == other || dc.type() == "read-only") continue;
    from_other.emplace_back(RoundTripMs(c, other, dc.name()), dc.name());
  }
  std::sort(from_other.begin(), from_other.end());
  if (others_needed <= from_other.size())
    std::printf(
        "  * At %s the first current read of Bob's group costs a majority read (%s, %d ms): its\n"
        "    coordinator does not yet vouch for the group. The read catches %s's replica up, the\n"
        "    coordinator marks the group up to date, and the second read is local.\n",
        other.c_str(), from_other[others_needed - 1].second.c_str(),
        from_other[others_needed - 1].first, other.c_str());
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::vector<std::string> Tags(const Photo& p) {
  std::vector<std::string> out;
  for (int i = 0; i < p.tag_size(); ++i) out.push_back(p.tag(i));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  megastore::InitProcess();
  CLI::App app{"photoapp_demo: the PhotoApp example application against a running cluster"};
  std::string config_path, local = "A";
  app.add_option("--config", config_path,
                 "the cluster config (megastored --local writes DATA/cluster.textproto)")
      ->required();
  app.add_option("--local", local, "the datacenter this app server runs in")->capture_default_str();
  if (const int rc = megastore::ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  megastore::SetLogLevel("warn");
  auto config = megastore::server::LoadClusterConfigForClient(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "photoapp_demo: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  auto here = megastore::ConnectToCluster(config_path, local, photoapp::Schema());
  if (!here.ok()) {
    std::fprintf(stderr, "photoapp_demo: %s\n", std::string(here.status().message()).c_str());
    return 2;
  }
  Database& db = (*here)->db();
  std::vector<std::string> names;
  for (const auto& dc : config->datacenters()) names.push_back(dc.name());

  std::printf("PhotoApp demo: an app server in datacenter %s of a %zu-datacenter cluster\n",
              local.c_str(), names.size());
  for (const auto& l : config->links())
    std::printf("  emulated WAN %s-%s: %u ms one way\n", l.a().c_str(), l.b().c_str(),
                l.one_way_ms());

  // 1. Users and photos: one transaction per user (each user is an entity group).
  std::printf(
      "\n1. Users and their photos, one transaction per user (each user is its own entity "
      "group)\n");
  struct Person {
    int64_t id;
    const char* name;
    std::vector<std::vector<std::string>> photos;  // tags of each photo
  };
  const std::vector<Person> people = {
      {1, "Ada", {{"beach", "sun"}, {"city"}, {"beach"}}},
      {2, "Bob", {{"mountain"}, {"beach", "sunset"}}},
      {3, "Cy", {{"city", "night"}, {"sun"}, {"mountain", "snow"}, {"beach"}}},
  };
  std::vector<double> commit_ms;
  int64_t clock = 1'700'000'000;
  for (const Person& p : people) {
    const absl::Time start = absl::Now();
    absl::StatusOr<CommitInfo> r = db.Run<User>(User::Key{p.id}, [&](Transaction& t) {
      User u;
      u.set_user_id(p.id);
      u.set_name(p.name);
      absl::Status s = t.Put(u);
      for (size_t i = 0; s.ok() && i < p.photos.size(); ++i) {
        Photo ph;
        ph.set_user_id(p.id);
        ph.set_photo_id(static_cast<int32_t>(i + 1));
        ph.set_time(clock - static_cast<int64_t>(i) * 3600);
        ph.set_full_url(StrCat("https://photos.example/", p.name, "/", i + 1, ".jpg"));
        ph.set_thumbnail_url(StrCat("https://photos.example/", p.name, "/", i + 1, "-thumb.jpg"));
        for (const auto& tag : p.photos[i]) ph.add_tag(tag);
        s = t.Put(ph);
      }
      return s;
    });
    const double ms = Ms(absl::Now() - start);
    if (!r.ok()) {
      std::printf("  user %lld %s: FAILED: %s\n", static_cast<long long>(p.id), p.name,
                  r.status().ToString().c_str());
      return 1;
    }
    if (!r->wrote) {
      // A run against a cluster that already has them: nothing changed,
      // nothing to commit (a read at the group's position).
      std::printf(
          "  user %lld %-4s + %zu photos   already stored as written (log position %llu; read in "
          "%.1f ms)\n",
          static_cast<long long>(p.id), p.name, p.photos.size(),
          static_cast<unsigned long long>(r->position), ms);
    } else {
      commit_ms.push_back(ms);
      std::printf("  user %lld %-4s + %zu photos   committed at log position %llu in %.1f ms\n",
                  static_cast<long long>(p.id), p.name, p.photos.size(),
                  static_cast<unsigned long long>(r->position), ms);
    }
    clock += 100;
  }

  // 2. Queries.
  std::printf("\n2. Queries\n");
  for (const Person& p : people) {
    absl::Time start = absl::Now();
    auto t = db.Begin<User>(User::Key{p.id});
    if (!t.ok()) {
      std::printf("  %s: %s\n", p.name, t.status().ToString().c_str());
      return 1;
    }
    auto by_time = (*t)->IndexQuery<Photo>("PhotosByTime", {p.id});
    if (!by_time.ok()) return Failed(by_time.status());
    std::vector<std::string> shown;
    for (const Photo& ph : *by_time)
      shown.push_back(StrCat(ph.photo_id(), " [", Join(Tags(ph)), "]"));
    std::printf(
        "  %s's photos by time (local index, current read served by replica %s, %.1f ms): %s\n",
        p.name, (*t)->datacenter().c_str(), Ms(absl::Now() - start), Join(shown).c_str());
  }
  for (const char* tag : {"beach", "mountain"}) {
    absl::Time start = absl::Now();
    auto tagged = db.GlobalIndexQuery<Photo>("PhotosByTag", {std::string(tag)});
    if (!tagged.ok()) return Failed(tagged.status());
    std::vector<std::string> shown;
    for (const Photo& ph : *tagged)
      shown.push_back(StrCat("user ", ph.user_id(), " photo ", ph.photo_id()));
    std::printf("  photos tagged \"%s\" across users (global index, %.1f ms): %s\n", tag,
                Ms(absl::Now() - start), Join(shown).c_str());
  }

  // 3. Between entity groups, through a queue.
  std::printf("\n3. Ada shares her photo 1 with Bob: a message from Ada's group to Bob's queue\n");
  absl::Time start = absl::Now();
  absl::StatusOr<CommitInfo> sent = db.Run<User>(User::Key{1}, [&](Transaction& t) {
    return t.Send(User::kTable, {int64_t{2}}, "shared", "1/1");
  });
  if (!sent.ok()) return Failed(sent.status());
  std::printf(
      "  sent with Ada's commit at position %llu (%.1f ms), delivered to Bob's group exactly "
      "once\n",
      static_cast<unsigned long long>(sent->position), Ms(absl::Now() - start));
  int received = 0;
  start = absl::Now();
  absl::StatusOr<CommitInfo> took = db.Run<User>(User::Key{2}, [&](Transaction& t) {
    received = 0;
    auto messages = t.ReadQueue("shared");
    if (!messages.ok()) return messages.status();
    for (const auto& m : *messages) {
      const int32_t id = std::atoi(m.body.substr(m.body.find('/') + 1).c_str());
      auto original = db.Begin<User>(User::Key{1});  // another group: its own read
      if (!original.ok()) return original.status();
      auto photo = (*original)->Get<Photo>(Photo::Key{1, id});
      if (!photo.ok()) return photo.status();
      if (photo->has_value()) {
        Photo copy = **photo;
        copy.set_user_id(2);
        copy.set_photo_id(100 + id);
        copy.add_tag("shared");
        if (absl::Status s = t.Put(copy); !s.ok()) return s;
      }
      if (absl::Status s = t.Consume(m); !s.ok()) return s;
      ++received;
    }
    return absl::OkStatus();
  });
  if (!took.ok()) return Failed(took.status());
  std::printf(
      "  Bob's transaction read %d message(s), stored the shared photo as his photo 101 and "
      "consumed "
      "the message (%.1f ms)\n",
      received, Ms(absl::Now() - start));

  // 4. Elsewhere.
  const std::string other = local == names.back() ? names.front() : names.back();
  std::printf("\n4. Reading at datacenter %s\n", other.c_str());
  auto there = megastore::ConnectToCluster(config_path, other, photoapp::Schema());
  if (!there.ok()) {
    std::printf("  (no app server at %s: %s)\n", other.c_str(),
                std::string(there.status().message()).c_str());
  } else {
    for (int round = 1; round <= 2; ++round) {
      start = absl::Now();
      megastore::TransactionOptions quick;
      quick.deadline = absl::Seconds(3);  // a replica that is down should not hold the report up
      auto t = (*there)->db().Begin<User>(User::Key{2}, quick);
      auto bobs = t.ok() ? (*t)->Query<Photo>({int64_t{2}})
                         : absl::StatusOr<std::vector<Photo>>(t.status());
      if (!bobs.ok()) {
        std::printf("  could not read there: %s\n", std::string(bobs.status().message()).c_str());
        break;
      }
      std::printf(
          "  %s read of Bob's group: %zu photos, current read served by replica %s in %.1f ms\n",
          round == 1 ? "first" : "second", bobs->size(), (*t)->datacenter().c_str(),
          Ms(absl::Now() - start));
    }
  }

  std::sort(commit_ms.begin(), commit_ms.end());
  const auto stats = db.context().client->stats();
  std::printf(
      "\nSummary: %llu commits from %s (%llu on the fast path: the leader's accept, one round "
      "trip), "
      "%llu conflicts retried; %s\n",
      static_cast<unsigned long long>(stats.commits), local.c_str(),
      static_cast<unsigned long long>(stats.fast_path),
      static_cast<unsigned long long>(db.retries()),
      commit_ms.empty()
          ? "the users were stored by an earlier run"
          : StrCat("user commits took ",
                   fmt::format("{:.1f}-{:.1f}", commit_ms.front(), commit_ms.back()), " ms")
                .c_str());
  auto report =
      db.CheckIndexes({{"User", {int64_t{1}}}, {"User", {int64_t{2}}}, {"User", {int64_t{3}}}});
  if (report.ok())
    std::printf("Index check: %lld entities, %lld index entries, %zu problems\n",
                static_cast<long long>(report->entities), static_cast<long long>(report->entries),
                report->problems.size());
  Explain(*config, local, other);
  return 0;
}
