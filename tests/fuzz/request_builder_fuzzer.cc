// libFuzzer target: the fuzz bytes as a serialized tokenmill.v1.GenerateRequest (what a gRPC
// client sends) and as a TokenizeRequest, validated and tokenized by the server's
// request_builder against the real tokenizer of TOKENMILL_FUZZ_MODEL (stories260K) and a
// ChatML template, with structured output compiled through a GrammarCache over that
// vocabulary: a request or a Status, never a crash. A built request must pass the engine's own
// checks. An input behind tests/fuzz/deep_json.h's marker is a request with deep JSON in one of
// its JSON text fields (tool-call arguments, tools, template variables, a schema).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <google/protobuf/stubs/logging.h>

#include "engine/grammar_vocabulary.h"
#include "engine/request_validation.h"
#include "gguf/gguf.h"
#include "tests/fuzz/deep_json.h"
#include "server/grpc/request_builder.h"

namespace {

// SmolLM2's template (ChatML); stories260K ships none.
constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct Served {
  Served(tokenmill::Tokenizer t, tokenmill::ChatTemplate c)
      : tokenizer(std::move(t)),
        chat_template(std::move(c)),
        grammars(tokenmill::grammar::VocabularyIndex::Build(
                     tokenmill::GrammarVocabulary(tokenizer)),
                 tokenmill::grammar::GrammarLimits{}) {}

  tokenmill::Tokenizer tokenizer;
  tokenmill::ChatTemplate chat_template;
  mutable tokenmill::grammar::GrammarCache grammars;  // thread-safe
};

// Loaded once: libFuzzer calls the target millions of times in one process.
const Served& LoadServed() {
  static const Served* const served = [] {
    // Invalid UTF-8 in string fields is a parse failure; its log line per input only slows.
    google::protobuf::SetLogHandler(nullptr);
    const char* path = std::getenv("TOKENMILL_FUZZ_MODEL");
    if (path == nullptr) {
      std::fprintf(stderr, "set TOKENMILL_FUZZ_MODEL to a GGUF file\n");
      std::abort();
    }
    auto file = tokenmill::GgufFile::Open(path);
    auto tokenizer = file.ok() ? tokenmill::Tokenizer::FromGguf(*file) : file.status();
    auto chat_template = tokenmill::ChatTemplate::FromSource(kChatMl, {"<s>", "</s>"});
    if (!tokenizer.ok() || !chat_template.ok()) {
      std::fprintf(stderr, "%s %s\n", tokenizer.status().ToString().c_str(),
                   chat_template.status().ToString().c_str());
      std::abort();
    }
    return new Served(std::move(tokenizer).value(), std::move(chat_template).value());
  }();
  return *served;
}

// The request in `deep.rest` (or an empty one) with `deep.text` in the field `deep.selector`
// picks.
tokenmill::v1::GenerateRequest DeepRequest(const tokenmill::fuzz::DeepJson& deep) {
  tokenmill::v1::GenerateRequest request;
  if (!request.ParseFromArray(deep.rest.data(), static_cast<int>(deep.rest.size()))) {
    request.Clear();
  }
  tokenmill::v1::Chat& chat = *request.mutable_chat();
  if (chat.messages_size() == 0) {
    tokenmill::v1::ChatMessage& user = *chat.add_messages();
    user.set_role("user");
    user.set_content("hi");
  }
  switch (deep.selector % 5) {
    case 0: {
      tokenmill::v1::ChatMessage& turn = *chat.add_messages();
      turn.set_role("assistant");
      tokenmill::v1::ToolCall& call = *turn.add_tool_calls();
      call.set_id("c");
      call.set_name("f");
      call.set_arguments(deep.text);
      break;
    }
    case 1: chat.set_tools_json("[" + deep.text + "]"); break;
    case 2: chat.set_template_kwargs_json(deep.text); break;
    case 3: request.mutable_sampling()->set_json_schema("{\"const\": " + deep.text + "}"); break;
    default:
      chat.set_tools_json(R"([{"type": "function", "function": {"name": "f", "parameters": )" +
                          deep.text + "}}]");
      chat.mutable_tool_choice()->set_mode(tokenmill::v1::TOOL_CHOICE_MODE_REQUIRED);
      break;
  }
  return request;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Served& served = LoadServed();
  const tokenmill::server::RequestContext context{
      .tokenizer = &served.tokenizer,
      .chat_template = &served.chat_template,
      .max_model_len = 256,
      .grammars = &served.grammars,
      // Forced tool calls build their grammar from the request's tools.
      .tool_call_format = tokenmill::ToolCallFormat::kHermes,
      .reasoning = true};

  tokenmill::v1::GenerateRequest generate;
  if (tokenmill::fuzz::DeepJson deep; tokenmill::fuzz::TakeDeepJson(data, size, deep)) {
    generate = DeepRequest(deep);
    (void)tokenmill::server::BuildGenerateRequest(generate, context);
    tokenmill::v1::TokenizeRequest tokenize;
    *tokenize.mutable_chat() = generate.chat();
    (void)tokenmill::server::TokenizeRequestInput(tokenize, context);
    return 0;
  }
  if (generate.ParseFromArray(data, static_cast<int>(size))) {
    auto built = tokenmill::server::BuildGenerateRequest(generate, context);
    if (built.ok()) {
      if (built->get().prompt_token_ids.empty()) __builtin_trap();
      // Built as validated: the engine's own checks must agree (the server adds the sink).
      const tokenmill::Status valid =
          tokenmill::ValidateGenerateRequest(built->get(), context.limits());
      if (!valid.ok()) {
        std::fprintf(stderr, "built request fails the engine: %s\n", valid.ToString().c_str());
        std::abort();
      }
    }
  }
  tokenmill::v1::TokenizeRequest tokenize;
  if (tokenize.ParseFromArray(data, static_cast<int>(size))) {
    (void)tokenmill::server::TokenizeRequestInput(tokenize, context);
  }
  return 0;
}
