// A Beast body that sends a ByteSource piece by piece (a capture file, possibly decompressed on
// the way), so a download holds one 64 KiB buffer instead of the whole file. Used by the HTTP
// server on a connection's strand; one serializer reads one source.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>

#include "common/byte_source.h"

namespace trainscope::http {

// Beast's Body concept names its members (value_type, writer, const_buffers_type).
// NOLINTBEGIN(readability-identifier-naming)
struct SourceBody {
  struct value_type {
    std::shared_ptr<ByteSource> source;
    // Why the stream broke, set by the writer when a read fails (the response is cut there).
    std::shared_ptr<std::string> error = std::make_shared<std::string>();
  };

  class writer {
   public:
    using const_buffers_type = boost::asio::const_buffer;

    template <bool IsRequest, class Fields>
    writer(const boost::beast::http::header<IsRequest, Fields>& /*header*/, const value_type& body)
        : body_(body) {}

    void init(boost::beast::error_code& ec) { ec = {}; }

    boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec) {
      auto n = body_.source->read(buffer_.data(), buffer_.size());
      if (!n) {
        *body_.error = n.message();
        ec = boost::beast::errc::make_error_code(boost::beast::errc::io_error);
        return boost::none;
      }
      ec = {};
      if (*n == 0) return boost::none;  // the end
      return std::make_pair(const_buffers_type(buffer_.data(), *n), true);
    }

   private:
    const value_type& body_;
    std::array<char, size_t{64} * 1024> buffer_{};
  };
};
// NOLINTEND(readability-identifier-naming)

}  // namespace trainscope::http
