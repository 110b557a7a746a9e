// The renderer signals failures with TemplateError internally: expression evaluation is deeply
// recursive and nearly every step can fail, so one exception type keeps each step readable.
// Nothing escapes this file: every entry point converts them to a Status.
#include "text/jinja/template.h"

#include "text/jinja/ast.h"
#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"
#include "text/jinja/renderer.h"

namespace tokenmill::jinja {
namespace {

std::string Where(const TemplateError& e) {
  if (e.pos().line == 0) return "";
  return " at line " + std::to_string(e.pos().line) + ", column " + std::to_string(e.pos().column);
}

}  // namespace

struct Template::Program {
  Body body;
};

Template::Template(std::unique_ptr<Program> program) : program_(std::move(program)) {}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

StatusOr<Template> Template::Parse(std::string_view source) {
  try {
    auto program = std::make_unique<Program>();
    program->body = jinja::Parse(Tokenize(source));
    return Template(std::move(program));
  } catch (const TemplateError& e) {
    return InvalidArgumentError("template syntax error" + Where(e) + ": " + e.what());
  }
}

StatusOr<std::string> Template::Render(const Json& variables) const {
  TM_ASSIGN_OR_RETURN(MarkedText rendered, RenderMarked(variables, {}));
  return std::move(rendered.text);
}

StatusOr<MarkedText> Template::RenderMarked(const Json& variables, const Markup& markup) const {
  if (!variables.is_object()) {
    return InvalidArgumentError("template variables must be a JSON object");
  }
  if (NestsDeeperThan(variables, kMaxVariableNesting)) {
    return InvalidArgumentError("template variables nest deeper than " +
                                std::to_string(kMaxVariableNesting) + " levels");
  }
  try {
    MarkedString out = RenderBody(program_->body, variables, markup);
    std::vector<ByteSpan> spans = out.template_spans();
    return MarkedText{out.TakeText(), std::move(spans)};
  } catch (const RaisedError& e) {
    return InvalidArgumentError("template raised an error" + Where(e) + ": " + e.what());
  } catch (const TemplateError& e) {
    return InvalidArgumentError("template error" + Where(e) + ": " + e.what());
  } catch (const std::exception& e) {  // e.g. nlohmann::json on a value it cannot hold
    return InternalError(std::string("template rendering failed: ") + e.what());
  }
}

}  // namespace tokenmill::jinja
