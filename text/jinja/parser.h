// Recursive-descent parser from tokens to statements, following Jinja2's grammar and operator
// precedence. Unknown tags, filters and tests are syntax errors here, as in Jinja2.
#pragma once

#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace tokenmill::jinja {

// Throws TemplateError with the position of the offending token.
Body Parse(const std::vector<Token>& tokens);

}  // namespace tokenmill::jinja
