// Bounded numbers as a digit automaton; see number_bounds.h. The automaton's states are explored
// from the start: where we are in the number's syntax (sign, integer part, fraction), how many
// digits so far, and for each bound on the magnitude how the digits read so far compare with it.
#include "grammar/number_bounds.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "core/error.h"
#include "core/json.h"
#include "grammar/nodes.h"

namespace fak::grammar {

namespace {

constexpr uint32_t kMaxSignificantDigits = 15;

Decimal from_digit_text(bool negative, std::string digits, int64_t exponent) {
  // digits may carry leading / trailing zeros here; value = 0.digits * 10^exponent
  size_t lead = 0;
  while (lead < digits.size() && digits[lead] == '0') ++lead;
  digits.erase(0, lead);
  exponent -= int64_t(lead);
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  Decimal d;
  if (digits.empty()) return d;  // zero, never negative
  d.negative = negative;
  d.digits = std::move(digits);
  d.exponent = exponent;
  return d;
}

}  // namespace

Decimal Decimal::from_json(const fak::ojson& number) {
  if (number.is_number_unsigned()) {
    const std::string text = std::to_string(number.get<uint64_t>());
    return from_digit_text(false, text, int64_t(text.size()));
  }
  if (number.is_number_integer()) {
    const int64_t v = number.get<int64_t>();
    std::string text = std::to_string(v);
    const bool negative = v < 0;
    if (negative) text.erase(0, 1);
    return from_digit_text(negative, text, int64_t(text.size()));
  }
  const double x = number.get<double>();
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  check(ec == std::errc(), "number bound: cannot print " + number.dump());
  // d.ddde[+-]XX
  const std::string text(buf, end);
  size_t i = 0;
  const bool negative = text[0] == '-';
  if (negative) ++i;
  std::string digits;
  for (; i < text.size() && text[i] != 'e'; ++i)
    if (text[i] != '.') digits += text[i];
  const int64_t e = std::stoll(text.substr(i + 1));
  return from_digit_text(negative, digits, e + 1);
}

std::string Decimal::int_digits() const {
  if (exponent <= 0) return "";
  std::string out = digits.substr(0, size_t(std::min<int64_t>(exponent, int64_t(digits.size()))));
  if (exponent > int64_t(digits.size())) out.append(size_t(exponent) - digits.size(), '0');
  return out;
}

std::string Decimal::frac_digits() const {
  if (exponent >= int64_t(digits.size())) return "";
  if (exponent >= 0) return digits.substr(size_t(exponent));
  return std::string(size_t(-exponent), '0') + digits;
}

namespace {

int compare_magnitude(const Decimal& x, const Decimal& y) {
  if (x.is_zero() || y.is_zero()) return int(!x.is_zero()) - int(!y.is_zero());
  if (x.exponent != y.exponent) return x.exponent < y.exponent ? -1 : 1;
  const int c = x.digits.compare(y.digits);  // no trailing zeros: a prefix is the smaller
  return (c > 0) - (c < 0);
}

}  // namespace

int compare(const Decimal& x, const Decimal& y) {
  if (x.negative != y.negative) return x.negative ? -1 : 1;
  const int m = compare_magnitude(x, y);
  return x.negative ? -m : m;
}

bool within(const NumberBounds& bounds, const Decimal& value) {
  if (bounds.lower) {
    const int c = compare(value, bounds.lower->value);
    if (c < 0 || (c == 0 && bounds.lower->exclusive)) return false;
  }
  if (bounds.upper) {
    const int c = compare(value, bounds.upper->value);
    if (c > 0 || (c == 0 && bounds.upper->exclusive)) return false;
  }
  return true;
}

bool bounds_vacuous(const NumberBounds& bounds, bool integer) {
  // The largest magnitude the unbounded syntax writes: 15 nines for integers; below 10^114 for
  // numbers (15 integer digits and an exponent of at most 99).
  Decimal reach = integer ? Decimal{false, std::string(kMaxIntDigits, '9'), kMaxIntDigits}
                          : Decimal{false, "1", 115};
  Decimal low = reach;
  low.negative = true;
  const auto holds = [](const std::optional<NumberBound>& bound, const Decimal& extreme, int side) {
    if (!bound) return true;
    const int c = compare(bound->value, extreme) * side;  // side -1: lower bound
    return c > 0 || (c == 0 && !bound->exclusive);
  };
  return holds(bounds.lower, low, -1) && holds(bounds.upper, reach, 1);
}

namespace {

// A bound on the magnitude (the number without its sign).
struct MagnitudeBound {
  std::string int_digits, frac_digits;
  bool exclusive = false;
};

// The numbers of one sign: possible at all, and bounds on their magnitude.
struct Branch {
  bool possible = true;
  std::optional<MagnitudeBound> bound[2];  // lower, upper
};

MagnitudeBound magnitude(const NumberBound& b) {
  return {b.value.int_digits(), b.value.frac_digits(), b.exclusive};
}

// value >= lower and value <= upper, split by sign. Non-negative numbers: magnitude = value.
// Negative ones: magnitude = -value, so the bounds swap sides; their magnitude must also be above
// zero (no "-0").
void split_by_sign(const NumberBounds& bounds, Branch& plus, Branch& minus) {
  const Decimal zero;
  if (bounds.lower) {
    const int c = compare(bounds.lower->value, zero);
    if (c > 0 || (c == 0 && bounds.lower->exclusive)) plus.bound[0] = magnitude(*bounds.lower);
    if (c >= 0)
      minus.possible = false;
    else
      minus.bound[1] = magnitude(*bounds.lower);
  }
  minus.bound[0] = MagnitudeBound{"", "", true};  // magnitude > 0
  if (bounds.upper) {
    const int c = compare(bounds.upper->value, zero);
    if (c < 0 || (c == 0 && bounds.upper->exclusive))
      plus.possible = false;
    else
      plus.bound[1] = magnitude(*bounds.upper);
    if (c < 0) minus.bound[0] = magnitude(*bounds.upper);
  }
}

enum Phase : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac };

// One state. cmp[i] compares the digits read so far with bound i: in the integer part, the first
// difference over the bound's integer digits (their count decides first, at the end of the part);
// in the fraction, the whole comparison so far (0: equal up to here).
struct Key {
  uint8_t phase = kStart;
  uint8_t negative = 0;
  uint8_t int_digits = 0, frac_digits = 0, significant = 0;
  int8_t cmp[2] = {0, 0};

