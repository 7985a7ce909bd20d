//! Statement text → [`Statement`], with sqlparser's tokenizer.
//!
//! The grammar is small and fixed, so it is a hand-written recursive-descent
//! over sqlparser tokens (which already know every quoting rule: `'…'` with
//! `''` escapes, `$$…$$`, `$tag$…$tag$`, comments, case-insensitive keywords):
//!
//! ```text
//! CREATE [OR REPLACE] MATERIALIZED VIEW <name> WITH ( <option> = <literal> [, …] ) [;]
//! DROP MATERIALIZED VIEW [IF EXISTS] <name> [;]
//! ```

use crate::error::{Error, ErrorKind, Result};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

/// Statements longer than this are refused before tokenizing.
pub const MAX_STATEMENT_BYTES: usize = 512 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    Create(CreateStatement),
    Drop(DropStatement),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateStatement {
    pub or_replace: bool,
    pub name: String,
    pub options: Vec<RawOption>,
    /// Where the `CREATE` keyword ends in the text (line and column, 1-based,
    /// counted in characters): `OR REPLACE` goes right there.
    pub create_keyword_end: (u64, u64),
}

impl CreateStatement {
    /// `text` (the statement this was parsed from) with `OR REPLACE` after
    /// its `CREATE` keyword, everything else — comments, layout, non-ASCII
    /// text, line ends — as written. Unchanged when it already replaces.
    pub fn with_or_replace(&self, text: &str) -> String {
        if self.or_replace {
            return text.to_string();
        }
        let (line, column) = self.create_keyword_end;
        let mut current = (1u64, 1u64);
        let mut at = text.len();
        for (offset, c) in text.char_indices() {
            if current == (line, column) {
                at = offset;
                break;
            }
            current = if c == '\n' {
                (current.0 + 1, 1)
            } else {
                (current.0, current.1 + 1)
            };
        }
        format!("{} OR REPLACE{}", &text[..at], &text[at..])
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropStatement {
    pub if_exists: bool,
    pub name: String,
}

/// One `name = literal` pair as written, before any option rule is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawOption {
    pub name: String,
    pub value: Literal,
    pub line: u64,
    pub column: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    /// A `'…'` or dollar-quoted string, unescaped.
    String(String),
    /// An integer literal as written, with its sign.
    Integer(String),
    /// `true` or `false`.
    Boolean(bool),
}

impl Literal {
    pub fn describe(&self) -> &'static str {
        match self {
            Literal::String(_) => "a string",
            Literal::Integer(_) => "an integer",
            Literal::Boolean(_) => "a boolean",
        }
    }
}

/// Parses one CREATE or DROP MATERIALIZED VIEW statement.
pub fn parse(text: &str) -> Result<Statement> {
    check_size(text)?;
    let mut p = Parser::new(text)?;
    let statement = match p.peek_keyword() {
        Some(Keyword::CREATE) => Statement::Create(p.create()?),
        Some(Keyword::DROP) => Statement::Drop(p.drop_statement()?),
        _ => return Err(p.unexpected("CREATE or DROP")),
    };
    p.end()?;
    Ok(statement)
}

/// The view name `text` is when it is a bare name, not a statement: one
/// identifier (then an optional `;`), unquoted ones folded to lower case as
/// in a statement. `None` for anything else (a statement, or not SQL).
pub fn bare_name(text: &str) -> Option<String> {
    if text.len() > MAX_STATEMENT_BYTES {
        return None;
    }
    let mut p = Parser::new(text).ok()?;
    if matches!(p.peek_keyword(), Some(Keyword::CREATE | Keyword::DROP)) {
        return None;
    }
    let name = p.identifier("a view name").ok()?;
    p.end().ok()?;
    Some(name)
}

pub(crate) fn check_size(text: &str) -> Result<()> {
    if text.len() > MAX_STATEMENT_BYTES {
        return Err(Error::new(
            ErrorKind::ProgramLimit,
            format!(
                "statement is too long: {} bytes, the limit is {} bytes",
                text.len(),
                MAX_STATEMENT_BYTES
            ),
        ));
    }
    Ok(())
}

struct Parser {
    tokens: Vec<TokenWithSpan>,
    pos: usize,
}

