// The checks on a request head that Boost.Beast's parser does not make, against request
// smuggling: a proxy in front of the gateway and the gateway must agree where each request ends.
// Beast rejects Content-Length values that differ and Transfer-Encoding: chunked beside a
// Content-Length in some orders, but accepts other codings ("gzip, chunked" read as chunked,
// "identity" or "xchunked" read as no body, "gzip" beside a Content-Length), unfolds obsolete
// folded lines, and accepts HTTP/1.1 without a Host or with two. Each is a 400 here, and the
// connection closes (where the request ends is unknown).
#pragma once

#include <boost/beast/http/fields.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tokenmill::gateway {

// Why the raw head (request line and header lines, up to its empty line) is refused: a line
// that starts with a space or a tab (obs-fold, RFC 9112 section 5.2). nullopt: none does.
std::optional<std::string> FoldedLineProblem(std::string_view raw_head);

// Why a parsed head's framing is refused (`version`: 10 or 11): Transfer-Encoding other than
// one "chunked", on HTTP/1.0, or beside Content-Length; HTTP/1.1 without exactly one Host.
std::optional<std::string> FramingProblem(const boost::beast::http::fields& fields,
                                          unsigned version);

}  // namespace tokenmill::gateway
