// API keys sent as "Authorization: Bearer <key>" (the gateway's HTTP header, the server's
// gRPC `authorization` metadata), compared without leaking the key through timing.
#pragma once

#include <optional>
#include <string_view>

namespace tokenmill {

// Equal strings, in time that depends only on their lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The key of an `authorization` value "Bearer <key>" (the scheme in any case, RFC 7235); none
// for another scheme.
std::optional<std::string_view> BearerToken(std::string_view authorization);

// `authorization` is "Bearer <key>" (the scheme in any case, RFC 7235) with exactly `key`.
bool BearerTokenMatches(std::string_view authorization, std::string_view key);

}  // namespace tokenmill
