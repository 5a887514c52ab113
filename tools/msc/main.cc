// msc: the Megastore schema compiler. `msc --help` explains it.
#include <google/protobuf/text_format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/cli.h"
#include "base/init.h"
#include "schema/codegen.h"
#include "schema/compat.h"
#include "schema/compiler.h"
#include "schema/printer.h"

namespace {

bool WriteFile(const std::filesystem::path& path, const std::string& data) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out << data;
    if (!out.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  megastore::InitProcess();
  CLI::App app{
      "msc: compiles a Megastore schema (docs/schema.md).\n\n"
      "Checks FILE.msdl and reports every error as FILE:LINE:COL: error: REASON (with a hint\n"
      "where one helps). With --out, writes the schema descriptor to DIR/NAME.schema.pb\n"
      "(binary protobuf megastore.schema.SchemaDescriptor) and DIR/NAME.schema.textproto, and\n"
      "typed C++ classes to DIR/NAME.schema.h and DIR/NAME.schema.cc (link with ms_schema).\n\n"
      "Exit status: 0 the schema is valid (and was written), 1 it has errors,\n"
      "2 usage error (bad flags, unreadable file, unwritable --out)."};
  std::string file, out_dir, include_prefix, previous;
  bool check = false, print = false;
  app.add_option("file", file, "the schema file (.msdl)")->required();
  auto* out_opt = app.add_option("--out", out_dir,
                                 "directory for the compiled descriptor (created if missing)");
  app.add_flag("--check", check, "only check the schema; write nothing")->excludes(out_opt);
  app.add_option(
      "--include-prefix", include_prefix,
      "with --out: path put before NAME.schema.h in the generated source's #include (e.g. gen/)");
  app.add_option(
      "--previous", previous,
      "the descriptor (.schema.pb or .schema.textproto) the data was written under; refuse\n"
      "changes it cannot be served with (docs/schema.md, Schema evolution)");
  app.add_flag("--print", print,
               "print the compiled schema as canonical DDL on stdout (ALTERs applied, numbers "
               "explicit where needed)");
  if (int rc = megastore::ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (!check && !print && out_dir.empty()) {
    std::fprintf(
        stderr, "msc: give --out=DIR to write the descriptor, --check to only check, or --print\n");
    return 2;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "msc: cannot read %s\n", file.c_str());
    return 2;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const megastore::schema::CompileResult result = megastore::schema::CompileSchema(buffer.str());
  for (const auto& d : result.errors) {
    std::fprintf(stderr, "%s\n", megastore::schema::FormatDiagnostic(file, d).c_str());
  }
  if (!result.ok()) {
    std::fprintf(stderr, "msc: %zu error%s in %s\n", result.errors.size(),
                 result.errors.size() == 1 ? "" : "s", file.c_str());
    return 1;
  }
  if (!previous.empty()) {
    std::ifstream pin(previous, std::ios::binary);
    std::stringstream pbuf;
    pbuf << pin.rdbuf();
    megastore::schema::SchemaDescriptor old;
    const bool text =
        previous.size() >= 10 && previous.compare(previous.size() - 10, 10, ".textproto") == 0;
    if (!pin || !(text ? google::protobuf::TextFormat::ParseFromString(pbuf.str(), &old)
                       : old.ParseFromString(pbuf.str()))) {
      std::fprintf(stderr, "msc: cannot read a schema descriptor from %s\n", previous.c_str());
      return 2;
    }
    const std::vector<std::string> problems =
        megastore::schema::CheckCompatible(old, result.descriptor);
    for (const std::string& p : problems) {
      std::fprintf(stderr, "%s: error: incompatible with %s: %s\n", file.c_str(), previous.c_str(),
                   p.c_str());
    }
    if (!problems.empty()) {
      std::fprintf(stderr, "msc: %zu incompatible change%s in %s\n", problems.size(),
                   problems.size() == 1 ? "" : "s", file.c_str());
      return 1;
    }
  }
  if (print) std::fputs(megastore::schema::PrintSchema(result.descriptor).c_str(), stdout);
  if (out_dir.empty()) return 0;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "msc: cannot create %s: %s\n", out_dir.c_str(), ec.message().c_str());
    return 2;
  }
  const std::string name = result.descriptor.name();
  std::string text;
  google::protobuf::TextFormat::PrintToString(result.descriptor, &text);
  const auto dir = std::filesystem::path(out_dir);
  const megastore::schema::GeneratedCode code =
      megastore::schema::GenerateCpp(result.descriptor, include_prefix);
  if (!WriteFile(dir / (name + ".schema.pb"), result.descriptor.SerializeAsString()) ||
      !WriteFile(dir / (name + ".schema.textproto"), text) ||
      !WriteFile(dir / code.header_name, code.header) ||
      !WriteFile(dir / code.source_name, code.source)) {
    std::fprintf(stderr, "msc: cannot write into %s\n", out_dir.c_str());
    return 2;
  }
  std::printf("msc: %s: schema %s (%d tables, %d indexes) written to %s\n", file.c_str(),
              name.c_str(), result.descriptor.tables_size(), result.descriptor.indexes_size(),
              out_dir.c_str());
  return 0;
}
