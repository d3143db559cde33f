// minimum / maximum / exclusiveMinimum / exclusiveMaximum at the byte level: zod's schemas as it
// writes them, every integer of a window against each range (exact both ways: what is accepted is
// in range, and what is in range is accepted), random decimals against integer and fractional
// bounds (compared as doubles, which under bounds agree with exact decimals: number_bounds.h),
// and the refusals. No tokenizer involved (grammar_mask_test.cpp).
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"

namespace fak::grammar {
namespace {

void expect_cases(const std::string& schema, const std::vector<std::string>& accept,
                  const std::vector<std::string>& reject) {
  auto grammar = compile_json_schema_text(schema);
  for (const auto& text : accept)
    EXPECT_TRUE(grammar_matches(*grammar, text)) << schema << "\n  should accept: " << text;
  for (const auto& text : reject)
    EXPECT_FALSE(grammar_matches(*grammar, text)) << schema << "\n  should reject: " << text;
}

std::string error_of(const std::string& schema) {
  try {
    compile_json_schema_text(schema);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarBounds, ZodIntegers) {
  // z.number().int(): the safe-integer range, beyond the 15 digits the grammar writes anyway.
  expect_cases(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})",
               {"0", "-5", "123456789012345", "-999999999999999"},
               {"1.0", "1e3", "1234567890123456", "-0.5", "00"});
  // .int().nonnegative()
  expect_cases(R"({"type":"integer","minimum":0,"maximum":9007199254740991})",
               {"0", "1", "42", "999999999999999"}, {"-1", "-0", "-42", "0.0"});
  // .int().positive()
  expect_cases(R"({"type":"integer","exclusiveMinimum":0,"maximum":9007199254740991})",
               {"1", "2", "10", "999999999999999"}, {"0", "-0", "-1"});
  // .int().min(1).max(10)
  expect_cases(R"({"type":"integer","minimum":1,"maximum":10})", {"1", "2", "9", "10"},
               {"0", "11", "100", "01", "-1", "1.0", "10 0"});
  // .int().negative()
  expect_cases(R"({"type":"integer","minimum":-9007199254740991,"exclusiveMaximum":0})",
               {"-1", "-999999999999999"}, {"0", "-0", "1"});
  // draft-4 output of .int().positive(): a boolean next to minimum
  expect_cases(R"({"type":"integer","minimum":0,"exclusiveMinimum":true})", {"1"}, {"0", "-1"});
  expect_cases(R"({"type":"integer","maximum":5,"exclusiveMaximum":false})", {"5", "-7"}, {"6"});
}

TEST(GrammarBounds, ZodNumbers) {
  // z.number().nonnegative() / .positive() / .min(0).max(1) / .lt(100)
  expect_cases(R"({"type":"number","minimum":0})", {"0", "0.0", "1.5", "123456789012345"},
               {"-1", "-0", "-0.0", "-0.5", "1e3", "1.5E-2"});
  expect_cases(R"({"type":"number","exclusiveMinimum":0})", {"0.000000000000001", "1", "0.5"},
               {"0", "0.0", "0.000", "-0.1"});
  expect_cases(R"({"type":"number","minimum":0,"maximum":1})",
               {"0", "1", "1.0", "1.000", "0.999", "0.5", "0.000000000000001"},
               {"1.01", "1.000000000000001", "2", "-0.001", "1e0", "10"});
  expect_cases(R"({"type":"number","exclusiveMaximum":1,"minimum":0})",
               {"0.999", "0", "0.99999999999999"}, {"1", "1.0", "1.000", "1.5"});
  // "99.999999999999999" is below 100 as a decimal, but a double reader sees 100.0: at most 15
  // significant digits under bounds keeps decimals and doubles in agreement.
  expect_cases(R"({"type":"number","exclusiveMaximum":100})", {"99.9999999999999", "-100000", "99"},
               {"100", "100.0", "99.999999999999999", "99.9999999999999999"});
  expect_cases(R"({"type":"number","minimum":0})", {"12345678901234.5"},
               {"123456789012345.1", "1.000000000000000"});
}

TEST(GrammarBounds, FractionalBoundsAreExact) {
  expect_cases(R"({"type":"number","minimum":0.5,"maximum":2.25})",
               {"0.5", "0.50", "2.25", "2.250", "1", "2.2499", "0.51"},
               {"0.49", "0.4999", "2.2501", "2.26", "3", "0", "-1"});
  expect_cases(R"({"type":"number","exclusiveMinimum":-2.5,"exclusiveMaximum":-0.125})",
               {"-2.4", "-0.13", "-1", "-0.1251"}, {"-2.5", "-2.50", "-0.125", "-0.12", "0", "-3"});
  expect_cases(R"({"type":"number","minimum":0.1})", {"0.1", "0.10", "0.2", "1"},
               {"0.09", "0.099999999999999", "0"});
  // Integers against fractional bounds: the digit comparison settles it without rounding.
  expect_cases(R"({"type":"integer","minimum":0.5,"exclusiveMaximum":3})", {"1", "2"},
               {"0", "3", "-1"});
  expect_cases(R"({"type":"integer","minimum":-1.5,"maximum":1.5})", {"-1", "0", "1"}, {"-2", "2"});
}

TEST(GrammarBounds, OneSidedCrossingZeroAndBeyondReach) {
  expect_cases(R"({"type":"integer","minimum":-7,"maximum":12})", {"-7", "-1", "0", "9", "12"},
               {"-8", "-0", "13", "-70", "120"});
  expect_cases(R"({"type":"integer","minimum":-15,"maximum":-3})", {"-3", "-15", "-10"},
               {"-2", "-16", "0", "3", "-150"});
  expect_cases(R"({"type":"integer","maximum":-1000000})", {"-1000000", "-999999999999999"},
               {"-999999", "0", "5"});
  // One side beyond 15 digits: that side is free.
  expect_cases(R"({"type":"integer","minimum":10,"maximum":1e20})", {"10", "999999999999999"},
               {"9", "-1"});
  // Both sides beyond reach: the plain number, exponents and all.
  expect_cases(
      R"({"type":"number","minimum":-1.7976931348623157e308,"maximum":1.7976931348623157e308})",
      {"1e99", "-1.5e-3", "0"}, {"1e100"});
  // Bounds together: the stricter counts.
  expect_cases(
      R"({"type":"integer","minimum":3,"exclusiveMinimum":3,"maximum":10,"exclusiveMaximum":12})",
      {"4", "10"}, {"3", "11"});
  // Two types, one bounded schema: the bounds apply to numbers only.
  expect_cases(R"({"type":["integer","string","null"],"minimum":1,"maximum":3})",
               {"1", "3", "\"0\"", "null"}, {"0", "4"});
  // Untyped: the bounds say "number".
  expect_cases(R"({"minimum":1})", {"1", "1.5"}, {"0.5", "\"x\""});
}

TEST(GrammarBounds, EnumValuesOutsideTheBoundsAreDropped) {
  expect_cases(R"({"enum":[-1,0,2,7,"x"],"minimum":0,"maximum":5})", {"0", "2", "\"x\""},
               {"-1", "7"});
  expect_cases(R"({"const":3,"exclusiveMaximum":3.5})", {"3"}, {});
  EXPECT_NE(error_of(R"({"const":3,"minimum":4})").find("no enum/const value"), std::string::npos);
}

// Every integer of a window, in range exactly when accepted.
TEST(GrammarBounds, IntegerRangesExhaustively) {
  struct Range {
    const char* schema;
    long lo, hi;  // inclusive; LONG_MIN / LONG_MAX: none
  };
  const Range ranges[] = {
      {R"({"type":"integer","minimum":0,"maximum":0})", 0, 0},
      {R"({"type":"integer","minimum":-5,"maximum":5})", -5, 5},
      {R"({"type":"integer","minimum":-1000,"maximum":-100})", -1000, -100},
      {R"({"type":"integer","minimum":7,"maximum":1000})", 7, 1000},
      {R"({"type":"integer","minimum":10,"maximum":99})", 10, 99},
      {R"({"type":"integer","exclusiveMinimum":-999,"exclusiveMaximum":0})", -998, -1},
      {R"({"type":"integer","minimum":123})", 123, LONG_MAX},
      {R"({"type":"integer","maximum":-45})", LONG_MIN, -45},
      {R"({"type":"integer","minimum":-1099,"maximum":1099})", -1099, 1099},
      {R"({"type":"integer","minimum":19.5,"maximum":300.01})", 20, 300},
      {R"({"type":"number","minimum":-20,"exclusiveMaximum":1001})", -20, 1000},
  };
  for (const Range& r : ranges) {
    auto grammar = compile_json_schema_text(r.schema);
    for (long x = -1300; x <= 1300; ++x) {
      const bool in = x >= r.lo && x <= r.hi;
      ASSERT_EQ(grammar_matches(*grammar, std::to_string(x)), in) << r.schema << " " << x;
    }
    for (long x : {99999L, -99999L, 123456789012345L, -123456789012345L}) {
      const bool in = x >= r.lo && x <= r.hi;
      EXPECT_EQ(grammar_matches(*grammar, std::to_string(x)), in) << r.schema << " " << x;
    }
  }
}

// Random decimals (up to 15 significant digits) against bounds, referee: strtod and double
// comparison, and every accepted text really is a number of that value.
TEST(GrammarBounds, RandomDecimalsAgainstBounds) {
  struct Bounds {
    const char* schema;
    double lo, hi;
    bool lo_exclusive, hi_exclusive;
  };
  const Bounds all[] = {
      {R"({"type":"number","minimum":0,"maximum":1})", 0, 1, false, false},
      {R"({"type":"number","exclusiveMinimum":-3,"exclusiveMaximum":12})", -3, 12, true, true},
      {R"({"type":"number","minimum":-2.25,"exclusiveMaximum":0.125})", -2.25, 0.125, false, true},
      {R"({"type":"number","exclusiveMinimum":0.3,"maximum":7.77})", 0.3, 7.77, true, false},
      {R"({"type":"number","minimum":-99.5})", -99.5, 1e300, false, false},
      {R"({"type":"number","exclusiveMaximum":-0.001})", -1e300, -0.001, false, true},
  };
  std::mt19937 rng(17);
  const auto digits = [&](int n, bool lead_nonzero) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s += char('0' + (i == 0 && lead_nonzero ? 1 + rng() % 9 : rng() % 10));
    return s;
  };
  for (const Bounds& b : all) {
    auto grammar = compile_json_schema_text(b.schema);
    int accepted = 0;
    for (int trial = 0; trial < 4000; ++trial) {
      std::string text = rng() % 2 ? "-" : "";
      const int int_len = int(rng() % 4);
      text += int_len == 0 ? "0" : digits(int_len, true);
      if (rng() % 3) text += "." + digits(1 + int(rng() % 6), false);
      const double x = std::strtod(text.c_str(), nullptr);
      const bool negative_zero = text[0] == '-' && x == 0;
      const bool in = !negative_zero && (x > b.lo || (x == b.lo && !b.lo_exclusive)) &&
                      (x < b.hi || (x == b.hi && !b.hi_exclusive));
      const bool got = grammar_matches(*grammar, text);
      ASSERT_EQ(got, in) << b.schema << " " << text;
      accepted += got;
    }
    EXPECT_GT(accepted, 100) << b.schema;
  }
}

