// libFuzzer target: any bytes as a schema file. The compiler must never
// crash, hang or leak; a schema that compiles must print back to DDL that
// compiles to the same descriptor, and must generate C++ without crashing.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "schema/codegen.h"
#include "schema/compiler.h"
#include "schema/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megastore::schema;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  const CompileResult r = CompileSchema(source);
  for (const Diagnostic& d : r.errors) (void)FormatDiagnostic("fuzz.msdl", d);
  if (!r.ok()) return 0;
  const CompileResult again = CompileSchema(PrintSchema(r.descriptor));
  if (!again.ok() || again.descriptor.SerializeAsString() != r.descriptor.SerializeAsString())
    std::abort();
  (void)GenerateCpp(r.descriptor);
  return 0;
}