impl Parser {
    fn new(text: &str) -> Result<Self> {
        let dialect = PostgreSqlDialect {};
        let tokens = Tokenizer::new(&dialect, text)
            .tokenize_with_location()
            .map_err(|e| {
                Error::syntax(format!("syntax error: {}", strip_location(&e.message)))
                    .with_detail(at(e.location))
            })?;
        let tokens = tokens
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_)))
            .collect();
        Ok(Parser { tokens, pos: 0 })
    }

    fn peek(&self) -> Option<&TokenWithSpan> {
        self.tokens
            .get(self.pos)
            .filter(|t| !matches!(t.token, Token::EOF))
    }

    fn peek_keyword(&self) -> Option<Keyword> {
        match self.peek().map(|t| &t.token) {
            Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.keyword),
            _ => None,
        }
    }

    fn location(&self) -> Location {
        match self.tokens.get(self.pos) {
            Some(t) => t.span.start,
            None => self
                .tokens
                .last()
                .map(|t| t.span.end)
                .unwrap_or(Location { line: 1, column: 1 }),
        }
    }

    fn unexpected(&self, expected: &str) -> Error {
        let found = match self.peek() {
            None => {
                return Error::syntax(format!(
                    "syntax error at end of statement: expected {expected}"
                ))
                .with_detail(at(self.location()))
            }
            Some(t) => describe_token(&t.token),
        };
        Error::syntax(format!(
            "syntax error at or near {found}: expected {expected}"
        ))
        .with_detail(at(self.location()))
    }

    fn keyword(&mut self, keyword: Keyword, expected: &str) -> Result<()> {
        if self.peek_keyword() == Some(keyword) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn optional_keyword(&mut self, keyword: Keyword) -> bool {
        if self.peek_keyword() == Some(keyword) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn token(&mut self, token: Token, expected: &str) -> Result<()> {
        match self.peek() {
            Some(t) if t.token == token => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    /// A view or option name: an unquoted word is folded to lower case, a
    /// double-quoted one is kept as written.
    fn identifier(&mut self, expected: &str) -> Result<String> {
        match self.peek().map(|t| &t.token) {
            Some(Token::Word(w)) if w.quote_style.is_none() => {
                let name = w.value.to_lowercase();
                self.pos += 1;
                Ok(name)
            }
            Some(Token::Word(w)) if w.quote_style == Some('"') => {
                let name = w.value.clone();
                self.pos += 1;
                Ok(name)
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    fn create(&mut self) -> Result<CreateStatement> {
        let create_end = self.peek().map(|t| t.span.end);
        self.keyword(Keyword::CREATE, "CREATE")?;
        let create_end = create_end.expect("a CREATE token was consumed");
        let or_replace = if self.optional_keyword(Keyword::OR) {
            self.keyword(Keyword::REPLACE, "REPLACE")?;
            true
        } else {
            false
        };
        self.keyword(Keyword::MATERIALIZED, "MATERIALIZED")?;
        self.keyword(Keyword::VIEW, "VIEW")?;
        let name = self.identifier("a view name")?;
        self.keyword(Keyword::WITH, "WITH")?;
        self.token(Token::LParen, "\"(\"")?;
        let mut options = Vec::new();
        loop {
            let start = self.location();
            let option = self.identifier("an option name")?;
            self.token(Token::Eq, "\"=\"")?;
            let quoted = matches!(
                self.peek().map(|t| &t.token),
                Some(Token::SingleQuotedString(_))
            );
            let value = self.literal()?;
            options.push(RawOption {
                name: option,
                value,
                line: start.line,
                column: start.column,
            });
            match self.peek().map(|t| &t.token) {
                Some(Token::Comma) => self.pos += 1,
                Some(Token::RParen) => {
                    self.pos += 1;
                    break;
                }
                _ if quoted => {
                    // A quote inside a single-quoted query ends the value.
                    let option = &options[options.len() - 1].name;
                    return Err(self.unexpected("\",\" or \")\"").with_hint(format!(
                        "The value of {option} ends at a quote inside it: double each quote \
                         within the query ('1 hour' becomes ''1 hour''), or quote the whole \
                         query with dollar quotes ({option} = $q$ … $q$)."
                    )))
                }
                _ => return Err(self.unexpected("\",\" or \")\"")),
            }
        }
        Ok(CreateStatement {
            or_replace,
            name,
            options,
            create_keyword_end: (create_end.line, create_end.column),
        })
    }

    fn literal(&mut self) -> Result<Literal> {
        let negative = matches!(self.peek().map(|t| &t.token), Some(Token::Minus));
        if negative {
            self.pos += 1;
        }
        let literal = match self.peek().map(|t| &t.token) {
            Some(Token::Number(n, _)) => {
                let text = if negative { format!("-{n}") } else { n.clone() };
                Literal::Integer(text)
            }
            Some(Token::SingleQuotedString(s)) if !negative => Literal::String(s.clone()),
            Some(Token::DollarQuotedString(s)) if !negative => Literal::String(s.value.clone()),
            Some(Token::Word(w))
                if !negative && w.quote_style.is_none() && w.keyword == Keyword::TRUE =>
            {
                Literal::Boolean(true)
            }
            Some(Token::Word(w))
                if !negative && w.quote_style.is_none() && w.keyword == Keyword::FALSE =>
            {
                Literal::Boolean(false)
            }
            _ => return Err(self.unexpected("a string, integer or boolean literal")),
        };
        self.pos += 1;
        Ok(literal)
    }

    fn drop_statement(&mut self) -> Result<DropStatement> {
        self.keyword(Keyword::DROP, "DROP")?;
        self.keyword(Keyword::MATERIALIZED, "MATERIALIZED")?;
        self.keyword(Keyword::VIEW, "VIEW")?;
        let if_exists = if self.optional_keyword(Keyword::IF) {
            self.keyword(Keyword::EXISTS, "EXISTS")?;
            true
        } else {
            false
        };
        let name = self.identifier("a view name")?;
        if matches!(self.peek().map(|t| &t.token), Some(Token::Comma)) {
            return Err(
                Error::syntax("DROP MATERIALIZED VIEW takes exactly one name")
                    .with_detail(at(self.location()))
                    .with_hint("Drop each view with its own statement."),
            );
        }
        if let Some(t) = self.peek() {
            if let Token::Word(w) = &t.token {
                if matches!(w.keyword, Keyword::CASCADE | Keyword::RESTRICT) {
                    let word = w.value.to_uppercase();
                    return Err(Error::syntax(format!(
                        "DROP MATERIALIZED VIEW takes no {word}"
                    ))
                    .with_detail(at(t.span.start))
                    .with_hint(
                        "A view another definition reads is never dropped with it: drop or replace each \
                         dependent first (micromegas.list_view_dependencies() names them).",
                    ));
                }
            }
        }
        Ok(DropStatement { if_exists, name })
    }

    fn end(&mut self) -> Result<()> {
        if matches!(self.peek().map(|t| &t.token), Some(Token::SemiColon)) {
            self.pos += 1;
        }
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.unexpected("end of statement")),
        }
    }
}

fn at(location: Location) -> String {
    format!(
        "at line {}, column {} of the statement",
        location.line, location.column
    )
}

/// sqlparser appends " at Line: l, Column: c" to its messages; the DETAIL
/// carries the position instead.
fn strip_location(message: &str) -> &str {
    match message.find(" at Line: ") {
        Some(i) => &message[..i],
        None => message,
    }
}

fn describe_token(token: &Token) -> String {
    let text = token.to_string();
    let shown: String = text.chars().take(40).collect();
    if shown.len() < text.len() {
        format!("\"{shown}…\"")
    } else {
        format!("\"{shown}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(text: &str) -> CreateStatement {
        match parse(text).unwrap() {
            Statement::Create(c) => c,
            other => panic!("expected CREATE, got {other:?}"),
        }
    }

    #[test]
    fn keywords_in_any_case_and_comments() {
        let c = create(
            "-- a comment\ncreate Or RePlace materialized VIEW Foo /* x */ with (update_group = 5);",
        );
        assert!(c.or_replace);
        assert_eq!(c.name, "foo");
        assert_eq!(c.options[0].name, "update_group");
        assert_eq!(c.options[0].value, Literal::Integer("5".into()));
    }

    #[test]
    fn quoting_forms() {
        let c = create(
            "CREATE MATERIALIZED VIEW v WITH (a = 'it''s', b = $$x 'y'$$, c = $tag$ $$ $tag$, d = -3)",
        );
        let values: Vec<_> = c.options.iter().map(|o| o.value.clone()).collect();
        assert_eq!(
            values,
            vec![
                Literal::String("it's".into()),
                Literal::String("x 'y'".into()),
                Literal::String(" $$ ".into()),
                Literal::Integer("-3".into()),
            ]
        );
        assert!(!c.or_replace);
    }

    #[test]
    fn quoted_identifier_keeps_case() {
        assert_eq!(
            create("CREATE MATERIALIZED VIEW \"Foo\" WITH (a = 1)").name,
            "Foo"
        );
    }

    #[test]
    fn drop_forms() {
        assert_eq!(
            parse("DROP MATERIALIZED VIEW IF EXISTS x;").unwrap(),
            Statement::Drop(DropStatement {
                if_exists: true,
                name: "x".into()
            })
        );
        assert_eq!(
            parse("drop materialized view x").unwrap(),
            Statement::Drop(DropStatement {
                if_exists: false,
                name: "x".into()
            })
        );
    }

    #[test]
    fn syntax_errors_name_the_token_and_position() {
        let e = parse("CREATE VIEW v WITH (a = 1)").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Syntax);
        assert_eq!(
            e.message,
            "syntax error at or near \"VIEW\": expected MATERIALIZED"
        );
        assert_eq!(
            e.detail.as_deref(),
            Some("at line 1, column 8 of the statement")
        );

        let e = parse("CREATE MATERIALIZED VIEW v WITH (a = 1").unwrap_err();
        assert_eq!(
            e.message,
            "syntax error at end of statement: expected \",\" or \")\""
        );

        let e = parse("CREATE MATERIALIZED VIEW v WITH (a = $$oops)").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Syntax);
        assert!(e.message.starts_with("syntax error: "), "{}", e.message);

        let e = parse("CREATE MATERIALIZED VIEW v WITH (a = 'x') extra").unwrap_err();
        assert_eq!(
            e.message,
            "syntax error at or near \"extra\": expected end of statement"
        );

        // A quote inside a single-quoted query ends it: the hint says what to do.
        let e = parse("CREATE MATERIALIZED VIEW v WITH (extract_query = 'SELECT date_bin('1 hour', time) FROM t')")
            .unwrap_err();
        assert_eq!(e.message, "syntax error at or near \"1\": expected \",\" or \")\"");
        let hint = e.hint.unwrap_or_default();
        assert!(hint.contains("extract_query") && hint.contains("''1 hour''") && hint.contains("$q$"), "{hint}");

        // DROP has no CASCADE (nor RESTRICT), and says so.
        for word in ["CASCADE", "restrict"] {
            let e = parse(&format!("DROP MATERIALIZED VIEW v {word}")).unwrap_err();
            assert_eq!(e.message, format!("DROP MATERIALIZED VIEW takes no {}", word.to_uppercase()));
            assert!(e.hint.unwrap_or_default().contains("list_view_dependencies()"));
        }

        // A bare name is one identifier, folded as in a statement.
        assert_eq!(bare_name("V2").as_deref(), Some("v2"));
        assert_eq!(bare_name(" error_rate ;").as_deref(), Some("error_rate"));
        assert_eq!(bare_name("\"V2\"").as_deref(), Some("V2"));
        for not_bare in ["DROP MATERIALIZED VIEW v", "drop", "a b", "'v'", "", "v;;"] {
            assert_eq!(bare_name(not_bare), None, "{not_bare}");
        }

        let e = parse("CREATE MATERIALIZED VIEW v WITH (a = b)").unwrap_err();
        assert_eq!(
            e.message,
            "syntax error at or near \"b\": expected a string, integer or boolean literal"
        );

        let e = parse("SELECT 1").unwrap_err();
        assert_eq!(
            e.message,
            "syntax error at or near \"SELECT\": expected CREATE or DROP"
        );

        let e = parse("").unwrap_err();
        assert_eq!(
            e.message,
            "syntax error at end of statement: expected CREATE or DROP"
        );

        let e = parse("DROP MATERIALIZED VIEW a, b").unwrap_err();
        assert_eq!(e.message, "DROP MATERIALIZED VIEW takes exactly one name");
    }

    #[test]
    fn multiline_position() {
        let e = parse("CREATE MATERIALIZED VIEW v WITH (\n  a = 1,\n  b 2)").unwrap_err();
        assert_eq!(
            e.detail.as_deref(),
            Some("at line 3, column 5 of the statement")
        );
    }

    #[test]
    fn oversized_statement() {
        let text = format!(
            "CREATE MATERIALIZED VIEW v WITH (a = '{}')",
            "x".repeat(MAX_STATEMENT_BYTES)
        );
        assert_eq!(parse(&text).unwrap_err().kind, ErrorKind::ProgramLimit);
    }

    #[test]
    fn or_replace_goes_after_the_create_keyword_as_written() {
        let text = "-- Owner: équipe données\r\n/* CREATE here is a comment */\r\n  create\tmaterialized view v WITH (update_group = 1);\r\n";
        let Statement::Create(c) = parse(text).unwrap() else {
            panic!("a CREATE")
        };
        let replaced = c.with_or_replace(text);
        assert_eq!(
            replaced,
            "-- Owner: équipe données\r\n/* CREATE here is a comment */\r\n  create OR REPLACE\tmaterialized view v WITH (update_group = 1);\r\n"
        );
        let Statement::Create(again) = parse(&replaced).unwrap() else {
            panic!("a CREATE")
        };
        assert!(again.or_replace);
        assert_eq!(again.with_or_replace(&replaced), replaced);
    }
}
