#include "schema/parser.h"

#include <cctype>
#include <utility>

namespace megastore::schema {
namespace {

// Thrown inside a statement to abandon it; caught at the statement (or
// field) level, which skips ahead and continues.
struct SyntaxError {};

class Parser {
 public:
  explicit Parser(std::string_view source) : tokens_(Tokenize(source)) {}

  ParseResult Run() {
    for (const Token& t : tokens_) {
      if (t.kind == Token::Kind::kError) Error(t.pos, t.text);
    }
    while (Peek().kind != Token::Kind::kEnd) {
      const size_t start = index_;
      try {
        Statement();
      } catch (const SyntaxError&) {
        SkipToNextStatement(start);
      }
    }
    return std::move(result_);
  }

 private:
  // ---- tokens -------------------------------------------------------------------

  const Token& Peek(size_t ahead = 0) {
    size_t i = index_;
    for (;;) {
      while (i < tokens_.size() && tokens_[i].kind == Token::Kind::kError) ++i;
      if (ahead == 0 || i >= tokens_.size()) break;
      --ahead;
      ++i;
    }
    return i < tokens_.size() ? tokens_[i] : tokens_.back();
  }
  const Token& Next() {
    const Token& t = Peek();
    last_ = &t;
    while (index_ < tokens_.size() && tokens_[index_].kind == Token::Kind::kError) ++index_;
    if (index_ + 1 < tokens_.size()) ++index_;
    return t;
  }
  bool IsWord(const Token& t, std::string_view word) {
    return t.kind == Token::Kind::kIdentifier && EqualsIgnoreCase(t.text, word);
  }
  bool IsPunct(const Token& t, char c) { return t.kind == Token::Kind::kPunct && t.text[0] == c; }
  bool AcceptWord(std::string_view word) {
    if (!IsWord(Peek(), word)) return false;
    Next();
    return true;
  }
  bool AcceptPunct(char c) {
    if (!IsPunct(Peek(), c)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "the end of the file";
      case Token::Kind::kPunct:
        return "'" + t.text + "'";
      case Token::Kind::kQuotedIdentifier:
        return "`" + t.text + "`";
      default:
        return "\"" + t.text + "\"";
    }
  }
  void ExpectWord(std::string_view word, std::string_view context) {
    if (AcceptWord(word)) return;
    Fail(Peek().pos, "expected " + std::string(word) + " " + std::string(context) + ", found " +
                         Describe(Peek()));
  }
  SourcePos ExpectPunct(char c, std::string_view context) {
    const SourcePos pos = Peek().pos;
    if (AcceptPunct(c)) return pos;
    // A missing ';' belongs right after the token it should follow.
    const SourcePos at = c == ';' && last_ != nullptr ? EndOf(*last_) : pos;
    Fail(at, std::string("expected '") + c + "' " + std::string(context) + ", found " +
                 Describe(Peek()));
  }
  static SourcePos EndOf(const Token& t) {
    SourcePos p = t.pos;
    p.column +=
        static_cast<int>(t.text.size()) + (t.kind == Token::Kind::kQuotedIdentifier ? 2 : 0);
    return p;
  }
  Name ExpectName(std::string_view what) {
    const Token& t = Peek();
    if (t.kind == Token::Kind::kQuotedIdentifier || t.kind == Token::Kind::kIdentifier) {
      // Names end up in generated C++, in file names and in Bigtable keys:
      // bounded and printable, whatever the quoting.
      if (t.text.size() > kMaxNameBytes) {
        Fail(t.pos, std::string(what) + " is " + std::to_string(t.text.size()) +
                        " bytes long; names are at most " + std::to_string(kMaxNameBytes));
      }
      for (char c : t.text) {
        if (c < 0x20 || c > 0x7e) {
          Fail(t.pos, std::string(what) + " holds a byte that is not printable ASCII (0x" +
                          "0123456789abcdef"[(static_cast<unsigned char>(c) >> 4) & 15] +
                          "0123456789abcdef"[static_cast<unsigned char>(c) & 15] + ")");
        }
      }
    }
    if (t.kind == Token::Kind::kQuotedIdentifier) {
      Next();
      return Name{t.text, t.pos};
    }
    if (t.kind == Token::Kind::kIdentifier) {
      if (IsKeyword(t.text)) {
        Error(t.pos,
              "\"" + t.text + "\" is a keyword and cannot be used as " + std::string(what) +
                  " without quoting",
              "write `" + t.text + "` (in backquotes) to use it as a name");
        Next();
        throw SyntaxError{};
      }
      Next();
      return Name{t.text, t.pos};
    }
    Fail(t.pos, "expected " + std::string(what) + ", found " + Describe(t));
  }