TEST(GrammarBounds, RefusedBoundsSayWhy) {
  const auto expect_error = [](const std::string& schema, const std::vector<std::string>& words) {
    const std::string e = error_of(schema);
    EXPECT_FALSE(e.empty()) << "no error for " << schema;
    for (const auto& w : words) EXPECT_NE(e.find(w), std::string::npos) << e << " lacks " << w;
  };
  expect_error(R"({"type":"integer","minimum":5,"maximum":3})",
               {"no integer satisfies", "minimum 5", "maximum 3"});
  expect_error(
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":1.2,"maximum":1.8}}})",
      {"no integer satisfies", "#/properties/n"});
  expect_error(R"({"type":"integer","minimum":1e16})", {"no integer satisfies", "15 digits"});
  expect_error(R"({"type":"number","exclusiveMinimum":1,"exclusiveMaximum":1})",
               {"no number satisfies", "exclusiveMinimum 1", "exclusiveMaximum 1"});
  expect_error(R"({"type":"number","minimum":"0"})", {"'minimum' must be a number"});
  expect_error(R"({"type":"number","exclusiveMaximum":"x"})", {"exclusiveMaximum"});
  expect_error(R"({"type":"number","exclusiveMinimum":true})",
               {"'exclusiveMinimum': true needs 'minimum'"});
  expect_error(R"({"type":"number","minimum":0,"multipleOf":2})", {"'multipleOf'"});
  expect_error(R"({"anyOf":[{"type":"integer"}],"minimum":0})", {"anyOf", "minimum"});
}

}  // namespace
}  // namespace fak::grammar
