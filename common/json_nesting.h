// One bound on how deep lists and objects may nest in JSON from outside the process: a request
// body, a string field that holds JSON (a tool call's arguments, tools_json, a schema), and JSON
// a model writes. Code that copies, prints, compares or converts JSON recurses once per level,
// so an unbounded depth is a stack overflow (100000 levels of tool-call arguments, 800 KB,
// killed the server). Every such walk checks this bound first, with the helpers below, which
// never recurse themselves.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenmill {

// Levels of lists and objects, the outermost counted: `{}` is 1, `{"a":[1]}` is 2. Deeper JSON
// is refused; real tool arguments, schemas and template variables stay far below it.
inline constexpr int kMaxJsonNesting = 64;

// Whether JSON text opens more than `limit` lists and objects inside each other. A scan of its
// brackets outside strings, so it is safe before parsing, on valid JSON or not.
bool JsonTextNestsDeeperThan(std::string_view text, int limit = kMaxJsonNesting);

// The same over parsed JSON (nlohmann's json or ordered_json), without recursion.
template <class Json>
bool JsonNestsDeeperThan(const Json& value, int limit = kMaxJsonNesting) {
  std::vector<std::pair<const Json*, int>> pending = {{&value, 1}};
  while (!pending.empty()) {
    const auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) continue;
    if (depth > limit) return true;
    for (const Json& child : *node) pending.emplace_back(&child, depth + 1);
  }
  return false;
}

// The refusal's words, naming the field: "FIELD nests deeper than 64 levels of lists and
// objects".
std::string JsonNestingRefusal(std::string_view field, int limit = kMaxJsonNesting);

}  // namespace tokenmill
