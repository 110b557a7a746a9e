#include "grammar/gbnf_writer.h"

#include <cstdio>
#include <string>

namespace tokenmill::grammar {
namespace {

std::string Hex2(unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\x%02X", value);
  return buf;
}

}  // namespace

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += Hex2(c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string GbnfRepetition(int64_t lo, std::optional<int64_t> hi) {
  if (!hi && lo <= 1) return lo == 0 ? "*" : "+";
  std::string out = "{";
  out += std::to_string(lo);
  if (!hi) {
    out += ",";
  } else if (*hi != lo) {
    out += ",";
    out += std::to_string(*hi);
  }
  out += "}";
  return out;
}

std::string GbnfClassChar(uint32_t cp) {
  switch (cp) {
    case '\\': return "\\\\";
    case ']': return "\\]";
    case '[': return "\\[";
    case '^': return "\\^";
    case '-': return "\\-";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp < 0x20 || cp == 0x7F) return Hex2(cp);
  char buf[16];
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof(buf), "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08X", cp);
  }
  return buf;
}

}  // namespace tokenmill::grammar
