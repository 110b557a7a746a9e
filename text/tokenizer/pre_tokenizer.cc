#include "text/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

namespace tokenmill::tokenizer {
namespace {

// Unicode White_Space, the set llama.cpp's \s means (PCRE2's \s differs, e.g. on U+180E).
#define TM_WS \
  "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
  "\\x{205F}\\x{3000}"

// The expressions of llama.cpp's llama_vocab::impl::load (llama-vocab.cpp) for each
// pre-tokenizer, with \s spelled out. GPT-2's gets the trailing `|\s+` that llama.cpp's
// hand-written GPT-2 splitter implements.
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TM_WS "\\p{L}\\p{N}]+|[" TM_WS
    "]+(?![^" TM_WS "])|[" TM_WS "]+";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}{1,3}| ?[^" TM_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" TM_WS "]*[\\r\\n]+|[" TM_WS
    "]+(?![^" TM_WS "])|[" TM_WS "]+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}| ?[^" TM_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" TM_WS "]*[\\r\\n]+|[" TM_WS
    "]+(?![^" TM_WS "])|[" TM_WS "]+";
// Mistral's tekken, as llama.cpp rewrites the expression of its tokenizer.json: a letter
// "not a-z" for \p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}, "not A-Z" for \p{Ll}\p{Lm}\p{Lo}\p{M}.
constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
    "|\\p{N}| ?[^" TM_WS "\\p{L}\\p{N}]+[\\r\\n/]*|[" TM_WS "]*[\\r\\n]+|[" TM_WS
    "]+(?![^" TM_WS "])|[" TM_WS "]+";
// OpenAI's o200k (gpt-4o, gpt-oss), as llama.cpp rewrites it (LLAMA_VOCAB_PRE_TYPE_GPT4O):
// tekken's letter runs, each followed by an optional English contraction, and digits by
// threes.
#define TM_CONTRACTION "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
constexpr const char* kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" TM_CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" TM_CONTRACTION
    "|\\p{N}{1,3}| ?[^" TM_WS "\\p{L}\\p{N}]+[\\r\\n/]*|[" TM_WS "]*[\\r\\n]+|[" TM_WS
    "]+(?![^" TM_WS "])|[" TM_WS "]+";
// DeepSeek-V3 (LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM): digits by threes, then runs of CJK
// ideographs and kana, then the words; llama.cpp runs the last over its category-collapsed
// text, which PCRE2's \p{..} classes match the same way.
constexpr const char* kDeepSeekCjkRuns =
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
constexpr const char* kDeepSeekV3Words =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|[" TM_WS "]*[\\r\\n]+|[" TM_WS "]+(?![^" TM_WS "])|[" TM_WS "]+";
// Kimi K2: llama.cpp splits it by hand (unicode.cpp's unicode_regex_split_custom_kimi_k2), not
// by the expression of its tokenization_kimi.py; this is what that code does: Han runs (its
// unicode_cpt_is_han ranges, not \p{Han}), then letters other than Han (marks not among
// them, and one run whatever the case) with an optional leading character and English
// contraction, digits by threes, and llama3's punctuation and whitespace.
#define TM_HAN \
  "\\x{3400}-\\x{4DBF}\\x{4E00}-\\x{9FFF}\\x{F900}-\\x{FAFF}\\x{20000}-\\x{2A6DF}" \
  "\\x{2A700}-\\x{2EBEF}\\x{2F800}-\\x{2FA1F}"
constexpr const char* kKimiK2 =
    "[" TM_HAN "]+|[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}" TM_HAN "]+" TM_CONTRACTION
    "|\\p{N}{1,3}| ?[^" TM_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" TM_WS "]*[\\r\\n]+|[" TM_WS
    "]+(?![^" TM_WS "])|[" TM_WS "]+";
#undef TM_HAN
#undef TM_CONTRACTION
#undef TM_WS
constexpr const char* kPunctuationRuns = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
constexpr const char* kAsciiDigitTriples = "[0-9][0-9][0-9]";
constexpr const char* kEachDigit = "\\p{N}";
constexpr const char* kDigitRuns = "\\p{N}+";
constexpr const char* kDigitTriples = "\\p{N}{1,3}";

struct PreTokenizerSpec {
  std::string_view name;
  std::vector<const char*> regexes;
  bool ignore_merges = false;
  bool adds_bos_by_default = false;
};

const std::vector<PreTokenizerSpec>& Specs() {
  static const std::vector<PreTokenizerSpec> specs = {
      {"default", {kPunctuationRuns, kGpt2, kDigitRuns, kAsciiDigitTriples}},
      {"gpt-2", {kGpt2}},
      {"smollm", {kEachDigit, kGpt2}},
      {"starcoder", {kEachDigit, kGpt2}},
      {"llama-bpe", {kLlama3}, true, true},
      {"llama3", {kLlama3}, true, true},
      {"llama-v3", {kLlama3}, true, true},
      {"qwen2", {kQwen2}},
      {"tekken", {kTekken}, true, true},
      {"gpt-4o", {kGpt4o}},
      {"deepseek-r1-qwen", {kQwen2}},
      {"deepseek-v3", {kDigitTriples, kDeepSeekCjkRuns, kDeepSeekV3Words}},
      {"kimi-k2", {kKimiK2}},
  };
  return specs;
}

std::string Pcre2ErrorMessage(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(code, buffer.data(), buffer.size());
  return reinterpret_cast<const char*>(buffer.data());
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* stack) const { pcre2_jit_stack_free(stack); }
};

// PCRE2's default JIT stack (32 KiB) runs out on a run of about 1000 letters under tekken's
// repeated groups (~40 bytes a letter); this one grows as needed to 64 MiB (reserved, touched
// only as used: runs of ~1.5M letters), and past that the interpreter, whose frames live on
// the heap, takes over, within kHeapLimitKib (it needs ~1.3 KiB a letter under tekken).
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 64 * 1024 * 1024;
constexpr uint32_t kHeapLimitKib = 256 * 1024;

// What one Split needs to run matches: made per call, so a PreTokenizer is shared read-only.
struct MatchState {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data;
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> context;
  std::unique_ptr<pcre2_jit_stack, JitStackDeleter> jit_stack;
};

}  // namespace

