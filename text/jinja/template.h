// A compiled Jinja template: the entry point of the renderer. Rendering matches Python
// jinja2 (3.1) in Hugging Face's chat environment: ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension, HF's tojson, and the globals
// raise_exception and strftime_now. Errors come back as a Status naming line and column.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "text/jinja/value.h"

namespace tokenmill::jinja {

struct Stmt;

// Rendered text, and the bytes of it the template wrote itself (marks.h): its own text and
// string literals, and the variables the caller named as the template's. The rest came from
// the variables (the client's data).
struct MarkedText {
  std::string text;
  std::vector<ByteSpan> template_spans;  // sorted, disjoint, not adjacent
};

class Template {
 public:
  // INVALID_ARGUMENT "template syntax error at line L, column C: ..." when it does not parse.
  static StatusOr<Template> Parse(std::string_view source);

  // `variables` is a JSON object of top-level names. Failures are INVALID_ARGUMENT:
  // "template error at line L, column C: ..." or, from raise_exception(msg),
  // "template raised an error at line L, column C: msg".
  StatusOr<std::string> Render(const Json& variables) const;
  // The same, with marks: what `markup` names counts as the template's own text too, the rest
  // of the variables as the client's.
  StatusOr<MarkedText> RenderMarked(const Json& variables, const Markup& markup) const;

  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

 private:
  struct Program;
  explicit Template(std::unique_ptr<Program> program);
  std::unique_ptr<Program> program_;
};

}  // namespace tokenmill::jinja
