#include "gateway/http/request_body.h"

#include <string>

namespace tokenmill::gateway {
namespace {

// nlohmann's DOM builder behind checks that stop the parse at the first value over a limit.
// (Not json::parse with a callback: its parser scans the parent's members for a discarded
// value after every object, quadratic in `[{},{},...]`: 8 MiB of it held a thread for hours.)
template <class Json>
class BoundedDomBuilder {
 public:
  using Dom = nlohmann::detail::json_sax_dom_parser<Json>;

  explicit BoundedDomBuilder(Json& root) : dom_(root, /*allow_exceptions=*/false) {}

  bool too_deep() const { return too_deep_; }
  bool too_many() const { return too_many_; }
  bool too_many_allocated() const { return too_many_allocated_; }

  bool null() { return Count() && dom_.null(); }
  bool boolean(bool value) { return Count() && dom_.boolean(value); }
  bool number_integer(typename Json::number_integer_t value) {
    return Count() && dom_.number_integer(value);
  }
  bool number_unsigned(typename Json::number_unsigned_t value) {
    return Count() && dom_.number_unsigned(value);
  }
  bool number_float(typename Json::number_float_t value, const typename Json::string_t& text) {
    return Count() && dom_.number_float(value, text);
  }
  bool string(typename Json::string_t& value) { return CountAllocated() && dom_.string(value); }
  bool binary(typename Json::binary_t& value) { return CountAllocated() && dom_.binary(value); }
  bool key(typename Json::string_t& name) { return CountAllocated() && dom_.key(name); }
  bool start_object(size_t size) { return Open() && dom_.start_object(size); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(size_t size) { return Open() && dom_.start_array(size); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(size_t position, const std::string& token, const Exception& error) {
    return dom_.parse_error(position, token, error);
  }

 private:
  bool Count() {
    if (++values_ <= kMaxBodyValues) return true;
    too_many_ = true;
    return false;
  }
  bool Open() {
    if (depth_ >= kMaxBodyNesting) {
      too_deep_ = true;
      return false;
    }
    ++depth_;
    return CountAllocated();
  }
  // A string, list or object: heap memory besides its 16 bytes.
  bool CountAllocated() {
    if (++allocated_ <= kMaxBodyStringsAndContainers) return Count();
    too_many_allocated_ = true;
    return false;
  }

  Dom dom_;
  int depth_ = 0;  // lists and objects open around the next value
  size_t values_ = 0;
  size_t allocated_ = 0;  // strings, lists and objects among values_
  bool too_deep_ = false;
  bool too_many_ = false;
  bool too_many_allocated_ = false;
};

template <class Json>
std::optional<HttpError> ParseBounded(std::string_view text, Json& body) {
  body = Json();
  BoundedDomBuilder<Json> builder(body);
  const bool parsed = Json::sax_parse(text, &builder);
  if (builder.too_deep()) {
    body = Json();
    return BadRequest(JsonNestingRefusal("the request body", kMaxBodyNesting));
  }
  if (builder.too_many()) {
    body = Json();
    return BadRequest("the request body has more than " + std::to_string(kMaxBodyValues) +
                      " JSON values and object keys: send fewer prompts, token ids, messages or "
                      "logit_bias entries per request");
  }
  if (builder.too_many_allocated()) {
    body = Json();
    return BadRequest("the request body has more than " +
                      std::to_string(kMaxBodyStringsAndContainers) +
                      " strings, lists and objects (object keys included): send fewer prompts, "
                      "messages or logit_bias entries per request");
  }
  if (!parsed) {
    body = Json();
    return BadRequest("the request body is not valid JSON");
  }
  return std::nullopt;
}

}  // namespace

std::optional<HttpError> ParseRequestBody(std::string_view text, nlohmann::json& body) {
  return ParseBounded(text, body);
}

std::optional<HttpError> ParseRequestBody(std::string_view text, nlohmann::ordered_json& body) {
  return ParseBounded(text, body);
}

}  // namespace tokenmill::gateway
