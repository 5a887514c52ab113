// Command-line parsing shared by our tools: CLI11, with our exit codes.
#pragma once

#include <CLI/CLI.hpp>

namespace megastore {

// Parses argv into `app`. Returns -1 to continue, or the exit code to return
// now: 0 after --help, 2 for a usage error (CLI11 prints the reason).
inline int ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace megastore
