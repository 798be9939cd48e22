"""The filter language: a tokenizer and a recursive-descent parser.

Filters are user text that ends up both in Python and inside SQL, so the
language is parsed by hand into a small AST and never handed to eval/exec or
Python's `ast`: anything outside the grammar (calls, attribute access,
subscripts) is a syntax error with its position (1-based character offset).

    expr      := or
    or        := and ('or' and)*
    and       := not ('and' not)*
    not       := 'not' not | predicate
    predicate := sum [ cmp sum | 'is' ['not'] 'null'
                     | ['not'] 'in' '(' sum (',' sum)* ')'
                     | ['not'] 'between' sum 'and' sum ]
    sum       := product (('+' | '-') product)*
    product   := unary (('*' | '/' | '%') unary)*
    unary     := '-' unary | primary
    primary   := NUMBER | STRING | 'true' | 'false' | 'null' | NAME | "NAME" | '(' expr ')'

Keywords are case-insensitive; a column named like a keyword is written
"double quoted". Comparisons do not chain (`a < b < c` is an error), as in SQL.

Filters come from users, and parsing, compiling and evaluating them recurse
over the tree, so its size is bounded (the limits below, listed in
docs/errors.md): a filter nested deeper, or with a longer IN list, or with a
number literal longer, is a syntax error, never a RecursionError. A chain
`a or b or c` nests one level per operator, as it is evaluated.

Typing and compilation (to Python and to SQL) live in expr_compile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from setu_engine.errors import ExprError

# How deeply a filter's operators and parentheses may nest.
MAX_FILTER_DEPTH = 64
# Values in one IN list (compiled to a chain of comparisons).
MAX_IN_ITEMS = 256
# Characters in one number literal (Python's int() refuses 4,300 digits).
MAX_NUMBER_LENGTH = 1000

KEYWORDS = frozenset({"and", "or", "not", "is", "null", "in", "between", "true", "false"})
COMPARISONS = frozenset({"=", "!=", "<>", "<", "<=", ">", ">="})

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r\n]+)
  | (?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<string>'(?:[^']|'')*')
  | (?P<op><=|>=|<>|!=|[=<>+\-*/%(),])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # number, name, quoted, string, op, keyword, end
    text: str
    pos: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            raise ExprError(f"unexpected {text[i]!r} at {i + 1}", i + 1)
        kind = m.lastgroup or ""
        value = m.group()
        if kind == "number" and m.end() < len(text) and _ident_char(text[m.end()]):
            raise ExprError(f"unexpected {text[m.end()]!r} at {m.end() + 1}", m.end() + 1)
        if kind == "number" and len(value) > MAX_NUMBER_LENGTH:
            raise ExprError(f"number longer than {MAX_NUMBER_LENGTH} characters at {i + 1}", i + 1)
        if kind == "name" and value.lower() in KEYWORDS:
            kind, value = "keyword", value.lower()
        if kind != "space":
            tokens.append(Token(kind, value, i + 1))
        i = m.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


def _ident_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_.'\""


# -- AST -------------------------------------------------------------------


@dataclass(frozen=True)
class Name:
    name: str
    pos: int


@dataclass(frozen=True)
class Literal:
    kind: str  # int, numeric, string, bool, null
    value: int | Decimal | str | bool | None
    pos: int


@dataclass(frozen=True)
class Unary:
    op: str  # '-' or 'not'
    operand: Node
    pos: int


@dataclass(frozen=True)
class Binary:
    op: str  # arithmetic, comparison, 'and', 'or'
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True)
class IsNull:
    operand: Node
    negated: bool
    pos: int


@dataclass(frozen=True)
class InList:
    operand: Node
    items: tuple[Node, ...]
    negated: bool
    pos: int


@dataclass(frozen=True)
class Between:
    operand: Node
    low: Node
    high: Node
    negated: bool
    pos: int


Node = Name | Literal | Unary | Binary | IsNull | InList | Between


def parse(text: str) -> Node:
    """The AST of a filter; raises ExprError naming the offending token."""
    if not isinstance(text, str):
        raise ExprError("a filter must be a string")
    parser = _Parser(tokenize(text))
    node = parser.expr()
    parser.expect_end()
    _check_depth(node)
    return node


def _children(node: Node) -> tuple[Node, ...]:
    match node:
        case Name() | Literal():
            return ()
        case Unary(operand=a) | IsNull(operand=a):
            return (a,)
        case Binary(left=a, right=b):
            return (a, b)
        case InList(operand=a, items=items):
            return (a, *items)
        case Between(operand=a, low=lo, high=hi):
            return (a, lo, hi)
    raise AssertionError(node)


def _check_depth(root: Node) -> None:
    """Left-deep chains (`a + b + c ...`) are built by loops, not recursion,
    so the finished tree is measured too, without recursing."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_FILTER_DEPTH:
            raise _too_deep(node.pos)
        stack.extend((child, depth + 1) for child in _children(node))


def _too_deep(pos: int) -> ExprError:
    return ExprError(f"nested deeper than {MAX_FILTER_DEPTH} levels at {pos}", pos)


