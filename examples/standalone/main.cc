// A small application on megastore: adds a note to a notebook (an entity
// group) in one transaction, then lists the notebook's notes.
//
//   notes --config=CLUSTER.textproto --datacenter=A [--notebook=N] [TEXT]
//
// The cluster needs the schema applied first:
//   msadmin schema apply --config=CLUSTER.textproto Notes.msdl
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "Notes.schema.h"
#include "api/connect.h"

int main(int argc, char** argv) {
  std::string config, datacenter, text = "hello from a standalone app";
  int64_t notebook = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.rfind("--config=", 0) == 0) {
      config = a.substr(9);
    } else if (a.rfind("--datacenter=", 0) == 0) {
      datacenter = a.substr(13);
    } else if (a.rfind("--notebook=", 0) == 0) {
      notebook = std::strtoll(argv[i] + 11, nullptr, 10);
    } else if (!a.empty() && a[0] != '-') {
      text = a;
    } else {
      std::fprintf(stderr, "usage: notes --config=FILE --datacenter=NAME [--notebook=N] [TEXT]\n");
      return 2;
    }
  }
  if (config.empty() || datacenter.empty()) {
    std::fprintf(stderr, "usage: notes --config=FILE --datacenter=NAME [--notebook=N] [TEXT]\n");
    return 2;
  }
  auto conn = megastore::ConnectToCluster(config, datacenter, notes::Schema());
  if (!conn.ok()) {
    std::fprintf(stderr, "notes: %s\n", conn.status().ToString().c_str());
    return 1;
  }
  megastore::Database& db = (*conn)->db();

  // One transaction: the notebook (created if new) and its next note.
  int64_t added = 0;
  auto committed = db.Run<notes::Notebook>(notes::Notebook::Key{notebook},
                                           [&](megastore::Transaction& t) -> absl::Status {
                                             auto existing = t.Query<notes::Note>({notebook});
                                             if (!existing.ok()) return existing.status();
                                             added = static_cast<int64_t>(existing->size()) + 1;
                                             notes::Notebook book;
                                             book.set_notebook_id(notebook);
                                             book.set_title("notebook " + std::to_string(notebook));
                                             if (absl::Status s = t.Put(book); !s.ok()) return s;
                                             notes::Note note;
                                             note.set_notebook_id(notebook);
                                             note.set_note_id(added);
                                             note.set_text(text);
                                             return t.Put(note);
                                           });
  if (!committed.ok()) {
    std::fprintf(stderr, "notes: %s\n", committed.status().ToString().c_str());
    return 1;
  }
  std::printf("added note %lld at log position %llu\n", static_cast<long long>(added),
              static_cast<unsigned long long>(committed->position));

  auto t = db.Begin<notes::Notebook>(notes::Notebook::Key{notebook});
  if (!t.ok()) {
    std::fprintf(stderr, "notes: %s\n", t.status().ToString().c_str());
    return 1;
  }
  auto notes = (*t)->Query<notes::Note>({notebook});
  if (!notes.ok()) {
    std::fprintf(stderr, "notes: %s\n", notes.status().ToString().c_str());
    return 1;
  }
  for (const notes::Note& n : *notes)
    std::printf("  %lld: %s\n", static_cast<long long>(n.note_id()), n.text().c_str());
  return 0;
}
