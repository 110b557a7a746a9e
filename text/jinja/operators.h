// Jinja's operators on values, with the sandboxed environment's lookup rules: `a.b` tries the
// attribute and then the item, `a[b]` the item and then the attribute; a miss is undefined,
// and using an undefined value (other than printing, testing or iterating it) is an error.
#pragma once

#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace tokenmill::jinja {

Value GetAttribute(const Value& object, const std::string& name);
Value GetItem(const Value& object, const Value& key);
// object[start:stop:step]; undefined bounds are left out.
Value GetSlice(const Value& object, const Value& start, const Value& stop, const Value& step);

// + - * / // % ** ~
Value BinaryOp(std::string_view op, const Value& a, const Value& b);
Value Negate(const Value& value, bool minus);

// == != < <= > >= in "not in"
bool Compare(std::string_view op, const Value& a, const Value& b);
bool Contains(const Value& container, const Value& item);

// Throws the "'x' is undefined" error when `value` is undefined.
void RequireDefined(const Value& value);

// The items a `for` loop visits: list items, dict keys, string characters; undefined: none.
std::vector<Value> Iterate(const Value& value);

}  // namespace tokenmill::jinja
