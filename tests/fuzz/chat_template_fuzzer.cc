// libFuzzer target: a chat template source and a messages JSON array, split at the first NUL
// byte of the input, must compile and render or fail with a Status, never crash, and mark
// the bytes the template wrote consistently. Templates come from the operator (GGUF or
// --chat-template), messages from any client.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/chat/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  if (split == input.npos) return 0;
  auto chat_template = tokenmill::ChatTemplate::FromSource(
      std::string(input.substr(0, split)), {.bos_token = "<s>", .eos_token = "</s>"});
  if (!chat_template.ok()) return 0;

  tokenmill::ChatRequest request;
  request.messages = nlohmann::ordered_json::parse(input.substr(split + 1), nullptr,
                                                   /*allow_exceptions=*/false);
  if (request.messages.is_discarded()) return 0;
  // Objects carry tools and variables too: {"messages": [...], "tools": [...], ...}.
  if (request.messages.is_object()) {
    nlohmann::ordered_json body = std::move(request.messages);
    request.messages = body.value("messages", nlohmann::ordered_json::array());
    request.tools = body.value("tools", nlohmann::ordered_json());
    if (body.contains("variables") && body["variables"].is_object()) {
      request.extra_variables = body["variables"];
    }
  }
  for (const bool add_generation_prompt : {true, false}) {
    request.add_generation_prompt = add_generation_prompt;
    // The marks of what the template wrote: sorted, disjoint, inside the text.
    const auto rendered = chat_template->RenderMarked(request);
    if (!rendered.ok()) continue;
    const auto& spans = rendered->template_spans;
    for (size_t i = 0; i < spans.size(); ++i) {
      if (spans[i].begin >= spans[i].end || spans[i].end > rendered->text.size() ||
          (i > 0 && spans[i].begin <= spans[i - 1].end)) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
