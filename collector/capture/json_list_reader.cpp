#include "collector/capture/json_list_reader.h"

#include <istream>
#include <streambuf>
#include <utility>
#include <vector>

namespace trainscope::capture {
namespace {

using nlohmann::json;

// A ByteSource as a std::streambuf, which nlohmann's SAX parser reads a character at a time.
// An error of the source ends the stream; the reader reports it in place of the parse error
// it causes.
class SourceBuffer final : public std::streambuf {
 public:
  explicit SourceBuffer(ByteSource& source) : source_(source) {}
  const Status& error() const { return error_; }

 protected:
  int_type underflow() override {
    if (!error_) return traits_type::eof();
    auto n = source_.read(buffer_.data(), buffer_.size());
    if (!n) {
      error_ = n.status();
      return traits_type::eof();
    }
    if (*n == 0) return traits_type::eof();
    setg(buffer_.data(), buffer_.data(), buffer_.data() + *n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  ByteSource& source_;
  std::vector<char> buffer_ = std::vector<char>(size_t{256} << 10);
  Status error_;
};

// nlohmann's SAX events, folded into "an entry of the list is complete". Depth counts open
// arrays and objects: the document's object is depth 1, the list depth 2, an entry's own
// members from depth 3. Each callback returns false to stop the parse, with error_ set.
class ListHandler {
 public:
  // NOLINTBEGIN(readability-identifier-naming): the names nlohmann's SAX interface calls
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  ListHandler(const std::string& listKey, const ListReadLimits& limits, const ListEntryFn& onEntry)
      : listKey_(listKey), limits_(limits), onEntry_(onEntry) {}

  const std::string& error() const { return error_; }
  bool sawList() const { return sawList_; }
  uint64_t entries() const { return entries_; }

  bool null() { return value(json(nullptr), kValueCost); }
  bool boolean(bool v) { return value(json(v), kValueCost); }
  bool number_integer(number_integer_t v) { return value(json(v), kValueCost); }
  bool number_unsigned(number_unsigned_t v) { return value(json(v), kValueCost); }
  bool number_float(number_float_t v, const string_t& /*text*/) {
    return value(json(v), kValueCost);
  }
  bool string(string_t& v) {
    const uint64_t cost = kValueCost + v.size();
    return value(json(std::move(v)), cost);
  }
  bool binary(binary_t& /*v*/) { return fail("binary values are not JSON"); }

  bool start_object(std::size_t /*size*/) { return open(json::value_t::object); }
  bool start_array(std::size_t /*size*/) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    if (depth_ == 1) {
      listNext_ = k == listKey_;
      if (listNext_ && sawList_) return fail("\"" + listKey_ + "\" appears twice");
      return true;
    }
    if (inEntry()) {
      if (!charge(kValueCost + k.size())) return false;
      if (building()) key_ = std::move(k);
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*e*/) {
    if (error_.empty()) error_ = "not valid JSON (at byte " + std::to_string(position) + ")";
    return false;
  }
  // NOLINTEND(readability-identifier-naming)

 private:
  static constexpr uint64_t kValueCost = 32;  // about one nlohmann::json and its node

  bool inEntry() const { return inList_ && depth_ >= 3; }
  bool building() const { return static_cast<bool>(onEntry_); }

  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }

  bool charge(uint64_t bytes) {
    entryBytes_ += bytes;
    if (entryBytes_ <= limits_.maxEntryBytes) return true;
    return fail("an entry of \"" + listKey_ + "\" takes more than " +
                std::to_string(limits_.maxEntryBytes >> 20) + " MiB");
  }

  // Where a new value of an entry goes: the entry itself, or the container open above it.
  json* place(json v) {
    if (stack_.empty()) {
      entry_ = std::move(v);
      return &entry_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }

  void finishEntry() {
    ++entries_;
    if (building()) {
      onEntry_(entry_);
      entry_ = json();
    }
    entryBytes_ = 0;
  }

  bool value(json v, uint64_t cost) {
    if (depth_ == 0) return fail("not a JSON object");
    if (depth_ == 1) {
      if (listNext_) return fail("\"" + listKey_ + "\" is not a list");
      return true;
    }
    if (!inList_) return true;  // inside another member: checked, skipped
    if (!charge(cost)) return false;
    if (building()) place(std::move(v));
    if (depth_ == 2) finishEntry();  // a scalar entry
    return true;
  }

  bool open(json::value_t type) {
    if (++depth_ > limits_.maxDepth) {
      return fail("nested deeper than " + std::to_string(limits_.maxDepth) + " levels");
    }
    if (depth_ == 1) {
      if (type != json::value_t::object) return fail("not a JSON object");
      return true;
    }
    if (depth_ == 2 && listNext_) {
      listNext_ = false;
      if (type != json::value_t::array) return fail("\"" + listKey_ + "\" is not a list");
      inList_ = true;
      sawList_ = true;
      return true;
    }
    if (depth_ == 2) listNext_ = false;
    if (!inEntry()) return true;
    if (!charge(kValueCost)) return false;
    if (building()) stack_.push_back(place(json(type)));
    return true;
  }

  bool close() {
    if (inEntry()) {
      if (building()) stack_.pop_back();
      if (depth_ == 3) finishEntry();
    } else if (inList_ && depth_ == 2) {
      inList_ = false;
    }
    --depth_;
    return true;
  }

  const std::string& listKey_;
  const ListReadLimits& limits_;
  const ListEntryFn& onEntry_;
  int depth_ = 0;
  bool listNext_ = false;  // the last key of the document's object named the list
  bool inList_ = false;
  bool sawList_ = false;
  uint64_t entries_ = 0;
  uint64_t entryBytes_ = 0;
  json entry_;
  std::vector<json*> stack_;  // the entry's open containers, innermost last
  std::string key_;
  std::string error_;
};

}  // namespace

Result<ListReadOutcome> readJsonList(ByteSource& source, const std::string& listKey,
                                     const ListReadLimits& limits, const ListEntryFn& onEntry) {
  using R = Result<ListReadOutcome>;
  SourceBuffer buffer(source);
  std::istream in(&buffer);
  ListHandler handler(listKey, limits, onEntry);
  const bool ok = json::sax_parse(in, &handler, json::input_format_t::json, true);
  if (!buffer.error()) return buffer.error();
  if (!ok) return R::error(handler.error().empty() ? "not valid JSON" : handler.error());
  if (!handler.sawList()) return R::error("has no " + listKey + " list");
  ListReadOutcome out;
  out.entries = handler.entries();
  return out;
}

}  // namespace trainscope::capture
