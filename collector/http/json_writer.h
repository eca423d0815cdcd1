// A small, fast JSON text writer for the API's large replies (a steps page can hold 100,000
// rows; building nlohmann objects for those costs seconds). Appends to one string; the caller
// is responsible for well-formed nesting. Not thread-safe; one writer per reply.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainscope::http {

class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(*out) {}

  void beginObject() { open('{'); }
  void endObject() { close('}'); }
  void beginArray() { open('['); }
  void endArray() { close(']'); }
  // A key inside an object; the next value call writes its value.
  void key(std::string_view k);

  void value(std::string_view s);
  void value(const char* s) { value(std::string_view(s)); }
  void value(int64_t v);
  void value(uint64_t v);
  void value(int32_t v) { value(static_cast<int64_t>(v)); }
  void value(uint32_t v) { value(static_cast<uint64_t>(v)); }
  void value(double v);  // non-finite values are written as 0 (JSON has no NaN/inf)
  void value(bool v);
  void null();

  template <typename T>
  void field(std::string_view k, const T& v) {
    key(k);
    value(v);
  }

 private:
  void open(char c);
  void close(char c);
  void separate();

  std::string& out_;
  bool first_ = true;      // no element written yet at the current nesting level
  bool afterKey_ = false;  // the next value belongs to a key just written
};

// Appends `s` as a JSON string literal. Invalid UTF-8 is replaced by U+FFFD, never rejected:
// job and op names come from outside.
void appendJsonString(std::string& out, std::string_view s);

}  // namespace trainscope::http
