#include "kernels/traces/trace_expression.h"

#include <cctype>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln_base/status_macros.h"

namespace kiln::traces {
namespace {

struct Token {
  enum Kind { kEnd, kNumber, kName, kOp } kind = kEnd;
  std::string text;
  size_t pos = 0;
};

struct Node {
  enum Kind { kNumber, kName, kUnary, kBinary, kCompare, kAnd, kOr, kNot, kIn, kCall } kind;
  std::string op;  // operator, comparison chain ops joined by ' ', or the function name
  double number = 0;
  std::string name;
  size_t pos = 0;
  bool negated = false;  // kIn: "not in"
  std::vector<std::unique_ptr<Node>> children;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<std::unique_ptr<Node>> Parse() {
    KILN_ABSL_RETURN_IF_ERROR(Tokenize());
    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> node, ParseOr());
    if (Peek().kind != Token::kEnd) return Error(Peek().pos, "unexpected '" + Peek().text + "'");
    return node;
  }

 private:
  absl::Status Error(size_t pos, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint '", std::string(text_), "': ", what, " at position ", pos));
  }

  absl::Status Tokenize() {
    size_t i = 0;
    while (i < text_.size()) {
      const char c = text_[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        while (j < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[j])) || text_[j] == '_')) ++j;
        tokens_.push_back({Token::kNumber, std::string(text_.substr(i, j - i)), i});
        i = j;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[j])) || text_[j] == '_')) ++j;
        tokens_.push_back({Token::kName, std::string(text_.substr(i, j - i)), i});
        i = j;
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-",
                                     "*",  "/",  "%",  "<",  ">",  "(",  ")", ","};
        bool found = false;
        for (const char* op : kOps) {
          const std::string_view o(op);
          if (text_.substr(i, o.size()) == o) {
            tokens_.push_back({Token::kOp, std::string(o), i});
            i += o.size();
            found = true;
            break;
          }
        }
        if (!found) return Error(i, std::string("unexpected character '") + c + "'");
      }
    }
    tokens_.push_back({Token::kEnd, "end of expression", text_.size()});
    return absl::OkStatus();
  }

  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(next_ + ahead, tokens_.size() - 1)]; }
  bool IsOp(const char* op, size_t ahead = 0) const { return Peek(ahead).kind == Token::kOp && Peek(ahead).text == op; }
  bool IsWord(const char* word, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::kName && Peek(ahead).text == word;
  }
  Token Take() { return tokens_[std::min(next_++, tokens_.size() - 1)]; }

  static std::unique_ptr<Node> Make(Node::Kind kind, size_t pos, std::string op = "") {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->pos = pos;
    n->op = std::move(op);
    return n;
  }

  using Result = absl::StatusOr<std::unique_ptr<Node>>;

  Result ParseOr() {
    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> left, ParseAnd());
    while (IsWord("or")) {
      auto node = Make(Node::kOr, Take().pos);
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> right, ParseAnd());
      node->children.push_back(std::move(left));
      node->children.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }

  Result ParseAnd() {
    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> left, ParseNot());
    while (IsWord("and")) {
      auto node = Make(Node::kAnd, Take().pos);
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> right, ParseNot());
      node->children.push_back(std::move(left));
      node->children.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }

  Result ParseNot() {
    if (IsWord("not")) {
      auto node = Make(Node::kNot, Take().pos);
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> operand, ParseNot());
      node->children.push_back(std::move(operand));
      return node;
    }
    return ParseComparison();
  }

  bool AtComparison() const {
    for (const char* op : {"==", "!=", "<", "<=", ">", ">="})
      if (IsOp(op)) return true;
    return false;
  }

  Result ParseComparison() {
    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> first, ParseSum());
    if (IsWord("in") || (IsWord("not") && IsWord("in", 1))) {
      auto node = Make(Node::kIn, Peek().pos);
      if (IsWord("not")) {
        Take();
        node->negated = true;
      }
      Take();  // in
      if (!IsOp("(")) return Error(Peek().pos, "'in' takes a parenthesized list: x in (64, 128)");
      Take();
      node->children.push_back(std::move(first));
      while (true) {
        KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> item, ParseSum());
        node->children.push_back(std::move(item));
        if (IsOp(",")) {
          Take();
          if (IsOp(")")) break;  // a trailing comma, as Python allows
          continue;
        }
        break;
      }
      if (!IsOp(")")) return Error(Peek().pos, "expected ')' closing the 'in' list");
      Take();
      return node;
    }
    if (!AtComparison()) return first;
    auto node = Make(Node::kCompare, Peek().pos);
    node->children.push_back(std::move(first));
    while (AtComparison()) {
      if (!node->op.empty()) node->op += ' ';
      node->op += Take().text;
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> next, ParseSum());
      node->children.push_back(std::move(next));
    }
    return node;
  }

  Result ParseSum() {
    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> left, ParseTerm());
    while (IsOp("+") || IsOp("-")) {
      const Token t = Take();
      auto node = Make(Node::kBinary, t.pos, t.text);
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> right, ParseTerm());
      node->children.push_back(std::move(left));
      node->children.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }

  Result ParseTerm() {
    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> left, ParseFactor());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token t = Take();
      auto node = Make(Node::kBinary, t.pos, t.text);
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> right, ParseFactor());
      node->children.push_back(std::move(left));
      node->children.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }

  Result ParseFactor() {
    if (IsOp("+") || IsOp("-")) {
      const Token t = Take();
      auto node = Make(Node::kUnary, t.pos, t.text);
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> operand, ParseFactor());
      node->children.push_back(std::move(operand));
      return node;
    }
    KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> base, ParseAtom());
    if (IsOp("**")) {
      auto node = Make(Node::kBinary, Take().pos, "**");
      // Right-associative, binds tighter than unary on its left.
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> exponent, ParseFactor());
      node->children.push_back(std::move(base));
      node->children.push_back(std::move(exponent));
      return node;
    }
    return base;
  }

  Result ParseAtom() {
    const Token t = Take();
    if (t.kind == Token::kNumber) {
      std::string digits;
      for (char c : t.text)
        if (c != '_') digits += c;
      auto node = Make(Node::kNumber, t.pos);
      node->number = std::stod(digits);
      return node;
    }
    if (t.kind == Token::kName) {
      if (t.text == "True" || t.text == "False") {
        auto node = Make(Node::kNumber, t.pos);
        node->number = t.text == "True" ? 1 : 0;
        return node;
      }
      for (const char* word : {"and", "or", "not", "in"})
        if (t.text == word) return Error(t.pos, "unexpected '" + t.text + "'");
      if (IsOp("(")) {
        if (t.text != "min" && t.text != "max" && t.text != "abs")
          return Error(t.pos, "unknown function '" + t.text + "' (allowed: min, max, abs)");
        Take();
        auto node = Make(Node::kCall, t.pos, t.text);
        while (!IsOp(")")) {
          KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> arg, ParseSum());
          node->children.push_back(std::move(arg));
          if (!IsOp(",")) break;
          Take();
        }
        if (!IsOp(")")) return Error(Peek().pos, "expected ')' closing " + t.text + "(...)");
        Take();
        const size_t n = node->children.size();
        if (t.text == "abs" ? n != 1 : n < 2)
          return Error(t.pos, t.text + "() takes " + (t.text == "abs" ? "one argument" : "two or more arguments"));
        return node;
      }
      auto node = Make(Node::kName, t.pos);
      node->name = t.text;
      return node;
    }
    if (t.kind == Token::kOp && t.text == "(") {
      KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> inner, ParseOr());
      if (!IsOp(")")) return Error(Peek().pos, "expected ')'");
      Take();
      return inner;
    }
    return Error(t.pos, "expected a number, an axis or '(', found '" + t.text + "'");
  }

  std::string_view text_;
  std::vector<Token> tokens_;
  size_t next_ = 0;
};

