// GGUF metadata values: type names and sizes, array element access, value constructors.
#include <cstring>
#include <limits>

#include "core/error.h"
#include "io/gguf.h"

namespace fak {

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::BOOL:
      return "bool";
    case GgufType::STRING:
      return "string";
    case GgufType::ARRAY:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "unknown";
}

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::STRING:
    case GgufType::ARRAY:
      return 0;
  }
  return 0;
}

size_t GgufArray::size() const {
  if (type == GgufType::STRING) return strings.size();
  if (type == GgufType::ARRAY) return arrays.size();
  const size_t es = gguf_scalar_size(type);
  return es ? raw.size() / es : 0;
}

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Element i as (is_float, unsigned, signed, double) so the typed accessors share one switch.
struct Element {
  enum Kind { kUnsigned, kSigned, kFloat } kind;
  uint64_t u;
  int64_t i;
  double f;
};

Element element(const GgufArray& a, size_t idx) {
  check(idx < a.size(), "gguf array index " + std::to_string(idx) + " out of range (size " +
                            std::to_string(a.size()) + ")");
  const uint8_t* p = a.raw.data() + idx * gguf_scalar_size(a.type);
  switch (a.type) {
    case GgufType::U8:
    case GgufType::BOOL:
      return {Element::kUnsigned, p[0], 0, 0};
    case GgufType::U16:
      return {Element::kUnsigned, load<uint16_t>(p), 0, 0};
    case GgufType::U32:
      return {Element::kUnsigned, load<uint32_t>(p), 0, 0};
    case GgufType::U64:
      return {Element::kUnsigned, load<uint64_t>(p), 0, 0};
    case GgufType::I8:
      return {Element::kSigned, 0, load<int8_t>(p), 0};
    case GgufType::I16:
      return {Element::kSigned, 0, load<int16_t>(p), 0};
    case GgufType::I32:
      return {Element::kSigned, 0, load<int32_t>(p), 0};
    case GgufType::I64:
      return {Element::kSigned, 0, load<int64_t>(p), 0};
    case GgufType::F32:
      return {Element::kFloat, 0, 0, load<float>(p)};
    case GgufType::F64:
      return {Element::kFloat, 0, 0, load<double>(p)};
    default:
      break;
  }
  fail("gguf array of " + std::string(gguf_type_name(a.type)) + " has no numeric elements");
}

}  // namespace

uint64_t GgufArray::u64(size_t idx) const {
  const Element e = element(*this, idx);
  if (e.kind == Element::kUnsigned) return e.u;
  check(e.kind == Element::kSigned && e.i >= 0,
        "gguf array element " + std::to_string(idx) + " is not a non-negative integer");
  return uint64_t(e.i);
}

int64_t GgufArray::i64(size_t idx) const {
  const Element e = element(*this, idx);
  if (e.kind == Element::kSigned) return e.i;
  check(e.kind == Element::kUnsigned && e.u <= uint64_t(std::numeric_limits<int64_t>::max()),
        "gguf array element " + std::to_string(idx) + " is not an int64");
  return int64_t(e.u);
}

double GgufArray::f64(size_t idx) const {
  const Element e = element(*this, idx);
  if (e.kind == Element::kFloat) return e.f;
  return e.kind == Element::kSigned ? double(e.i) : double(e.u);
}

GgufArray GgufArray::numbers(GgufType type, const void* data, size_t count) {
  const size_t es = gguf_scalar_size(type);
  check(es != 0, "GgufArray::numbers: " + std::string(gguf_type_name(type)) + " is not numeric");
  GgufArray a;
  a.type = type;
  a.raw.resize(es * count);
  if (count) std::memcpy(a.raw.data(), data, es * count);
  return a;
}

GgufArray GgufArray::of_strings(std::vector<std::string> strings) {
  GgufArray a;
  a.type = GgufType::STRING;
  a.strings = std::move(strings);
  return a;
}

GgufArray GgufArray::of_arrays(std::vector<GgufArray> arrays) {
  GgufArray a;
  a.type = GgufType::ARRAY;
  a.arrays = std::move(arrays);
  return a;
}

GgufValue GgufValue::unsigned_of(GgufType t, uint64_t v) {
  GgufValue r;
  r.type = t;
  r.u = v;
  return r;
}

GgufValue GgufValue::signed_of(GgufType t, int64_t v) {
  GgufValue r;
  r.type = t;
  r.i = v;
  return r;
}

GgufValue GgufValue::make_f32(float v) {
  GgufValue r;
  r.type = GgufType::F32;
  r.f = v;
  return r;
}

GgufValue GgufValue::make_f64(double v) {
  GgufValue r;
  r.type = GgufType::F64;
  r.f = v;
  return r;
}

GgufValue GgufValue::make_string(std::string v) {
  GgufValue r;
  r.type = GgufType::STRING;
  r.s = std::move(v);
  return r;
}

GgufValue GgufValue::make_array(GgufArray v) {
  GgufValue r;
  r.type = GgufType::ARRAY;
  r.array = std::move(v);
  return r;
}

int64_t GgufTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // the reader has checked this product does not overflow
  return n;
}

}  // namespace fak
