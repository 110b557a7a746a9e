// The model's tool calls, parsed out of its output as it streams: each family's markup
// (Hermes/Qwen <tool_call>{...}</tool_call>, Llama 3.x JSON with or without <|python_tag|>,
// Mistral [TOOL_CALLS][...] and its templates' v11 form [TOOL_CALLS]name[ARGS]{...}, and a
// plain-JSON fallback; gpt-oss's harmony channels in harmony_parser.h) becomes calls with an
// id, a name and their arguments' JSON text; everything else stays content. Markers split
// across pieces are held back until they can be told apart from text. A call whose head
// (name, then the start of its arguments object) does not parse stays text, markup included;
// once the head is parsed the call is committed and its arguments stream as fragments.
// Hermes also takes a call that opens the output without its tags, as Qwen2.5-Coder writes
// them (StepHermesStart). DeepSeek's and Kimi K2's calls come in a section of marked calls
// (section_tool_calls.h).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace tokenmill {

// kHarmony: gpt-oss's channels, parsed by HarmonyParser (harmony_parser.h), not this one.
// kDeepSeekV3: V3's and R1's calls, function<｜tool▁sep｜>NAME and the arguments in a ```json
// fence; kDeepSeekV31: V3.1's, NAME<｜tool▁sep｜>{...} (each parser reads both forms, the
// format says which one forced calls are written in); kKimiK2: functions.NAME:IDX ids.
enum class ToolCallFormat {
  kHermes,
  kLlama3Json,
  kMistral,
  kMistralV11,
  kJson,
  kHarmony,
  kDeepSeekV3,
  kDeepSeekV31,
  kKimiK2,
};

// "hermes", "llama3_json", "mistral", "mistral_v11", "json", "harmony", "deepseek_v3",
// "deepseek_v31", "kimi_k2" (vLLM's names).
std::string_view ToolCallFormatName(ToolCallFormat format);
std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name);
// The format a chat template's own markup shows: <tool_call> (Hermes, Qwen), <|python_tag|>
// or Llama 3.1's "parameters" JSON (Llama 3.x), [TOOL_CALLS] (Mistral; with [ARGS], the
// v11 form), harmony's <|channel|> and <|message|> (gpt-oss), <｜tool▁calls▁begin｜> (DeepSeek;
// with a ```json fence, V3's form), Kimi's <|tool_calls_section_begin|> or its tool_declare
// turn; kJson otherwise.
ToolCallFormat DetectToolCallFormat(std::string_view template_source);
// The markers of `format` that vocabularies may have as control tokens (<|python_tag|>,
// [TOOL_CALLS], [ARGS], ...), which a detokenizer drops unless told to render them.
std::vector<std::string_view> ToolCallMarkers(ToolCallFormat format);
// The markers that open calls where a model may write them inside its reasoning, unclosed
// (Kimi K2 Thinking does, llama.cpp says): they end the reasoning. Empty for most formats.
std::vector<std::string_view> ToolCallOpeners(ToolCallFormat format);

// A piece of one call: the first of a call has its index, id and name, the next ones append
// `arguments` fragments (their concatenation is the arguments' JSON text).
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

// What a piece of output turned into.
struct ParsedOutput {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  // Appends `more`, merging argument fragments of the same call.
  void Append(ParsedOutput&& more);
};

// Tool-call ids as each family's templates want them: Mistral's 9 alphanumerics, otherwise
// "call_" and 24 alphanumerics (OpenAI's shape).
std::string NewToolCallId(ToolCallFormat format, std::mt19937_64& random);

class ToolCallParser {
 public:
  // `seed` makes the ids reproducible (tests); the server seeds from std::random_device.
  ToolCallParser(ToolCallFormat format, uint64_t seed);

  // The next piece of the output (content only: reasoning is split off before).
  void Feed(std::string_view text, ParsedOutput& out);
  // The output ended: text held back comes out as content where it formed no call.
  void Finish(ParsedOutput& out);

  int num_calls() const { return num_calls_; }
  // Calls whose arguments have ended.
  int num_complete_calls() const { return num_complete_calls_; }

 private:
  enum class State {
    kStart,      // nothing but whitespace yet (Llama 3.x / JSON: a call may start here)
    kText,       // content; Hermes and Mistral look for their marker
    kCallList,   // between calls: whitespace, separators, the next call or the end
    kHead,       // a call's head is arriving: buffered
    kArguments,  // streaming the arguments object
    kCallTail,   // after the arguments: the call object's closing brace
    kBuffered,   // a call that does not start with its name: the whole object buffered
    kDone,       // after the calls: the rest is content
    // DeepSeek and Kimi K2 (section_tool_calls.cc): kText looks for the section's marker.
    kSection,      // in a section, between calls: the next call's marker or the section's end
    kSectionHead,  // a marked call's head (its name or id) up to its arguments: buffered
    kSectionTail,  // after its arguments: a ```json fence's close, the call's end marker
  };

  void Step(ParsedOutput& out, bool final);
  bool StepStart(bool final);
  bool StepHermesStart(bool final);
  bool StepText(ParsedOutput& out, bool final);
  bool StepCallList(ParsedOutput& out, bool final);
  bool StepHead(ParsedOutput& out, bool final);
  bool StepNamedHead(ParsedOutput& out, bool final);  // Mistral v11: name[ARGS]
  bool StepArguments(ParsedOutput& out);
  bool StepCallTail(bool final);
  bool StepBuffered(ParsedOutput& out, bool final);
  bool StepSectionText(ParsedOutput& out, bool final);
  bool StepSection(ParsedOutput& out, bool final);
  bool StepSectionHead(ParsedOutput& out, bool final);
  bool StepSectionTail(bool final);
  // The markup since the last committed point did not form a call: it is content.
  void GiveUp(ParsedOutput& out);
  void EmitContent(std::string_view text, ParsedOutput& out);
  // `id` empty: a new one.
  void BeginCall(std::string name, std::string id, ParsedOutput& out);
  void AddArguments(std::string_view fragment, ParsedOutput& out);

  const ToolCallFormat format_;
  std::mt19937_64 random_;
  State state_ = State::kStart;
  std::string pending_;       // text not yet consumed
  std::string raw_markup_;    // consumed markup of the call list being parsed, for GiveUp
  std::string held_space_;    // content whitespace held back (dropped before a call)
  bool in_list_ = false;      // Mistral / JSON: inside "[...]"
  // Hermes, a call without its tags: what closes it after its object (StepHermesStart).
  bool untagged_doubled_ = false;  // the extra '}' of {{"name": ..., "arguments": {...}}}
  bool untagged_fenced_ = false;   // the ``` of its Markdown fence
  bool section_fenced_ = false;    // DeepSeek V3's form: the ``` after the arguments
  bool after_section_ = false;     // a section just ended: whitespace to drop
  int num_calls_ = 0;
  int num_complete_calls_ = 0;
  // The arguments' JSON scanner.
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace tokenmill