  // ---- errors -------------------------------------------------------------------

  void Error(SourcePos pos, std::string message, std::string hint = {}) {
    result_.errors.push_back(Diagnostic{pos, std::move(message), std::move(hint)});
  }
  [[noreturn]] void Fail(SourcePos pos, std::string message, std::string hint = {}) {
    Error(pos, std::move(message), std::move(hint));
    throw SyntaxError{};
  }
  bool AtStatementStart(const Token& t) {
    return IsWord(t, "CREATE") || IsWord(t, "ALTER") ||
           (IsWord(t, "DROP") && IsWord(Peek(1), "INDEX"));
  }
  // After an error: continue after the statement's ';' (outside braces), or
  // at the next word that starts a statement.
  void SkipToNextStatement(size_t start) {
    if (index_ == start) Next();  // always make progress
    int depth = 0;
    while (Peek().kind != Token::Kind::kEnd) {
      const Token& t = Peek();
      if (IsPunct(t, '{')) ++depth;
      if (IsPunct(t, '}') && depth > 0) --depth;
      if (depth == 0 && IsPunct(t, ';')) {
        Next();
        return;
      }
      if (AtStatementStart(t) && (depth == 0 || t.pos.column == 1)) return;
      Next();
    }
  }

  // ---- grammar --------------------------------------------------------------------

  void Statement() {
    const Token& first = Peek();
    if (AcceptWord("CREATE")) {
      if (AcceptWord("SCHEMA")) {
        Name name = ExpectName("a schema name");
        // It names the generated files and the C++ namespace.
        bool plain = !name.text.empty() && !std::isdigit(static_cast<unsigned char>(name.text[0]));
        for (char c : name.text)
          plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
        if (!plain) {
          Fail(name.pos, "schema name \"" + name.text +
                             "\" is not an identifier ([A-Za-z_][A-Za-z0-9_]*): it names "
                             "the generated files and the C++ namespace");
        }
        result_.statements.push_back(SchemaDecl{std::move(name)});
        AcceptPunct(';');
        return;
      }
      if (AcceptWord("MESSAGE")) return Message();
      if (AcceptWord("TABLE")) return Table();
      if (IsWord(Peek(), "LOCAL") || IsWord(Peek(), "GLOBAL")) return Index(first.pos);
      if (IsWord(Peek(), "INDEX")) {
        Fail(Peek().pos, "an index must be declared LOCAL or GLOBAL",
             "CREATE LOCAL INDEX keeps entries inside the entity group (consistent); "
             "CREATE GLOBAL INDEX spans entity groups");
      }
      Fail(Peek().pos,
           "expected SCHEMA, MESSAGE, TABLE, LOCAL INDEX or GLOBAL INDEX after CREATE, found " +
               Describe(Peek()));
    }
    if (AcceptWord("ALTER")) return Alter(first.pos);
    if (IsWord(first, "DROP") && IsWord(Peek(1), "INDEX")) {
      Next();
      Next();
      AlterDecl a;
      a.kind = AlterDecl::Kind::kDropIndex;
      a.pos = first.pos;
      a.target = ExpectName("an index name");
      ExpectPunct(';', "after DROP INDEX");
      result_.statements.push_back(std::move(a));
      return;
    }
    Fail(first.pos, "expected a statement (CREATE, ALTER or DROP INDEX), found " + Describe(first));
  }

  void Message() {
    MessageDecl m;
    m.name = ExpectName("a message name");
    Body("message " + m.name.text, &m.fields, &m.reserved);
    AcceptPunct(';');
    result_.statements.push_back(std::move(m));
  }

