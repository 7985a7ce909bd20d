//! The query deny list of seed 002: a rule is a Boolean SQL expression over
//! the match context (twelve nullable Utf8 columns), compiled with DataFusion
//! when it is written and evaluated against a query's context; and
//! `sql_hash`, the fingerprint micromegas writes to its query audit log.

use crate::error::{Error, ErrorKind, Result};
use crate::isolate;
use crate::planner;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::DFSchema;
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::{Expr, ExprSchemable};
use datafusion_optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion_physical_expr::{create_physical_expr, PhysicalExpr};
use sha2::{Digest, Sha256};
use sqlparser::dialect::GenericDialect;
use sqlparser::tokenizer::{Token, Tokenizer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The match context, in this order.
pub const MATCH_COLUMNS: [&str; 12] = [
    "user_id",
    "email",
    "service_account",
    "client",
    "agent",
    "entrypoint",
    "session",
    "notebook",
    "cell",
    "client_ip",
    "sql",
    "sql_hash",
];

/// Positions of `sql` and `sql_hash` in [`MATCH_COLUMNS`].
const SQL: usize = 10;
const SQL_HASH: usize = 11;

/// The longest match expression accepted.
pub const MAX_EXPR_BYTES: usize = 64 * 1024;
/// The most text a query's context (or a query to fingerprint) may carry:
/// tokenizing and matching have no checkpoint inside, so their input is bounded.
pub const MAX_CONTEXT_BYTES: usize = 16 * 1024 * 1024;

fn too_long(what: &str, len: usize) -> Error {
    Error::new(
        ErrorKind::ProgramLimit,
        format!("{what} is too long: {len} bytes, the limit is {MAX_CONTEXT_BYTES} bytes"),
    )
}

const OPTION: &str = "match_expr";

fn match_schema() -> &'static (SchemaRef, DFSchema) {
    static SCHEMA: OnceLock<(SchemaRef, DFSchema)> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let fields: Vec<Field> = MATCH_COLUMNS
            .iter()
            .map(|c| Field::new(*c, DataType::Utf8, true))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let df = DFSchema::try_from(schema.as_ref().clone()).expect("a plain schema");
        (schema, df)
    })
}

fn invalid(message: impl Into<String>) -> Error {
    Error::option(message)
}

/// Compiles a rule's expression, with every check of `deny_queries`.
pub fn compile(text: &str) -> Result<Arc<dyn PhysicalExpr>> {
    if text.len() > MAX_EXPR_BYTES {
        return Err(Error::new(
            ErrorKind::ProgramLimit,
            format!(
                "match_expr is too long: {} bytes, the limit is {MAX_EXPR_BYTES} bytes",
                text.len()
            ),
        ));
    }
    isolate::set_phase(OPTION);
    isolate::checkpoint()?;
    let ast = planner::parse_expression(OPTION, text)?;
    let (_, df_schema) = match_schema();
    let expr = planner::plan_expression(OPTION, ast, df_schema)?;
    isolate::checkpoint()?;
    if let Some(problem) = refused_part(&expr) {
        return Err(invalid(format!("match_expr may not use {problem}"))
            .with_detail("A rule is evaluated against one query's context: no subqueries, aggregates or window functions."));
    }
    let coerced = expr
        .clone()
        .rewrite(&mut TypeCoercionRewriter::new(df_schema))
        .map_err(|e| invalid("match_expr does not compile").with_detail(planner::df_message(&e)))?
        .data;
    if casts(&coerced) > casts(&expr) {
        return Err(invalid(
            "match_expr compares or combines values of different types",
        )
        .with_detail(format!("It would need an implicit conversion: {coerced}"))
        .with_hint("Every match-context column is text: compare it with string literals, e.g. client = '42'."));
    }
    let data_type = coerced
        .get_type(df_schema)
        .map_err(|e| invalid("match_expr does not compile").with_detail(planner::df_message(&e)))?;
    if data_type != DataType::Boolean {
        return Err(invalid(format!(
            "match_expr must be a Boolean expression, not {data_type}"
        )));
    }
    if expr.column_refs().is_empty() {
        return Err(invalid("match_expr references no column")
            .with_detail("Such a rule would deny every query in the deployment.")
            .with_hint(format!(
                "Match on the context: {}.",
                MATCH_COLUMNS.join(", ")
            )));
    }
    let physical = create_physical_expr(
        &coerced,
        df_schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )
    .map_err(|e| invalid("match_expr does not compile").with_detail(planner::df_message(&e)))?;
    // The canary: one evaluation over a probe row.
    let probe: [Option<String>; 12] =
        std::array::from_fn(|i| Some(format!("probe-{}", MATCH_COLUMNS[i])));
    evaluate(&physical, &probe).map_err(|e| {
        invalid("match_expr fails on a probe row").with_detail(e.detail.unwrap_or(e.message))
    })?;
    Ok(physical)
}

