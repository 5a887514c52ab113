#include "schema/lexer.h"

#include <array>
#include <cctype>

namespace megastore::schema {
namespace {

constexpr std::array<std::string_view, 34> kKeywords = {
    "ADD",      "ALTER",   "ASC",        "BOOL",     "BYTES",    "CREATE",   "DESC",
    "DOUBLE",   "DROP",    "ENTITY",     "GLOBAL",   "GROUP",    "IN",       "INDEX",
    "INLINE",   "INT32",   "INT64",      "KEY",      "LOCAL",    "MESSAGE",  "ON",
    "OPTIONAL", "PRIMARY", "REFERENCES", "REPEATED", "REQUIRED", "ROOT",     "SCATTER",
    "SCHEMA",   "STORING", "STRING",     "TABLE",    "UINT64",   "RESERVED",
};

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) !=
        std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsKeyword(std::string_view word) {
  for (std::string_view k : kKeywords) {
    if (EqualsIgnoreCase(k, word)) return true;
  }
  return false;
}

std::vector<Token> Tokenize(std::string_view src) {
  std::vector<Token> out;
  size_t i = 0;
  SourcePos pos;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < src.size(); ++k, ++i) {
      if (src[i] == '\n') {
        ++pos.line;
        pos.column = 1;
      } else {
        ++pos.column;
      }
    }
  };
  while (i < src.size()) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      advance(1);
      continue;
    }
    const SourcePos start = pos;
    if ((c == '-' && i + 1 < src.size() && src[i + 1] == '-') ||
        (c == '/' && i + 1 < src.size() && src[i + 1] == '/')) {
      while (i < src.size() && src[i] != '\n') advance(1);
      continue;
    }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '*') {
      const size_t end = src.find("*/", i + 2);
      if (end == std::string_view::npos) {
        out.push_back(Token{Token::Kind::kError, "unterminated /* comment", start});
        advance(src.size() - i);
        break;
      }
      advance(end + 2 - i);
      continue;
    }
    if (IsIdentStart(c)) {
      size_t n = 1;
      while (i + n < src.size() && IsIdentChar(src[i + n])) ++n;
      out.push_back(Token{Token::Kind::kIdentifier, std::string(src.substr(i, n)), start});
      advance(n);
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t n = 1;
      while (i + n < src.size() && IsIdentChar(src[i + n])) ++n;
      out.push_back(Token{Token::Kind::kNumber, std::string(src.substr(i, n)), start});
      advance(n);
      continue;
    }
    if (c == '`') {
      const size_t end = src.find_first_of("`\n", i + 1);
      if (end == std::string_view::npos || src[end] != '`') {
        out.push_back(Token{Token::Kind::kError, "unterminated `quoted name`", start});
        advance((end == std::string_view::npos ? src.size() : end) - i);
        continue;
      }
      std::string name(src.substr(i + 1, end - i - 1));
      advance(end + 1 - i);
      if (name.empty()) {
        out.push_back(Token{Token::Kind::kError, "empty quoted name ``", start});
        continue;
      }
      out.push_back(Token{Token::Kind::kQuotedIdentifier, std::move(name), start});
      continue;
    }
    if (std::string_view("{}(),;.=").find(c) != std::string_view::npos) {
      out.push_back(Token{Token::Kind::kPunct, std::string(1, c), start});
      advance(1);
      continue;
    }
    std::string shown = std::isprint(static_cast<unsigned char>(c))
                            ? std::string("'") + c + "'"
                            : "byte 0x" + std::string(1, "0123456789abcdef"[(c >> 4) & 0xf]) +
                                  std::string(1, "0123456789abcdef"[c & 0xf]);
    out.push_back(Token{Token::Kind::kError, "unexpected character " + shown, start});
    advance(1);
  }
  out.push_back(Token{Token::Kind::kEnd, "", pos});
  return out;
}

}  // namespace megastore::schema
