// The split of text into words before byte-level BPE, chosen by tokenizer.ggml.pre. Each
// regular expression (PCRE2, UTF mode, JIT) splits every piece the previous one produced, and
// text between matches stays a piece of its own, as in llama.cpp's unicode_regex_split.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tokenmill::tokenizer {

class PreTokenizer {
 public:
  // `name` is tokenizer.ggml.pre ("" when the key is absent). Unknown names are an error that
  // lists the supported ones.
  static StatusOr<PreTokenizer> ForName(std::string_view name);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // The pieces of `text` (well-formed UTF-8), as views into it, in order and covering it.
  Status Split(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& name() const { return name_; }
  // Llama 3: a word that is itself a token is not merged from characters.
  bool ignore_merges() const { return ignore_merges_; }
  // Llama 3 vocabularies add BOS unless their metadata says otherwise.
  bool adds_bos_by_default() const { return adds_bos_by_default_; }

 private:
  class Regex;
  PreTokenizer() = default;

  std::string name_;
  std::vector<std::unique_ptr<Regex>> regexes_;
  bool ignore_merges_ = false;
  bool adds_bos_by_default_ = false;
};

}  // namespace tokenmill::tokenizer
