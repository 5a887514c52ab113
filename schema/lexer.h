// Tokens of the Megastore schema language (docs/schema.md).
//
// Identifiers are [A-Za-z_][A-Za-z0-9_]*, or any text between backquotes
// (`like this`) to use a keyword as a name. Comments run from `--` or `//` to
// the end of the line, or between /* and */.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace megastore::schema {

struct SourcePos {
  int line = 1;    // from 1
  int column = 1;  // from 1, in bytes
};

struct Token {
  enum class Kind {
    kIdentifier,        // a bare word (keywords too; see IsKeyword)
    kQuotedIdentifier,  // `...`: always a name
    kNumber,
    kPunct,  // one of { } ( ) , ; . =
    kEnd,
    kError,  // text is the message
  };
  Kind kind = Kind::kEnd;
  std::string text;
  SourcePos pos;
};

// Splits `source` into tokens; the last one is kEnd. Lexical errors
// (an unknown character, an unterminated comment or quoted name) come back as
// kError tokens, and lexing continues after them.
std::vector<Token> Tokenize(std::string_view source);

// Reserved words, case-insensitive. They cannot name anything unless quoted.
bool IsKeyword(std::string_view word);

// Case-insensitive equality of ASCII words, and lower-casing.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
std::string ToLower(std::string_view s);

}  // namespace megastore::schema
