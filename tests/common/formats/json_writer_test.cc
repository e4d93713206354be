#include "common/formats/json_writer.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

TEST(JsonWriterTest, NestsLikePythonJsonDumpsIndent1) {
  JsonWriter w;
  w.BeginObject();
  w.Key("name");
  w.String("gpu0");
  w.Key("ids");
  w.BeginArray();
  w.Int(1);
  w.Int(-2);
  w.Uint(3);
  w.EndArray();
  w.Key("nested");
  w.BeginObject();
  w.Key("ok");
  w.Bool(true);
  w.Key("off");
  w.Bool(false);
  w.Key("deep");
  w.BeginArray();
  w.BeginObject();
  w.Key("x");
  w.Uint(UINT64_MAX);
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.Key("empty_obj");
  w.BeginObject();
  w.EndObject();
  w.Key("empty_arr");
  w.BeginArray();
  w.EndArray();
  w.Key("ratio");
  w.Double(0.5);
  w.EndObject();
  // json.dumps(..., indent=1) of the same value.
  EXPECT_EQ(w.str(),
            "{\n"
            " \"name\": \"gpu0\",\n"
            " \"ids\": [\n"
            "  1,\n"
            "  -2,\n"
            "  3\n"
            " ],\n"
            " \"nested\": {\n"
            "  \"ok\": true,\n"
            "  \"off\": false,\n"
            "  \"deep\": [\n"
            "   {\n"
            "    \"x\": 18446744073709551615\n"
            "   }\n"
            "  ]\n"
            " },\n"
            " \"empty_obj\": {},\n"
            " \"empty_arr\": [],\n"
            " \"ratio\": 0.5\n"
            "}");
}

TEST(JsonWriterTest, EmptyContainersStayOnOneLine) {
  JsonWriter w;
  w.BeginArray();
  w.BeginArray();
  w.EndArray();
  w.BeginObject();
  w.EndObject();
  w.BeginArray();
  w.BeginArray();
  w.EndArray();
  w.EndArray();
  w.EndArray();
  EXPECT_EQ(w.str(), "[\n [],\n {},\n [\n  []\n ]\n]");

  JsonWriter top;
  top.BeginObject();
  top.EndObject();
  EXPECT_EQ(top.str(), "{}");
}

TEST(JsonWriterTest, EscapesStringsAndKeys) {
  JsonWriter w;
  w.BeginObject();
  w.Key("k\"ey\\");
  w.String("q\"b\\n\nr\rt\t\x01\x1f\x7f");
  w.Key("utf8");
  w.String("gr\xc3\xbc\xc3\x9f");  // passed through, as json.dumps(ensure_ascii=False)
  w.Key("nul");
  w.String(absl::string_view("a\0b", 3));
  w.EndObject();
  EXPECT_EQ(w.str(),
            "{\n"
            " \"k\\\"ey\\\\\": \"q\\\"b\\\\n\\nr\\rt\\t\\u0001\\u001f\x7f\",\n"
            " \"utf8\": \"gr\xc3\xbc\xc3\x9f\",\n"
            " \"nul\": \"a\\u0000b\"\n"
            "}");
}

TEST(JsonWriterTest, WritesScalarsAtTopLevel) {
  JsonWriter w;
  w.Int(INT64_MIN);
  EXPECT_EQ(w.str(), "-9223372036854775808");
}

TEST(JsonWriterTest, DoublesPrintLikePythonAndNonFiniteIsNull) {
  JsonWriter w;
  w.BeginArray();
  w.Double(0.1);
  w.Double(-2.5);
  w.Double(1.0);
  w.Double(123456.0);
  w.Double(1e300);
  w.Double(1e16);
  w.Double(std::numeric_limits<double>::quiet_NaN());
  w.Double(std::numeric_limits<double>::infinity());
  w.EndArray();
  // json.dumps([0.1, -2.5, 1.0, 123456.0, 1e300, 1e16], indent=1), then null
  // where Python would write the invalid NaN/Infinity.
  EXPECT_EQ(w.str(), "[\n 0.1,\n -2.5,\n 1.0,\n 123456.0,\n 1e+300,\n 1e+16,\n null,\n null\n]");
}

}  // namespace
}  // namespace gpumux