  uint64_t pack() const {
    return uint64_t(phase) | uint64_t(negative) << 8 | uint64_t(int_digits) << 16 |
           uint64_t(frac_digits) << 24 | uint64_t(significant) << 32 |
           uint64_t(uint8_t(cmp[0])) << 40 | uint64_t(uint8_t(cmp[1])) << 48;
  }
};

int8_t sign_of(int x) {
  return int8_t((x > 0) - (x < 0));
}

// At the end of the integer part: shorter is smaller, longer is larger, else the first difference.
int8_t integer_part_result(int8_t cmp, size_t digits, const MagnitudeBound& b) {
  if (digits != b.int_digits.size()) return digits < b.int_digits.size() ? -1 : 1;
  return cmp;
}

class Builder {
 public:
  Builder(const NumberBounds& bounds, bool integer) : integer_(integer) {
    split_by_sign(bounds, branch_[0], branch_[1]);
  }

  std::shared_ptr<const ByteDfa> build() {
    intern(Key{});
    for (uint32_t s = 0; s < keys_.size(); ++s) {
      const Key key = keys_[s];  // copy: interning grows keys_
      for (int byte : {'-', '.', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}) {
        Key next;
        if (!step(key, char(byte), next)) continue;
        draft_.add_edge(s, uint8_t(byte), uint8_t(byte), intern(next));
      }
    }
    return finish_dfa(draft_, "number bounds");
  }

 private:
  const Branch& branch(const Key& k) const { return branch_[k.negative]; }