absl::Status CheckNames(const Node& node, const std::set<std::string>& names, std::string_view text) {
  if (node.kind == Node::kName && names.count(node.name) == 0) {
    std::string known;
    for (const auto& n : names) absl::StrAppend(&known, known.empty() ? "" : ", ", n);
    return absl::InvalidArgumentError(
        absl::StrCat("constraint '", std::string(text), "': '", node.name, "' is not an axis (axes: ", known, ")"));
  }
  for (const auto& child : node.children) {
    KILN_ABSL_RETURN_IF_ERROR(CheckNames(*child, names, text));
  }
  return absl::OkStatus();
}

class Evaluator {
 public:
  Evaluator(std::string_view text, const std::map<std::string, int64_t>& values) : text_(text), values_(values) {}

  absl::StatusOr<double> Eval(const Node& n) {
    switch (n.kind) {
      case Node::kNumber: return n.number;
      case Node::kName: {
        auto it = values_.find(n.name);
        if (it == values_.end()) return Error(n, "'" + n.name + "' has no value");
        return static_cast<double>(it->second);
      }
      case Node::kUnary: {
        KILN_ABSL_ASSIGN_OR_RETURN(double v, Eval(*n.children[0]));
        return n.op == "-" ? -v : v;
      }
      case Node::kNot: {
        KILN_ABSL_ASSIGN_OR_RETURN(double v, Eval(*n.children[0]));
        return v == 0 ? 1.0 : 0.0;
      }
      case Node::kAnd:
      case Node::kOr: {
        KILN_ABSL_ASSIGN_OR_RETURN(double a, Eval(*n.children[0]));
        if (n.kind == Node::kAnd ? a == 0 : a != 0) return a != 0 ? 1.0 : 0.0;
        KILN_ABSL_ASSIGN_OR_RETURN(double b, Eval(*n.children[1]));
        return b != 0 ? 1.0 : 0.0;
      }
      case Node::kIn: {
        KILN_ABSL_ASSIGN_OR_RETURN(double x, Eval(*n.children[0]));
        bool found = false;
        for (size_t i = 1; i < n.children.size(); ++i) {
          KILN_ABSL_ASSIGN_OR_RETURN(double v, Eval(*n.children[i]));
          found = found || v == x;
        }
        return found != n.negated ? 1.0 : 0.0;
      }
      case Node::kCompare: {
        std::vector<std::string> ops;
        for (size_t start = 0; start <= n.op.size();) {
          size_t end = n.op.find(' ', start);
          if (end == std::string::npos) end = n.op.size();
          ops.push_back(n.op.substr(start, end - start));
          start = end + 1;
        }
        KILN_ABSL_ASSIGN_OR_RETURN(double left, Eval(*n.children[0]));
        for (size_t i = 0; i < ops.size(); ++i) {
          KILN_ABSL_ASSIGN_OR_RETURN(double right, Eval(*n.children[i + 1]));
          const double a = left, b = right;
          const std::string& op = ops[i];
          const bool holds = op == "=="   ? a == b
                             : op == "!=" ? a != b
                             : op == "<"  ? a < b
                             : op == "<=" ? a <= b
                             : op == ">"  ? a > b
                                          : a >= b;
          if (!holds) return 0.0;
          left = right;
        }
        return 1.0;
      }
      case Node::kCall: {
        std::vector<double> args;
        for (const auto& c : n.children) {
          KILN_ABSL_ASSIGN_OR_RETURN(double v, Eval(*c));
          args.push_back(v);
        }
        if (n.op == "abs") return std::fabs(args[0]);
        double r = args[0];
        for (double v : args) r = n.op == "min" ? std::min(r, v) : std::max(r, v);
        return r;
      }
      case Node::kBinary: {
        KILN_ABSL_ASSIGN_OR_RETURN(double x, Eval(*n.children[0]));
        KILN_ABSL_ASSIGN_OR_RETURN(double y, Eval(*n.children[1]));
        if (n.op == "+") return x + y;
        if (n.op == "-") return x - y;
        if (n.op == "*") return x * y;
        if (n.op == "**") return std::pow(x, y);
        if (y == 0) return Error(n, "division by zero");
        if (n.op == "/") return x / y;
        if (n.op == "//") return std::floor(x / y);
        return x - y * std::floor(x / y);  // %, with the divisor's sign as in Python
      }
    }
    return Error(n, "internal: unknown node");
  }

 private:
  absl::Status Error(const Node& n, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint '", std::string(text_), "': ", what, " at position ", n.pos));
  }
  std::string_view text_;
  const std::map<std::string, int64_t>& values_;
};

}  // namespace

absl::Status CheckExpression(std::string_view expression, const std::set<std::string>& names) {
  KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> tree, Parser(expression).Parse());
  return CheckNames(*tree, names, expression);
}

absl::StatusOr<double> EvaluateExpression(std::string_view expression, const std::map<std::string, int64_t>& values) {
  KILN_ABSL_ASSIGN_OR_RETURN(std::unique_ptr<Node> tree, Parser(expression).Parse());
  return Evaluator(expression, values).Eval(*tree);
}

}  // namespace kiln::traces
