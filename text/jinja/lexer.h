// Splits a Jinja template into tokens, applying the whitespace rules of Hugging Face's chat
// environment: trim_blocks, lstrip_blocks, `{%-`/`-%}` and `{%+`/`+%}` markers, newlines
// normalized to "\n" and one trailing newline dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/value.h"

namespace tokenmill::jinja {

enum class TokenKind {
  kText,        // literal template text (after whitespace control)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,  // text holds the operator, e.g. "==", "(", "|"
  kEnd,       // end of the template
};

struct Token {
  TokenKind kind;
  std::string text;
  SourcePos pos;
  int64_t integer = 0;
  double number = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError (with the position) for unterminated tags, strings and comments.
std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace tokenmill::jinja