  uint32_t intern(const Key& key) {
    auto [it, fresh] = ids_.emplace(key.pack(), uint32_t(keys_.size()));
    if (fresh) {
      keys_.push_back(key);
      draft_.add_state(accepting(key));
    }
    return it->second;
  }

  // The comparison of the whole magnitude with bound i, for a number that ends here.
  int8_t result(const Key& k, int i) const {
    const MagnitudeBound& b = *branch(k).bound[i];
    if (k.phase == kFrac)
      return k.cmp[i] == 0 && k.frac_digits < b.frac_digits.size() ? -1 : k.cmp[i];
    const int8_t r = integer_part_result(k.cmp[i], k.phase == kZero ? 0 : k.int_digits, b);
    return r == 0 && !b.frac_digits.empty() ? -1 : r;  // the bound's fraction is not zero
  }

  bool accepting(const Key& k) const {
    if (k.phase != kZero && k.phase != kInt && k.phase != kFrac) return false;
    const Branch& br = branch(k);
    for (int i = 0; i < 2; ++i) {
      if (!br.bound[i]) continue;
      const int8_t r = result(k, i);
      const int8_t want = i == 0 ? 1 : -1;
      if (!(r == want || (r == 0 && !br.bound[i]->exclusive))) return false;
    }
    return true;
  }

  bool step(const Key& k, char c, Key& next) const {
    next = k;
    const bool digit = c >= '0' && c <= '9';
    switch (k.phase) {
      case kStart:
        if (c == '-') {
          if (!branch_[1].possible) return false;
          next.phase = kMinus;
          next.negative = 1;
          return true;
        }
        if (!branch_[0].possible) return false;
        [[fallthrough]];
      case kMinus:
        if (!digit) return false;
        if (c == '0') {
          next.phase = kZero;
          return true;
        }
        next.phase = kInt;
        return int_digit(next, c);
      case kInt:
        if (digit) return next.int_digits < kMaxIntDigits && int_digit(next, c);
        [[fallthrough]];
      case kZero:
        if (c != '.' || integer_) return false;
        for (int i = 0; i < 2; ++i)
          if (branch(k).bound[i])
            next.cmp[i] = integer_part_result(k.cmp[i], k.phase == kZero ? 0 : k.int_digits,
                                              *branch(k).bound[i]);
        next.phase = kDot;
        next.int_digits = 0;  // the fraction needs only the significant digits so far
        return true;
      case kDot:
      case kFrac:
        if (!digit || next.frac_digits >= kMaxFracDigits) return false;
        if (c != '0' || next.significant > 0) {
          if (next.significant >= kMaxSignificantDigits) return false;
          ++next.significant;
        }
        for (int i = 0; i < 2; ++i) {
          const auto& b = branch(k).bound[i];
          if (!b || next.cmp[i] != 0) continue;
          const char bd =
              next.frac_digits < b->frac_digits.size() ? b->frac_digits[next.frac_digits] : '0';
          next.cmp[i] = sign_of(c - bd);
        }
        ++next.frac_digits;
        next.phase = kFrac;
        return true;
    }
    return false;
  }

  // One more digit of a non-zero integer part.
  bool int_digit(Key& next, char c) const {
    const size_t pos = next.int_digits;
    for (int i = 0; i < 2; ++i) {
      const auto& b = branch(next).bound[i];
      if (!b) continue;
      if (pos >= b->int_digits.size()) {
        next.cmp[i] = 1;  // longer than the bound's integer part: larger, whatever came before
      } else if (next.cmp[i] == 0) {
        next.cmp[i] = sign_of(c - b->int_digits[pos]);
      }
    }
    ++next.int_digits;
    next.significant = next.int_digits;
    return true;
  }

  bool integer_;
  Branch branch_[2];  // non-negative, negative
  std::vector<Key> keys_;
  std::unordered_map<uint64_t, uint32_t> ids_;
  DfaDraft draft_;
};

}  // namespace

std::shared_ptr<const ByteDfa> bounded_number_automaton(const NumberBounds& bounds, bool integer) {
  return Builder(bounds, integer).build();
}

}  // namespace fak::grammar