  // { (field | RESERVED n, ...;)* }; errors are reported and skipped one
  // item at a time.
  void Body(const std::string& owner, std::vector<FieldDecl>* fields,
            std::vector<ReservedDecl>* reserved) {
    ExpectPunct('{', "to open the body of " + owner);
    while (!IsPunct(Peek(), '}')) {
      if (Peek().kind == Token::Kind::kEnd || AtStatementStart(Peek())) {
        Fail(Peek().pos,
             "expected '}' to close the body of " + owner + ", found " + Describe(Peek()));
      }
      const size_t start = index_;
      try {
        if (AcceptWord("RESERVED")) {
          do {
            reserved->push_back(ReservedDecl{Number("a field number after RESERVED"), last_->pos});
          } while (AcceptPunct(','));
          ExpectPunct(';', "after RESERVED numbers");
          continue;
        }
        fields->push_back(Field());
        ExpectPunct(';', "after the field");
      } catch (const SyntaxError&) {
        if (index_ == start) Next();
        while (Peek().kind != Token::Kind::kEnd && !IsPunct(Peek(), ';') && !IsPunct(Peek(), '}') &&
               !AtStatementStart(Peek())) {
          Next();
        }
        AcceptPunct(';');
      }
    }
    Next();  // '}'
  }

  // A positive decimal field number.
  int Number(std::string_view what) {
    const Token& t = Peek();
    if (t.kind != Token::Kind::kNumber)
      Fail(t.pos, "expected " + std::string(what) + ", found " + Describe(t));
    Next();
    int64_t n = 0;
    for (char c : t.text) {
      if (c < '0' || c > '9' || (n = n * 10 + (c - '0')) > 536870911) {
        Fail(t.pos, "\"" + t.text + "\" is not a field number (1 to 536870911)");
      }
    }
    if (n == 0) Fail(t.pos, "field numbers start at 1");
    return static_cast<int>(n);
  }

  FieldDecl Field() {
    FieldDecl f;
    f.pos = Peek().pos;
    if (AcceptWord("required")) {
      f.label = REQUIRED;
    } else if (AcceptWord("optional")) {
      f.label = OPTIONAL;
    } else if (AcceptWord("repeated")) {
      f.label = REPEATED;
    } else {
      Fail(Peek().pos,
           "expected required, optional or repeated to start a field, found " + Describe(Peek()),
           "every field has a label, as in: optional string thumbnail_url;");
    }
    static constexpr std::pair<std::string_view, FieldType> kTypes[] = {
        {"int32", INT32},   {"int64", INT64},   {"uint64", UINT64}, {"bool", BOOL},
        {"double", DOUBLE}, {"string", STRING}, {"bytes", BYTES}};
    for (const auto& [word, type] : kTypes) {
      if (AcceptWord(word)) {
        f.type = type;
        break;
      }
    }
    if (f.type == FIELD_TYPE_UNSPECIFIED) {
      f.type = MESSAGE;
      f.message_type = ExpectName("a field type");
    }
    f.name = ExpectName("a field name");
    if (AcceptPunct('=')) {
      f.number_pos = Peek().pos;
      f.number = Number("a field number after '='");
    }
    return f;
  }

  std::vector<KeyPartDecl> KeyParts(std::string_view context) {
    ExpectPunct('(', context);
    std::vector<KeyPartDecl> parts;
    do {
      KeyPartDecl k;
      k.field = ExpectName("a column name");
      if (AcceptWord("DESC")) {
        k.descending = true;
      } else {
        AcceptWord("ASC");
      }
      k.scatter = AcceptWord("SCATTER");
      parts.push_back(std::move(k));
    } while (AcceptPunct(','));
    ExpectPunct(')', "to close the column list");
    return parts;
  }

  std::vector<Name> Names(std::string_view context) {
    ExpectPunct('(', context);
    std::vector<Name> names;
    do {
      names.push_back(ExpectName("a column name"));
    } while (AcceptPunct(','));
    ExpectPunct(')', "to close the column list");
    return names;
  }

