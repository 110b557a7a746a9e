#include "gateway/http/request_head.h"

#include <boost/beast/core/string.hpp>

namespace tokenmill::gateway {

namespace http = boost::beast::http;

std::optional<std::string> FoldedLineProblem(std::string_view raw_head) {
  for (size_t at = raw_head.find("\r\n"); at != std::string_view::npos;
       at = raw_head.find("\r\n", at + 2)) {
    if (at + 2 < raw_head.size() && (raw_head[at + 2] == ' ' || raw_head[at + 2] == '\t')) {
      return "a header line starts with a space or a tab (obsolete line folding): send each "
             "header on one line";
    }
  }
  return std::nullopt;
}

std::optional<std::string> FramingProblem(const http::fields& fields, unsigned version) {
  const size_t codings = fields.count(http::field::transfer_encoding);
  if (codings > 0) {
    if (version < 11) return "Transfer-Encoding is not allowed in an HTTP/1.0 request";
    const auto value = fields[http::field::transfer_encoding];
    if (codings > 1 || !boost::beast::iequals(value, "chunked")) {
      return "Transfer-Encoding must be 'chunked' alone, the only coding the gateway reads; "
             "got '" + std::string(value.data(), value.size()) + "'" +
             (codings > 1 ? " and more Transfer-Encoding headers" : "");
    }
    if (fields.count(http::field::content_length) > 0) {
      return "a request may not carry both Transfer-Encoding and Content-Length";
    }
  }
  if (version >= 11) {
    const size_t hosts = fields.count(http::field::host);
    if (hosts == 0) return "an HTTP/1.1 request needs a Host header";
    if (hosts > 1) return "a request may carry one Host header; it has " + std::to_string(hosts);
  }
  return std::nullopt;
}

}  // namespace tokenmill::gateway