class PreTokenizer::Regex {
 public:
  static StatusOr<std::unique_ptr<Regex>> Compile(const char* pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF, &error, &offset, nullptr);
    if (code == nullptr) {
      return InternalError("pre-tokenizer regex does not compile at offset " +
                           std::to_string(offset) + ": " + Pcre2ErrorMessage(error));
    }
    // Without JIT (not every platform has it) the interpreter gives the same matches.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return std::unique_ptr<Regex>(new Regex(code));
  }
  ~Regex() { pcre2_code_free(code_); }

  // Appends the pieces of `text`: each match, and each run of text between matches.
  Status SplitInto(std::string_view text, const MatchState& state,
                   std::vector<std::string_view>& out) const {
    pcre2_match_data* match = state.data.get();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;    // where the next search begins
    size_t emitted = 0;  // end of the last piece appended
    while (start < text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match,
                           state.context.get());
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // Same expression, same matches, without the JIT's stack.
        rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         match, state.context.get());
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        return ResourceExhaustedError(
            "pre-tokenizer: " + Pcre2ErrorMessage(rc) + " in a piece of " +
            std::to_string(text.size()) + " bytes (a run of millions of letters?); split the text");
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      const size_t begin = ovector[0], end = ovector[1];
      if (begin > emitted) out.push_back(text.substr(emitted, begin - emitted));
      if (end > begin) {
        out.push_back(text.substr(begin, end - begin));
        emitted = end;
        start = end;
      } else {
        // No expression here matches empty text; step over one character to be safe.
        start = begin + 1;
        while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      }
    }
    if (emitted < text.size()) out.push_back(text.substr(emitted));
    return OkStatus();
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

StatusOr<PreTokenizer> PreTokenizer::ForName(std::string_view name) {
  // llama.cpp treats a missing tokenizer.ggml.pre as "default".
  const std::string_view wanted = name.empty() ? "default" : name;
  for (const PreTokenizerSpec& spec : Specs()) {
    if (spec.name != wanted) continue;
    PreTokenizer pre;
    pre.name_ = std::string(spec.name);
    pre.ignore_merges_ = spec.ignore_merges;
    pre.adds_bos_by_default_ = spec.adds_bos_by_default;
    for (const char* pattern : spec.regexes) {
      TM_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(pattern));
      pre.regexes_.push_back(std::move(regex));
    }
    return pre;
  }
  std::string known;
  for (const PreTokenizerSpec& spec : Specs()) {
    known += (known.empty() ? "" : ", ") + std::string(spec.name);
  }
  return UnimplementedError("unsupported tokenizer.ggml.pre '" + std::string(name) +
                            "'; tokenmill knows: " + known);
}

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Status PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& pieces) const {
  pieces.clear();
  if (text.empty()) return OkStatus();
  pieces.push_back(text);
  MatchState state;
  state.data.reset(pcre2_match_data_create(1, nullptr));
  state.context.reset(pcre2_match_context_create(nullptr));
  if (state.data == nullptr || state.context == nullptr) {
    return ResourceExhaustedError("pre-tokenizer: out of memory");
  }
  // Without JIT support (or the memory for a stack) matches run on PCRE2's default stack and,
  // past it, in the interpreter.
  pcre2_set_heap_limit(state.context.get(), kHeapLimitKib);
  state.jit_stack.reset(pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr));
  if (state.jit_stack != nullptr) {
    pcre2_jit_stack_assign(state.context.get(), nullptr, state.jit_stack.get());
  }
  std::vector<std::string_view> next;
  for (const std::unique_ptr<Regex>& regex : regexes_) {
    next.clear();
    for (const std::string_view piece : pieces) {
      TM_RETURN_IF_ERROR(regex->SplitInto(piece, state, next));
    }
    pieces.swap(next);
  }
  return OkStatus();
}

}  // namespace tokenmill::tokenizer
