#include "text/tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace tokenmill {
namespace {

// End-of-generation tokens llama.cpp recognizes by their text (llama-vocab.cpp,
// "special_eog_ids"); the first found of those with is_eot is the EOT token, as its
// "special_eot_id".
struct EndOfGenerationText {
  std::string_view text;
  bool is_eot;
};
constexpr std::array<EndOfGenerationText, 21> kEndOfGenerationTexts = {{
    {"<|eot_id|>", true},          {"<|im_end|>", true},         {"<|end|>", true},
    {"<|return|>", false},         {"<|call|>", false},          {"<|flush|>", false},
    {"<|calls|>", false},          {"<end_of_turn>", true},      {"<|endoftext|>", true},
    {"</s>", false},               {"<|eom_id|>", false},        {"<EOT>", true},
    {"_<EOT>", true},              {"[EOT]", true},              {"[EOS]", false},
    {"<|end_of_text|>", true},     {"<end_of_utterance>", true}, {"<eos>", false},
    {"<turn|>", false},            {"<|tool_response>", false},
    {"<｜end▁of▁sentence｜>", true},
}};

TokenType ToTokenType(int32_t value) {
  if (value < 0 || value > static_cast<int32_t>(TokenType::kByte)) return TokenType::kUndefined;
  return static_cast<TokenType>(value);
}

bool IsSpecialType(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined ||
         type == TokenType::kUnknown;
}

}  // namespace