def names(node: Node) -> list[str]:
    """The column names a filter reads, in order of appearance."""
    match node:
        case Name(name=name):
            return [name]
        case Literal():
            return []
        case Unary(operand=a) | IsNull(operand=a):
            return names(a)
        case Binary(left=a, right=b):
            return names(a) + names(b)
        case InList(operand=a, items=items):
            return names(a) + [n for item in items for n in names(item)]
        case Between(operand=a, low=lo, high=hi):
            return names(a) + names(lo) + names(hi)
    raise AssertionError(node)


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0
        self.depth = 0  # of recursive descent into `not`, `-` and `(`

    def deeper(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_FILTER_DEPTH:
            raise _too_deep(pos)

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, kind: str, *texts: str) -> bool:
        return self.tok.kind == kind and (not texts or self.tok.text in texts)

    def unexpected(self) -> ExprError:
        tok = self.tok
        if tok.kind == "end":
            return ExprError(f"unexpected end of filter at {tok.pos}", tok.pos)
        return ExprError(f"unexpected {tok.text!r} at {tok.pos}", tok.pos)

    def expect(self, kind: str, text: str) -> Token:
        if not self.at(kind, text):
            raise self.unexpected()
        return self.next()

    def expect_end(self) -> None:
        if self.tok.kind != "end":
            raise self.unexpected()

    def expr(self) -> Node:
        left = self.conjunction()
        while self.at("keyword", "or"):
            pos = self.next().pos
            left = Binary("or", left, self.conjunction(), pos)
        return left

    def conjunction(self) -> Node:
        left = self.negation()
        while self.at("keyword", "and"):
            pos = self.next().pos
            left = Binary("and", left, self.negation(), pos)
        return left

    def negation(self) -> Node:
        if self.at("keyword", "not"):
            pos = self.next().pos
            self.deeper(pos)
            node = Unary("not", self.negation(), pos)
            self.depth -= 1
            return node
        return self.predicate()

    def predicate(self) -> Node:
        left = self.sum()
        tok = self.tok
        if tok.kind == "op" and tok.text in COMPARISONS:
            self.next()
            op = "!=" if tok.text == "<>" else tok.text
            node: Node = Binary(op, left, self.sum(), tok.pos)
        elif self.at("keyword", "is"):
            self.next()
            negated = self.at("keyword", "not")
            if negated:
                self.next()
            self.expect("keyword", "null")
            node = IsNull(left, negated, tok.pos)
        elif self.at("keyword", "not", "in", "between"):
            negated = self.at("keyword", "not")
            if negated:
                self.next()
            if self.at("keyword", "in"):
                node = self.in_list(left, negated, tok.pos)
            elif self.at("keyword", "between"):
                self.next()
                low = self.sum()
                self.expect("keyword", "and")
                node = Between(left, low, self.sum(), negated, tok.pos)
            else:
                raise self.unexpected()
        else:
            return left
        nxt = self.tok
        if (nxt.kind == "op" and nxt.text in COMPARISONS) or self.at(
            "keyword", "is", "in", "between"
        ):
            raise self.unexpected()
        return node

    def in_list(self, left: Node, negated: bool, pos: int) -> Node:
        self.expect("keyword", "in")
        self.expect("op", "(")
        items = [self.sum()]
        while self.at("op", ","):
            comma = self.next()
            if len(items) == MAX_IN_ITEMS:
                raise ExprError(
                    f"more than {MAX_IN_ITEMS} values in a list at {comma.pos}", comma.pos
                )
            items.append(self.sum())
        self.expect("op", ")")
        return InList(left, tuple(items), negated, pos)

    def sum(self) -> Node:
        left = self.product()
        while self.at("op", "+", "-"):
            tok = self.next()
            left = Binary(tok.text, left, self.product(), tok.pos)
        return left

    def product(self) -> Node:
        left = self.unary()
        while self.at("op", "*", "/", "%"):
            tok = self.next()
            left = Binary(tok.text, left, self.unary(), tok.pos)
        return left

    def unary(self) -> Node:
        if self.at("op", "-"):
            pos = self.next().pos
            self.deeper(pos)
            node = Unary("-", self.unary(), pos)
            self.depth -= 1
            return node
        return self.primary()

    def primary(self) -> Node:
        tok = self.tok
        if tok.kind == "number":
            self.next()
            if re.fullmatch(r"[0-9]+", tok.text):
                return Literal("int", int(tok.text), tok.pos)
            return Literal("numeric", Decimal(tok.text), tok.pos)
        if tok.kind == "string":
            self.next()
            return Literal("string", tok.text[1:-1].replace("''", "'"), tok.pos)
        if tok.kind == "name":
            self.next()
            return Name(tok.text, tok.pos)
        if tok.kind == "quoted":
            self.next()
            return Name(tok.text[1:-1].replace('""', '"'), tok.pos)
        if self.at("keyword", "true", "false"):
            self.next()
            return Literal("bool", tok.text == "true", tok.pos)
        if self.at("keyword", "null"):
            self.next()
            return Literal("null", None, tok.pos)
        if self.at("op", "("):
            self.deeper(self.next().pos)
            node = self.expr()
            self.expect("op", ")")
            self.depth -= 1
            return node
        raise self.unexpected()
