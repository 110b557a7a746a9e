// A request body parsed into JSON with bounds on what it may cost: its nesting depth and its
// number of values. Every route that takes a JSON body parses it here.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string_view>

#include "common/json_nesting.h"
#include "gateway/http/http_error.h"

namespace tokenmill::gateway {

// Deeper bodies are refused: a value nested this deep is never meaningful, and dumping one
// (tools are passed on as JSON text) recursed once per level until the stack overflowed
// (100000 levels, 200 KB, crashed the gateway). The one bound on client JSON.
inline constexpr int kMaxBodyNesting = kMaxJsonNesting;

// Values (numbers, strings, booleans, nulls, lists, objects) and object keys a body may
// hold, and how many of them may be strings, lists or objects (keys included), which cost
// 64 to 100 bytes each as JSON where a number costs 16 (+ its list's spare room). Unbounded,
// 8 MiB of tiny values took 75 to 180 MB (docs/bad-inputs.md).
// The most a legitimate request needs: 64 prompts (the gateway's limit) of 8192 token ids
// (the default model's context) = 524288 values, of which 65 lists; logit_bias over a whole
// vocabulary (49152) = 98304 values, of which 49152 keys; a chat of 10000 messages = 50000
// (each an object of two keys and two strings). Each limit is the power of two at least twice
// the largest of these.
inline constexpr size_t kMaxBodyValues = size_t{1} << 20;
inline constexpr size_t kMaxBodyStringsAndContainers = size_t{1} << 17;

// `text` as JSON into `body`, or the 400 to answer: not JSON, or over one of the limits
// above. Parsing stops at the first value over a limit, so a refused body never costs more
// than the limits allow.
std::optional<HttpError> ParseRequestBody(std::string_view text, nlohmann::json& body);
// The same with objects in the order of the text (for what keeps its order: a JSON Schema's
// properties are generated in the order they are written).
std::optional<HttpError> ParseRequestBody(std::string_view text, nlohmann::ordered_json& body);

}  // namespace tokenmill::gateway
