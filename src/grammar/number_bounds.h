// Numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) as exact decimals, and the
// byte automaton of the JSON numbers that satisfy them, compared digit by digit.
//
// Under bounds a number is written without exponent and with at most 15 significant digits in all
// (kMaxIntDigits / kMaxFracDigits per part as ever; every digit from the first non-zero one counts,
// trailing zeros too). Two reasons: with an exponent the comparison would need to shift digits by
// up to 99 places, and with at most 15 significant digits a decimal and the double it parses to
// compare alike with any bound (DBL_DIG is 15: such decimals round-trip, so rounding cannot make
// two of them equal, nor one equal to a bound's double, whose shortest digits are what we compare
// with). So "99.999999999999999" under exclusiveMaximum 100, which a double reader sees as 100, is
// never written. "-0" is not written either (0 is, as "0").
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/json.h"
#include "grammar/automaton.h"

namespace fak::grammar {

// value = (negative ? -1 : 1) * 0.digits * 10^exponent, digits without leading or trailing zeros
// (empty for zero, which is never negative).
struct Decimal {
  bool negative = false;
  std::string digits;
  int64_t exponent = 0;

  // Integers exactly; a double by its shortest round-trip digits (the value the schema's text
  // meant, when that text had at most 17 significant digits).
  static Decimal from_json(const fak::ojson& number);
  bool is_zero() const { return digits.empty(); }
  std::string int_digits() const;   // of the magnitude, no leading zeros ("" for < 1)
  std::string frac_digits() const;  // of the magnitude, no trailing zeros
};

int compare(const Decimal& x, const Decimal& y);  // -1, 0, 1

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

struct NumberBounds {
  std::optional<NumberBound> lower, upper;
};

// Whether a value is within the bounds (an enum value checked against them).
bool within(const NumberBounds& bounds, const Decimal& value);

// True when every number of the unbounded syntax (integers: up to kMaxIntDigits digits; numbers:
// with fraction and exponent too) satisfies the bounds, which then need no automaton.
bool bounds_vacuous(const NumberBounds& bounds, bool integer);

// The automaton of the numbers (integers when `integer`) within the bounds, or nullptr when no
// number the grammar can write (see above) is.
std::shared_ptr<const ByteDfa> bounded_number_automaton(const NumberBounds& bounds, bool integer);

}  // namespace fak::grammar
