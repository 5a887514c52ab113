#include "schema/entity.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/compiler.h"

namespace megastore::schema {
namespace {

using ::testing::HasSubstr;

SchemaDescriptor Everything() {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/tests/schema/good/everything.msdl");
  std::stringstream s;
  s << in.rdbuf();
  CompileResult r = CompileSchema(s.str());
  EXPECT_TRUE(r.ok());
  return r.descriptor;
}

Value RandomScalar(Random& rng, FieldType type) {
  switch (type) {
    case INT32:
      return static_cast<int64_t>(static_cast<int32_t>(rng.Next()));
    case INT64:
      return static_cast<int64_t>(rng.Next());
    case UINT64:
      return rng.Next() >> rng.Uniform(64);
    case BOOL:
      return rng.OneIn(2);
    case DOUBLE: {
      const double kEdges[] = {-0.0, std::numeric_limits<double>::quiet_NaN(),
                               rng.NextDouble() * 1e10 - 5e9};
      return kEdges[rng.Uniform(3)];
    }
    default:
      return rng.Bytes(rng.Uniform(20));
  }
}

// A random valid entity of `fields`, nesting messages up to `depth`.
Entity RandomEntity(Random& rng, const SchemaIndex& schema,
                    const google::protobuf::RepeatedPtrField<FieldDescriptor>& fields, int depth) {
  Entity e;
  for (const FieldDescriptor& f : fields) {
    size_t n = f.label() == REQUIRED ? 1 : f.label() == OPTIONAL ? rng.Uniform(2) : rng.Uniform(4);
    if (f.type() == MESSAGE && depth >= 3) n = f.label() == REQUIRED ? 1 : 0;
    if (n == 0) continue;
    std::vector<Value>& values = e.fields[f.number()];
    for (size_t i = 0; i < n; ++i) {
      if (f.type() == MESSAGE) {
        const MessageDescriptor* m = schema.FindMessage(f.message_type());
        values.push_back(
            std::make_shared<const Entity>(RandomEntity(rng, schema, m->fields(), depth + 1)));
      } else {
        values.push_back(RandomScalar(rng, f.type()));
      }
    }
  }
  return e;
}

TEST(EntityTest, EveryFieldRoundTripsExactlyThroughItsStoredBytes) {
  const SchemaIndex schema(Everything());
  Random rng(11);
  for (const TableDescriptor& t : schema.schema().tables()) {
    for (int i = 0; i < 500; ++i) {
      const Entity e = RandomEntity(rng, schema, t.fields(), 0);
      ASSERT_TRUE(Validate(schema, t.fields(), e, t.name()).ok());
      Entity back;
      for (const auto& [number, values] : e.fields) {
        const FieldDescriptor* f = FindFieldByNumber(t.fields(), number);
        auto decoded = DecodeField(schema, *f, EncodeField(schema, *f, values));
        ASSERT_TRUE(decoded.ok()) << decoded.status();
        back.fields[number] = std::move(*decoded);
      }
      EXPECT_TRUE(Equal(back, e)) << t.name() << " case " << i;
    }
  }
}

TEST(EntityTest, ValidateNamesWhatIsWrong) {
  const SchemaIndex schema(Everything());
  const TableDescriptor& event = *schema.FindTable("Event");
  Entity e;
  e.fields[1] = {uint64_t{7}};
  e.fields[2] = {int64_t{100}};
  EXPECT_THAT(std::string(Validate(schema, event.fields(), e, "Event").message()),
              HasSubstr("Event.seq is required but not set"));
  e.fields[3] = {int64_t{1} << 40};
  EXPECT_THAT(std::string(Validate(schema, event.fields(), e, "Event").message()),
              HasSubstr("Event.seq is int32 but holds 1099511627776"));
  e.fields[3] = {int64_t{1}};
  e.fields[6] = {1.0, 2.0};
  EXPECT_THAT(std::string(Validate(schema, event.fields(), e, "Event").message()),
              HasSubstr("Event.score is not repeated but has 2 values"));
  e.fields[6] = {std::string("x")};
  EXPECT_THAT(std::string(Validate(schema, event.fields(), e, "Event").message()),
              HasSubstr("Event.score is DOUBLE but holds a string"));
  e.fields.erase(6);
  auto place = std::make_shared<Entity>();
  auto where = std::make_shared<Entity>();
  where->fields[1] = {1.5};  // lng missing
  place->fields[2] = {std::shared_ptr<const Entity>(where)};
  e.fields[4] = {std::shared_ptr<const Entity>(place)};
  EXPECT_THAT(std::string(Validate(schema, event.fields(), e, "Event").message()),
              HasSubstr("Event.place.where.lng is required but not set"));
  e.fields.erase(4);
  e.fields[99] = {int64_t{1}};
  EXPECT_THAT(std::string(Validate(schema, event.fields(), e, "Event").message()),
              HasSubstr("Event has no field number 99"));
}

TEST(EntityTest, DamagedBytesAreDataLossNotCrashes) {
  const SchemaIndex schema(Everything());
  const TableDescriptor& event = *schema.FindTable("Event");
  Random rng(5);
  for (const FieldDescriptor& f : event.fields()) {
    for (int i = 0; i < 300; ++i) (void)DecodeField(schema, f, rng.Bytes(rng.Uniform(16)));
  }
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeField(schema, *FindField(event.fields(), "seq"), "\xff").status()));
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeField(schema, *FindField(event.fields(), "score"), "1234").status()));
}

}  // namespace
}  // namespace megastore::schema
