// The string operations of the interpreter that keep marks (marks.h) on what they build:
// concatenation, joins, slicing, strip and replace, which chat templates apply to a message's
// content before printing it. The rest (split, tojson, indent, ...) keep a uniform mark: the
// template's when everything they read was the template's, else the client's.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "text/jinja/value.h"

namespace tokenmill::jinja {

// The marks of PyStr(value): a string's own, a list's or dict's, the client's for the rest.
Marks StrMarks(const Value& value);
// Appends PyStr(value) with its marks; throws when the result would exceed kMaxStringBytes.
void AppendStr(MarkedString& out, const Value& value);
// The built string as a value.
Value ValueOf(MarkedString built);

// The marks of a list or dict holding `items` (keys included): the template's only when every
// string in them is. Numbers, booleans and None write no text and count for either.
Marks ContainerMarks(std::span<const Value> items);

// `s`'s code points at `indices`, as one string: s[i], s[a:b:c], reversed, the stripped part.
Value CharsOf(const Value& s, const std::vector<size_t>& indices);
// Each code point of `s` as a string of its own (iterating over a string).
std::vector<Value> CharValues(const Value& s);
// PyStr(s) with what `transform` made of it, which keeps byte offsets when it keeps the size
// (ASCII case mapping); otherwise it keeps a uniform mark.
Value Transformed(const Value& s, const std::string& result);
// str.replace(old, with, count) on PyStr(s): the kept parts keep their marks, `with` has its own.
Value ReplaceMarked(const Value& s, const std::string& old, const Value& with, int64_t count);
// str.strip/lstrip/rstrip on PyStr(s).
Value StripMarked(const Value& s, const std::optional<std::string>& chars, bool left, bool right);

}  // namespace tokenmill::jinja