/// How many type conversions an expression holds.
fn casts(expr: &Expr) -> usize {
    let mut count = 0;
    let _ = expr.apply(|e| {
        if matches!(e, Expr::Cast(_) | Expr::TryCast(_)) {
            count += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    count
}

/// What a rule may not contain, described.
fn refused_part(expr: &Expr) -> Option<String> {
    let mut found = None;
    let _ = expr.apply(|e| {
        found = match e {
            Expr::AggregateFunction(f) => Some(format!("aggregate function {}()", f.func.name())),
            Expr::WindowFunction(f) => Some(format!("window function {}()", f.fun.name())),
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) => {
                Some("a subquery".to_string())
            }
            _ => None,
        };
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// Evaluates a compiled rule on one context: `Some(true)` is a match, NULL
/// is `None`.
fn evaluate(expr: &Arc<dyn PhysicalExpr>, context: &[Option<String>; 12]) -> Result<Option<bool>> {
    let (schema, _) = match_schema();
    let columns: Vec<ArrayRef> = context
        .iter()
        .map(|v| Arc::new(StringArray::from(vec![v.as_deref()])) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(Arc::clone(schema), columns)
        .map_err(|e| Error::internal("match context batch").with_detail(e.to_string()))?;
    let value = expr
        .evaluate(&batch)
        .and_then(|v| v.into_array(1))
        .map_err(|e| {
            invalid("match_expr does not evaluate").with_detail(planner::df_message(&e))
        })?;
    let array = value
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| Error::internal("a rule did not evaluate to Boolean"))?;
    Ok((!array.is_null(0)).then(|| array.value(0)))
}

/// Compiled rules, by expression text: evaluating a stored rule compiles it once per backend.
fn compiled(text: &str) -> Result<Arc<dyn PhysicalExpr>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<dyn PhysicalExpr>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().expect("cache").get(text) {
        return Ok(Arc::clone(hit));
    }
    let expr = compile(text)?;
    let mut cache = cache.lock().expect("cache");
    if cache.len() >= 1024 {
        cache.clear();
    }
    cache.insert(text.to_string(), Arc::clone(&expr));
    Ok(expr)
}

/// The index of the first rule (in the given order) whose expression is
/// TRUE for `context`. A stored rule that no longer compiles or evaluates
/// is an error naming it.
pub fn first_match(
    rules: &[(String, String)],
    context: &[Option<String>; 12],
) -> Result<Option<usize>> {
    let size: usize = context.iter().flatten().map(String::len).sum();
    if size > MAX_CONTEXT_BYTES {
        return Err(too_long("the match context", size));
    }
    // sql_hash, when not given, is the fingerprint of sql.
    let mut context = context.clone();
    if let (None, Some(sql)) = (&context[SQL_HASH], &context[SQL]) {
        context[SQL_HASH] = Some(sql_hash(sql)?);
    }
    for (i, (id, text)) in rules.iter().enumerate() {
        isolate::checkpoint()?;
        let outcome = compiled(text).and_then(|expr| evaluate(&expr, &context));
        match outcome {
            Ok(Some(true)) => return Ok(Some(i)),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::new(e.kind, format!("rule {id}: {}", e.message))
                    .with_detail(e.detail.unwrap_or_default()))
            }
        }
    }
    Ok(None)
}

/// The fingerprint of a query text, as micromegas' audit log writes it:
/// sqlparser's GenericDialect tokens without whitespace and comments,
/// numbers and quoted string literals (not dollar-quoted ones) as `?`,
/// unquoted words in lower case, joined by one space; the first 16 hex
/// digits of its SHA-256. Text that does not tokenize is hashed with its
/// whitespace runs collapsed.
pub fn sql_hash(sql: &str) -> Result<String> {
    if sql.len() > MAX_CONTEXT_BYTES {
        return Err(too_long("the query", sql.len()));
    }
    let normalized = match Tokenizer::new(&GenericDialect {}, sql).tokenize() {
        Ok(tokens) => tokens
            .iter()
            .filter_map(|t| match t {
                Token::Whitespace(_) | Token::EOF => None,
                Token::Number(_, _)
                | Token::SingleQuotedString(_)
                | Token::NationalStringLiteral(_)
                | Token::HexStringLiteral(_)
                | Token::EscapedStringLiteral(_)
                | Token::TripleSingleQuotedString(_)
                | Token::TripleDoubleQuotedString(_) => Some("?".to_string()),
                Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_lowercase()),
                other => Some(other.to_string()),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Err(_) => sql.split_whitespace().collect::<Vec<_>>().join(" "),
    };
    let digest = Sha256::digest(normalized.as_bytes());
    Ok(digest[..8].iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(pairs: &[(&str, &str)]) -> [Option<String>; 12] {
        std::array::from_fn(|i| {
            pairs
                .iter()
                .find(|(k, _)| *k == MATCH_COLUMNS[i])
                .map(|(_, v)| v.to_string())
        })
    }

    fn refused(text: &str) -> Error {
        isolate::run({
            let text = text.to_string();
            move || compile(&text).map(|_| ())
        })
        .unwrap_err()
    }

    #[test]
    fn the_seed_examples_compile() {
        for text in [
            "sql_hash = '9f2c41ab73de0155' AND entrypoint = 'grafana-alert'",
            "user_id = 'dashboards-svc' AND notebook = 'fleet-overview'",
            "sql LIKE '%thread_spans%' OR client_ip = '10.4.9.221'",
            "regexp_like(sql, 'thread_spans') AND client IN ('a', 'b') AND session IS NOT NULL",
            "NOT (email ILIKE '%@example.com')",
        ] {
            let text = text.to_string();
            isolate::run(move || compile(&text).map(|_| ())).unwrap();
        }
    }

    #[test]
    fn the_refused_shapes() {
        let e = refused("client");
        assert_eq!(
            e.message,
            "match_expr must be a Boolean expression, not Utf8"
        );
        let e = refused("true");
        assert_eq!(e.message, "match_expr references no column");
        let e = refused("1 = 1");
        assert_eq!(e.message, "match_expr references no column");
        let e = refused("client = 42");
        assert_eq!(
            e.message,
            "match_expr compares or combines values of different types"
        );
        assert!(
            e.detail.unwrap().contains("CAST"),
            "the coerced form is shown"
        );
        let e = refused("notebook = now()");
        assert_eq!(
            e.message,
            "match_expr compares or combines values of different types"
        );
        let e = refused("user = 'jean'");
        assert!(
            e.message.starts_with("match_expr does not compile"),
            "{}",
            e.message
        );
        let e = refused("nope = 'x'");
        assert!(
            e.message.starts_with("match_expr does not compile"),
            "{}",
            e.message
        );
        let e = refused("count(client) > 1");
        assert_eq!(
            e.message,
            "match_expr may not use aggregate function count()"
        );
        let e = refused("client IN (SELECT 1)");
        assert!(e.message.starts_with("match_expr"), "{}", e.message);
        let e = refused("client = 'a'; DROP TABLE x");
        assert_eq!(e.kind, ErrorKind::Syntax);
        let e = refused("client = 'a' FROM t");
        assert_eq!(e.kind, ErrorKind::Syntax);
        let e = refused(&format!(
            "{}client = 'a'{}",
            "(".repeat(600),
            ")".repeat(600)
        ));
        assert_eq!(e.kind, ErrorKind::TooComplex);
    }

    #[test]
    fn matching_follows_sql_null_rules() {
        let rules = vec![
            ("r1".to_string(), "notebook = 'x'".to_string()),
            (
                "r2".to_string(),
                "client = 'grafana' AND sql LIKE '%spans%'".to_string(),
            ),
            ("r3".to_string(), "user_id = 'u'".to_string()),
        ];
        let run = |ctx: [Option<String>; 12]| {
            let rules = rules.clone();
            isolate::run(move || first_match(&rules, &ctx)).unwrap()
        };
        // notebook is NULL: r1 is NULL, not true.
        assert_eq!(
            run(context(&[
                ("client", "grafana"),
                ("sql", "SELECT * FROM thread_spans")
            ])),
            Some(1)
        );
        assert_eq!(
            run(context(&[("notebook", "x"), ("user_id", "u")])),
            Some(0)
        );
        assert_eq!(run(context(&[("user_id", "u")])), Some(2));
        assert_eq!(run(context(&[("user_id", "v")])), None);
    }

    #[test]
    fn a_missing_sql_hash_is_the_fingerprint_of_sql() {
        assert_eq!(
            (MATCH_COLUMNS[SQL], MATCH_COLUMNS[SQL_HASH]),
            ("sql", "sql_hash")
        );
        let hash = sql_hash("SELECT 1").unwrap();
        let rules = vec![("r".to_string(), format!("sql_hash = '{hash}'"))];
        let run = |ctx: [Option<String>; 12]| {
            let rules = rules.clone();
            isolate::run(move || first_match(&rules, &ctx)).unwrap()
        };
        assert_eq!(run(context(&[("sql", "select 42")])), Some(0));
        // A given sql_hash is taken as it is.
        assert_eq!(
            run(context(&[("sql", "select 42"), ("sql_hash", "other")])),
            None
        );
        let huge = "x".repeat(MAX_CONTEXT_BYTES + 1);
        let e = isolate::run(move || first_match(&[], &context(&[("sql", huge.as_str())])))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProgramLimit);
    }

    #[test]
    fn sql_hash_vectors() {
        for (sql, hash) in [
            ("SELECT 1", "e1c71d1661ae46e0"),
            ("SELECT a FROM t WHERE b = 1", "4b124bda1d9aec6c"),
            ("select  A\n from T -- comment\n where /* x */ B = 42", "4b124bda1d9aec6c"),
            (
                "SELECT time, msg FROM log_entries WHERE time >= '2024-01-01T00:00:00Z' AND level <= 3",
                "1095f2233ecf2b16",
            ),
            ("SELECT b.\"processes.exe\" FROM blocks b", "626d4684b8d81372"),
            ("SELECT $$x$$, E'a', X'0F', N'n', 1.5e3", "2c3f002f90fca2cb"),
            ("SELECT 'unterminated", "9308fcc523b1e6d1"),
        ] {
            assert_eq!(sql_hash(sql).unwrap(), hash, "{sql}");
        }
    }

    #[test]
    fn sql_hash_ignores_literals_layout_and_keyword_case() {
        let base = sql_hash("SELECT name FROM processes WHERE pid = 7 AND exe = 'a'").unwrap();
        for other in [
            "select name from processes where pid = 12345 and exe = 'something else'",
            "SELECT name\n\tFROM processes -- who\nWHERE pid = 0.5 /* any */ AND exe = ''",
        ] {
            assert_eq!(sql_hash(other).unwrap(), base, "{other}");
        }
        assert_ne!(
            sql_hash("SELECT name FROM \"Processes\""),
            sql_hash("SELECT name FROM processes")
        );
        assert_ne!(sql_hash("SELECT $$a$$"), sql_hash("SELECT $$b$$"));
    }
}