StatusOr<Vocab> Vocab::FromGguf(const GgufFile& file) {
  Vocab vocab;
  TM_ASSIGN_OR_RETURN(const std::string_view model, file.GetString("tokenizer.ggml.model"));
  if (model == "gpt2") {
    vocab.kind_ = VocabKind::kBytePairGpt2;
  } else if (model == "llama") {
    vocab.kind_ = VocabKind::kSentencePiece;
  } else if (model == "bert") {
    vocab.kind_ = VocabKind::kWordPiece;
  } else {
    return UnimplementedError("unsupported tokenizer.ggml.model '" + std::string(model) +
                              "': tokenmill reads 'gpt2' (byte-level BPE), 'llama' "
                              "(SentencePiece) and 'bert' (WordPiece) vocabularies");
  }

  TM_ASSIGN_OR_RETURN(const std::vector<std::string_view> texts,
                      file.GetStringArray("tokenizer.ggml.tokens"));
  if (texts.empty()) return InvalidArgumentError("tokenizer.ggml.tokens is empty");
  if (texts.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError("tokenizer.ggml.tokens has too many entries");
  }
  const size_t n = texts.size();
  vocab.texts_.assign(texts.begin(), texts.end());
  vocab.types_.assign(n, TokenType::kNormal);
  vocab.scores_.assign(n, 0.0f);
  if (file.Has("tokenizer.ggml.token_type")) {
    TM_ASSIGN_OR_RETURN(const std::vector<int32_t> types,
                        file.GetI32Array("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return InvalidArgumentError("tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
    std::transform(types.begin(), types.end(), vocab.types_.begin(), ToTokenType);
  }
  if (const GgufValue* scores = file.Find("tokenizer.ggml.scores")) {
    // llama.cpp reads float32 or int32 scores; gguf-py's MistralVocab (Tekken) writes int32.
    if (scores->type() == GgufValueType::kArray &&
        scores->element_type() == GgufValueType::kI32) {
      TM_ASSIGN_OR_RETURN(const std::vector<int32_t> ints,
                          file.GetI32Array("tokenizer.ggml.scores"));
      vocab.scores_.assign(ints.begin(), ints.end());
    } else {
      TM_ASSIGN_OR_RETURN(vocab.scores_, file.GetF32Array("tokenizer.ggml.scores"));
    }
    if (vocab.scores_.size() != n) {
      return InvalidArgumentError("tokenizer.ggml.scores has " +
                                  std::to_string(vocab.scores_.size()) + " entries for " +
                                  std::to_string(n) + " tokens");
    }
  }
  // Like llama.cpp, a later duplicate text wins; empty texts can never match.
  vocab.by_text_.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    if (!vocab.texts_[id].empty()) vocab.by_text_[vocab.texts_[id]] = static_cast<TokenId>(id);
  }

  // llama.cpp's defaults per vocabulary kind, then the file's flags.
  const bool sentencepiece = vocab.kind_ == VocabKind::kSentencePiece;
  vocab.add_bos_ = sentencepiece;
  vocab.add_space_prefix_ = sentencepiece;
  if (file.Has("tokenizer.ggml.add_bos_token")) {
    TM_ASSIGN_OR_RETURN(vocab.add_bos_, file.GetBool("tokenizer.ggml.add_bos_token"));
  }
  if (file.Has("tokenizer.ggml.add_eos_token")) {
    TM_ASSIGN_OR_RETURN(vocab.add_eos_, file.GetBool("tokenizer.ggml.add_eos_token"));
  }
  if (file.Has("tokenizer.ggml.add_space_prefix")) {
    TM_ASSIGN_OR_RETURN(vocab.add_space_prefix_, file.GetBool("tokenizer.ggml.add_space_prefix"));
  }
  TM_RETURN_IF_ERROR(vocab.ReadSpecialIds(file));
  if (vocab.kind_ == VocabKind::kWordPiece) {
    // llama.cpp's WPM tokenizer adds [CLS] and [SEP] with add_special, whatever the flags.
    vocab.add_bos_ = true;
    vocab.add_eos_ = false;
    vocab.add_sep_ = true;
    if (vocab.bos_ == kNoToken || vocab.sep_ == kNoToken) {
      return InvalidArgumentError("a WordPiece vocabulary needs a BOS ([CLS]) and a "
                                  "separator ([SEP]) token");
    }
  }
  if (vocab.add_bos_ && vocab.bos_ == kNoToken) {
    return InvalidArgumentError("tokenizer.ggml.add_bos_token is set but there is no BOS token");
  }
  if (vocab.add_eos_ && vocab.eos_ == kNoToken) {
    return InvalidArgumentError("tokenizer.ggml.add_eos_token is set but there is no EOS token");
  }
  vocab.FindEndOfGeneration();

  for (size_t id = 0; id < n; ++id) {
    if (IsSpecialType(vocab.types_[id]) && !vocab.texts_[id].empty()) {
      vocab.special_tokens_.push_back(static_cast<TokenId>(id));
    }
  }
  std::stable_sort(vocab.special_tokens_.begin(), vocab.special_tokens_.end(),
                   [&](TokenId a, TokenId b) {
                     return vocab.texts_[a].size() > vocab.texts_[b].size();
                   });
  TM_RETURN_IF_ERROR(vocab.SetRstrip(file));
  return vocab;
}

Status Vocab::SetRstrip(const GgufFile& file) {
  rstrip_.assign(texts_.size(), false);
  if (!file.Has("general.name")) return OkStatus();
  TM_ASSIGN_OR_RETURN(const std::string_view name, file.GetString("general.name"));
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  // llama.cpp sets this by the model's name (llama_vocab::impl::load): in Phi-3 models every
  // special token but <unk>, <s> and <|endoftext|> swallows the whitespace after it.
  if (lower.find("phi-3") == std::string::npos && lower.find("phi3") == std::string::npos) {
    return OkStatus();
  }
  for (const TokenId id : special_tokens_) rstrip_[id] = true;
  for (const std::string_view text : {"</s>"}) {
    if (const TokenId id = Find(text); id != kNoToken) rstrip_[id] = true;
  }
  for (const std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
    if (const TokenId id = Find(text); id != kNoToken) rstrip_[id] = false;
  }
  return OkStatus();
}

Status Vocab::ReadSpecialIds(const GgufFile& file) {
  // llama.cpp's defaults when a key is absent (its legacy 11 for byte-level BPE included).
  if (kind_ == VocabKind::kSentencePiece) {
    bos_ = 1, eos_ = 2, unknown_ = 0;
  } else if (kind_ == VocabKind::kWordPiece) {
    bos_ = 101, unknown_ = 100, sep_ = 102, padding_ = 0;  // BERT's [CLS], [UNK], [SEP], [PAD]
  } else {
    bos_ = 11, eos_ = 11;
  }
  const auto read = [&](std::string_view key, TokenId& id) -> Status {
    if (!file.Has(key)) return OkStatus();
    // Ids are u32 in the file; -1 (0xFFFFFFFF, or a signed -1 in some files) or any id past the
    // vocabulary means "none" and keeps the default, as in llama.cpp.
    const StatusOr<uint64_t> value = file.GetU64(key);
    if (value.ok()) {
      if (*value < texts_.size()) id = static_cast<TokenId>(*value);
      return OkStatus();
    }
    const StatusOr<int32_t> negative = file.GetI32(key);
    return negative.ok() ? OkStatus() : value.status();
  };
  TM_RETURN_IF_ERROR(read("tokenizer.ggml.bos_token_id", bos_));
  TM_RETURN_IF_ERROR(read("tokenizer.ggml.eos_token_id", eos_));
  TM_RETURN_IF_ERROR(read("tokenizer.ggml.eot_token_id", eot_));
  TM_RETURN_IF_ERROR(read("tokenizer.ggml.eom_token_id", eom_));
  TM_RETURN_IF_ERROR(read("tokenizer.ggml.unknown_token_id", unknown_));
  TM_RETURN_IF_ERROR(read("tokenizer.ggml.padding_token_id", padding_));
  TM_RETURN_IF_ERROR(read("tokenizer.ggml.seperator_token_id", sep_));
  for (TokenId* id : {&bos_, &eos_, &unknown_, &sep_}) {
    if (!Contains(*id)) *id = kNoToken;
  }
  return OkStatus();
}

void Vocab::FindEndOfGeneration() {
  for (const auto& [text, is_eot] : kEndOfGenerationTexts) {
    const TokenId id = Find(text);
    if (id == kNoToken) continue;
    end_of_generation_.push_back(id);
    // As llama.cpp does, a mislabelled end-of-turn token becomes a control token.
    types_[id] = TokenType::kControl;
    if (eot_ == kNoToken && is_eot) eot_ = id;
  }
  // Gemma 4's and PLaMo's "</s>" is a normal token (llama.cpp: "has_normal_s_marker").
  const TokenId s = Find("</s>");
  if (s != kNoToken &&
      (Find("<|tool_response>") != kNoToken || Find("<|plamo:eos|>") != kNoToken)) {
    std::erase(end_of_generation_, s);
    types_[s] = TokenType::kNormal;
  }
  for (const TokenId id : {eos_, eot_, eom_}) {
    if (id != kNoToken) end_of_generation_.push_back(id);
  }
  // gpt-oss (o200k_harmony: <|return|> and <|call|>; solar-open: a call and <|flush|>): a
  // message's <|end|> (the EOT token all the same) does not end the turn, and it and harmony's
  // header markers render as text, as llama.cpp's vocabulary loader has it, so that the output
  // parser sees the markup.
  const TokenId end = Find("<|end|>");
  const bool has_call = Find("<|call|>") != kNoToken || Find("<|calls|>") != kNoToken;
  if (end != kNoToken && has_call &&
      (Find("<|return|>") != kNoToken || Find("<|flush|>") != kNoToken)) {
    std::erase(end_of_generation_, end);
    types_[end] = TokenType::kUserDefined;
  }
  for (std::string_view marker : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const TokenId id = Find(marker); id != kNoToken) types_[id] = TokenType::kUserDefined;
  }
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()),
                           end_of_generation_.end());
}

TokenId Vocab::Find(std::string_view text) const {
  const auto it = by_text_.find(text);
  return it == by_text_.end() ? kNoToken : it->second;
}

}  // namespace tokenmill
