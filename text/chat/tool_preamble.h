// Tools on a chat template that has none (llama-server's "generic" format, our own wording):
// the tools' names, descriptions and parameter schemas go into the system message with the
// exact JSON a call must be, {"name": ..., "arguments": {...}}, which the plain-JSON
// tool-call parser (ToolCallFormat::kJson) reads and its grammar forces.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tokenmill {

// Whether a chat template reads the `tools` variable (as a name, not inside a longer one).
bool TemplateRendersTools(std::string_view template_source);

// The preamble for `tools` (OpenAI tool definitions; those without a function are skipped).
std::string GenericToolPreamble(const nlohmann::ordered_json& tools);

// `messages` with the preamble before the leading system message's text, or as a new system
// message first when they start otherwise (or that content is a list of parts).
nlohmann::ordered_json WithGenericToolPreamble(nlohmann::ordered_json messages,
                                               const nlohmann::ordered_json& tools);

}  // namespace tokenmill