  void Table() {
    TableDecl t;
    t.name = ExpectName("a table name");
    Body("table " + t.name.text, &t.fields, &t.reserved);
    do {
      const Token& c = Peek();
      if (AcceptWord("PRIMARY")) {
        ExpectWord("KEY", "after PRIMARY");
        if (t.primary_key_pos)
          Error(c.pos, "table " + t.name.text + " has two PRIMARY KEY clauses");
        t.primary_key_pos = c.pos;
        t.primary_key = KeyParts("after PRIMARY KEY");
      } else if (AcceptWord("IN")) {
        ExpectWord("TABLE", "after IN");
        if (t.in_table) Error(c.pos, "table " + t.name.text + " has two IN TABLE clauses");
        t.in_table = ExpectName("a table name");
      } else if (AcceptWord("ENTITY")) {
        ExpectWord("GROUP", "after ENTITY");
        if (AcceptWord("ROOT")) {
          if (t.root_pos) Error(c.pos, "table " + t.name.text + " says ENTITY GROUP ROOT twice");
          t.root_pos = c.pos;
        } else if (AcceptWord("KEY")) {
          if (t.group_key_pos)
            Error(c.pos, "table " + t.name.text + " has two ENTITY GROUP KEY clauses");
          t.group_key_pos = c.pos;
          t.group_key = Names("after ENTITY GROUP KEY");
          ExpectWord("REFERENCES", "after ENTITY GROUP KEY(...)");
          t.references = ExpectName("the root table's name");
        } else {
          Fail(Peek().pos, "expected ROOT or KEY after ENTITY GROUP, found " + Describe(Peek()));
        }
      } else if (AcceptWord("ENCRYPTED")) {
        if (t.encrypted_pos) Error(c.pos, "table " + t.name.text + " says ENCRYPTED twice");
        t.encrypted_pos = c.pos;
      } else {
        Fail(c.pos,
             "expected PRIMARY KEY, ENTITY GROUP ROOT, ENTITY GROUP KEY, IN TABLE or ENCRYPTED "
             "after the body of "
             "table " +
                 t.name.text + ", found " + Describe(c));
      }
    } while (AcceptPunct(','));
    ExpectPunct(';', "at the end of CREATE TABLE " + t.name.text);
    result_.statements.push_back(std::move(t));
  }

  void Index(SourcePos pos) {
    IndexDecl x;
    x.pos = pos;
    x.scope = AcceptWord("LOCAL") ? IndexDescriptor::LOCAL : (Next(), IndexDescriptor::GLOBAL);
    ExpectWord("INDEX", x.scope == IndexDescriptor::LOCAL ? "after LOCAL" : "after GLOBAL");
    x.name = ExpectName("an index name");
    ExpectWord("ON", "after the index name");
    x.table = ExpectName("a table name");
    x.columns = KeyParts("after the table name");
    for (;;) {
      const Token& c = Peek();
      if (AcceptWord("STORING")) {
        if (!x.storing.empty()) Error(c.pos, "index " + x.name.text + " has two STORING clauses");
        x.storing = Names("after STORING");
      } else if (AcceptWord("INLINE")) {
        x.inline_pos = c.pos;
        if (AcceptWord("IN")) x.inline_in = ExpectName("a table name");
      } else {
        break;
      }
    }
    ExpectPunct(';', "at the end of CREATE INDEX " + x.name.text);
    result_.statements.push_back(std::move(x));
  }

  void Alter(SourcePos pos) {
    ExpectWord("TABLE", "after ALTER");
    AlterDecl a;
    a.pos = pos;
    a.table = ExpectName("a table name");
    if (AcceptWord("ADD")) {
      a.kind = AlterDecl::Kind::kAddField;
      a.field = Field();
    } else if (AcceptWord("DROP")) {
      a.kind = AlterDecl::Kind::kDropField;
      a.target = ExpectName("a field name");
    } else {
      Fail(Peek().pos, "expected ADD or DROP after ALTER TABLE " + a.table.text + ", found " +
                           Describe(Peek()));
    }
    ExpectPunct(';', "at the end of ALTER TABLE");
    result_.statements.push_back(std::move(a));
  }

  std::vector<Token> tokens_;
  const Token* last_ = nullptr;  // the last token consumed
  size_t index_ = 0;
  ParseResult result_;
};

}  // namespace

ParseResult Parse(std::string_view source) { return Parser(source).Run(); }

}  // namespace megastore::schema
