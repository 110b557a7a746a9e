// Walks a parsed template and writes its output. Variables live in a stack of scopes: the
// template's top level, one per loop iteration and one per macro call, as in Jinja2 (a `set`
// inside a loop does not leak out of it; `namespace()` objects carry values across).
#pragma once

#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace tokenmill::jinja {

// Renders `body` with the top-level variables in `variables` (a JSON object); the output
// marks what the template wrote (marks.h), counting what `markup` names as its.
// Throws TemplateError (or RaisedError from raise_exception) with the position of the failure.
MarkedString RenderBody(const Body& body, const Json& variables, const Markup& markup);

}  // namespace tokenmill::jinja
