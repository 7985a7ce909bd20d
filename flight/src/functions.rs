//! What a statement runs in Postgres rather than over the lake: the DDL
//! (`CREATE [OR REPLACE] MATERIALIZED VIEW`, `DROP MATERIALIZED VIEW`) and
//! the admin table functions micromegas registers, each the extension's SQL
//! function run under the caller's role. Their rows become Arrow tables a
//! query can select from, join or filter like any other.

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder, TimestampNanosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::Expr;
use datafusion::sql::sqlparser::ast::{
    self, FunctionArg, FunctionArgExpr, ObjectName, TableFactor, Value, Visit, Visitor,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use tokio_postgres::types::Type;

/// Table functions every caller has.
pub const READER_FUNCTIONS: [&str; 3] = ["list_view_sets", "list_view_set_definitions", "list_partitions"];
/// Table functions only an admin has (for anyone else they do not exist).
pub const ADMIN_FUNCTIONS: [&str; 6] = [
    "retire_partitions",
    "materialize_partitions",
    "regenerate_partitions",
    "deny_queries",
    "list_query_denials",
    "remove_query_denial",
];

/// A DDL statement, recognised by its first words.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ddl {
    Create,
    Drop,
}

/// `CREATE [OR REPLACE] MATERIALIZED VIEW …` or `DROP MATERIALIZED VIEW …`
/// (comments and case aside); anything else is a query.
pub fn ddl_kind(sql: &str) -> Option<Ddl> {
    let mut words = Vec::new();
    let mut tokenizer = Tokenizer::new(&GenericDialect {}, sql);
    let tokens = tokenizer.tokenize().ok()?;
    for t in tokens {
        match t {
            Token::Whitespace(_) => continue,
            Token::Word(w) if w.quote_style.is_none() => words.push(w.value.to_ascii_uppercase()),
            _ => break,
        }
        if words.len() == 5 {
            break;
        }
    }
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["CREATE", "MATERIALIZED", "VIEW", ..] | ["CREATE", "OR", "REPLACE", "MATERIALIZED", "VIEW"] => {
            Some(Ddl::Create)
        }
        ["DROP", "MATERIALIZED", "VIEW", ..] => Some(Ddl::Drop),
        _ => None,
    }
}

/// What a DDL statement answers: one row, as micromegas does.
pub fn ddl_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("view_set_name", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, true),
    ]))
}

/// A call of one of our table functions in a statement: its name and its
/// arguments as Postgres literals, and the key DataFusion's call is
/// matched on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Call {
    pub name: String,
    pub args: Vec<Option<String>>,
}

impl Call {
    /// `SELECT * FROM micromegas.<name>(<literals>)`.
    pub fn postgres_sql(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| match a {
                None => "NULL".to_string(),
                Some(v) => format!("'{}'", v.replace('\'', "''")),
            })
            .collect();
        format!("SELECT * FROM micromegas.{}({})", self.name, args.join(", "))
    }
}

/// The calls of `functions` in `sql`'s FROM clauses (anywhere: CTEs,
/// subqueries, joins). An argument must be a literal: a string, a number,
/// a boolean or NULL.
pub fn calls(sql: &str, functions: &[&str]) -> Result<Vec<Call>, String> {
    let statements = match Parser::parse_sql(&GenericDialect {}, sql) {
        Ok(s) => s,
        // DataFusion reports the syntax error when it plans the statement.
        Err(_) => return Ok(Vec::new()),
    };
    struct Finder<'a> {
        functions: &'a [&'a str],
        found: Vec<Call>,
        error: Option<String>,
    }
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(args),
                ..
            } = factor
            {
                let Some(fname) = function_name(name) else {
                    return ControlFlow::Continue(());
                };
                if !self.functions.contains(&fname.as_str()) {
                    return ControlFlow::Continue(());
                }
                let mut values = Vec::new();
                for a in &args.args {
                    match literal_arg(a) {
                        Ok(v) => values.push(v),
                        Err(()) => {
                            self.error = Some(format!(
                                "the arguments of {fname}() must be literals (strings, numbers, booleans or NULL), not {a}"
                            ));
                            return ControlFlow::Break(());
                        }
                    }
                }
                let call = Call { name: fname, args: values };
                if !self.found.contains(&call) {
                    self.found.push(call);
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut finder = Finder {
        functions,
        found: Vec::new(),
        error: None,
    };
    let _ = statements.visit(&mut finder);
    match finder.error {
        Some(e) => Err(e),
        None => Ok(finder.found),
    }
}

fn function_name(name: &ObjectName) -> Option<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
        .collect::<Option<Vec<_>>>()?;
    match parts.as_slice() {
        [f] => Some(f.clone()),
        _ => None,
    }
}

/// A number as DataFusion parses it (Int64 or Float64), so that both sides
/// of a call render it alike.
fn canonical_number(n: &str) -> Option<String> {
    if let Ok(i) = n.parse::<i64>() {
        return Some(i.to_string());
    }
    n.parse::<f64>().ok().filter(|f| f.is_finite()).map(|f| f.to_string())
}

fn literal_arg(arg: &FunctionArg) -> Result<Option<String>, ()> {
    let FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) = arg else {
        return Err(());
    };
    literal_expr(expr)
}

fn literal_expr(expr: &ast::Expr) -> Result<Option<String>, ()> {
    match expr {
        ast::Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Ok(Some(s.clone())),
            Value::DollarQuotedString(d) => Ok(Some(d.value.clone())),
            Value::Number(n, _) => canonical_number(n).map(Some).ok_or(()),
            Value::Boolean(b) => Ok(Some(b.to_string())),
            Value::Null => Ok(None),
            _ => Err(()),
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match literal_expr(expr)? {
            Some(n) if canonical_number(&n).is_some() => canonical_number(&format!("-{n}")).map(Some).ok_or(()),
            _ => Err(()),
        },
        ast::Expr::Nested(e) => literal_expr(e),
        _ => Err(()),
    }
}

/// An argument as DataFusion hands it to a table function, rendered as
/// [`literal_expr`] renders the same SQL.
fn df_literal(expr: &Expr) -> Option<Option<String>> {
    match expr {
        Expr::Literal(v, _) => match v {
            ScalarValue::Null => Some(None),
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => Some(s.clone()),
            ScalarValue::Int64(i) => Some(i.map(|i| i.to_string())),
            ScalarValue::Float64(f) => Some(f.map(|f| f.to_string())),
            ScalarValue::Boolean(b) => Some(b.map(|b| b.to_string())),
            _ => None,
        },
        Expr::Negative(inner) => match df_literal(inner)? {
            Some(n) => Some(canonical_number(&format!("-{n}"))),
            None => Some(None),
        },
        _ => None,
    }
}

/// A table function whose calls in this statement were run (or, before
/// execution, described) ahead of planning.
#[derive(Debug)]
pub struct Prefetched {
    pub name: String,
    pub tables: HashMap<Vec<Option<String>>, Arc<MemTable>>,
}

impl TableFunctionImpl for Prefetched {
    fn call_with_args(&self, args: TableFunctionArgs) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let key: Option<Vec<Option<String>>> = args.exprs().iter().map(df_literal).collect();
        key.and_then(|k| self.tables.get(&k).cloned())
            .map(|t| t as Arc<dyn TableProvider>)
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Plan(format!(
                    "the arguments of {}() must be literals (strings, numbers, booleans or NULL)",
                    self.name
                ))
            })
    }
}

/// The Arrow type a Postgres column is read as (anything else is read as
/// its text).
fn arrow_type(t: &Type) -> Option<DataType> {
    Some(match *t {
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => DataType::Utf8,
        Type::INT2 | Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 | Type::FLOAT8 => DataType::Float64,
        Type::BOOL => DataType::Boolean,
        Type::BYTEA => DataType::Binary,
        Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into())),
        _ => return None,
    })
}

/// `sql` with every column Arrow has no reader for cast to text, and the
/// Arrow schema it is read as.
pub async fn describe(
    client: &tokio_postgres::Transaction<'_>,
    sql: &str,
) -> Result<(String, SchemaRef), tokio_postgres::Error> {
    let statement = client.prepare(sql).await?;
    let mut select = Vec::new();
    let mut fields = Vec::new();
    for c in statement.columns() {
        let quoted = format!("\"{}\"", c.name().replace('"', "\"\""));
        match arrow_type(c.type_()) {
            Some(t) => {
                select.push(quoted);
                fields.push(Field::new(c.name(), t, true));
            }
            None => {
                select.push(format!("{quoted}::text AS {quoted}"));
                fields.push(Field::new(c.name(), DataType::Utf8, true));
            }
        }
    }
    Ok((
        format!("SELECT {} FROM ({sql}) AS f", select.join(", ")),
        Arc::new(Schema::new(fields)),
    ))
}

/// Rows read with the SQL and schema [`describe`] gave, as one batch.
pub fn to_batch(schema: &SchemaRef, rows: &[tokio_postgres::Row]) -> datafusion::arrow::error::Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let array: ArrayRef = match field.data_type() {
            DataType::Int32 => {
                let mut b = Int32Builder::new();
                for r in rows {
                    let v: Option<i32> = match *r.columns()[i].type_() {
                        Type::INT2 => r.get::<_, Option<i16>>(i).map(i32::from),
                        _ => r.get(i),
                    };
                    b.append_option(v);
                }
                Arc::new(b.finish())
            }
            DataType::Int64 => {
                let mut b = Int64Builder::new();
                rows.iter().for_each(|r| b.append_option(r.get::<_, Option<i64>>(i)));
                Arc::new(b.finish())
            }
            DataType::Float64 => {
                let mut b = Float64Builder::new();
                for r in rows {
                    let v: Option<f64> = match *r.columns()[i].type_() {
                        Type::FLOAT4 => r.get::<_, Option<f32>>(i).map(f64::from),
                        _ => r.get(i),
                    };
                    b.append_option(v);
                }
                Arc::new(b.finish())
            }
            DataType::Boolean => {
                let mut b = BooleanBuilder::new();
                rows.iter().for_each(|r| b.append_option(r.get::<_, Option<bool>>(i)));
                Arc::new(b.finish())
            }
            DataType::Binary => {
                let mut b = BinaryBuilder::new();
                rows.iter().for_each(|r| b.append_option(r.get::<_, Option<Vec<u8>>>(i)));
                Arc::new(b.finish())
            }
            DataType::Timestamp(_, _) => {
                let mut b = TimestampNanosecondBuilder::new().with_timezone("+00:00");
                for r in rows {
                    let v: Option<chrono::DateTime<chrono::Utc>> = r.get(i);
                    b.append_option(v.and_then(|t| t.timestamp_nanos_opt()));
                }
                Arc::new(b.finish())
            }
            _ => {
                let mut b = StringBuilder::new();
                rows.iter().for_each(|r| b.append_option(r.get::<_, Option<String>>(i)));
                Arc::new(b.finish())
            }
        };
        columns.push(array);
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_is_recognised_by_its_first_words_only() {
        assert_eq!(ddl_kind("CREATE MATERIALIZED VIEW v WITH (x=1) AS $$ $$"), Some(Ddl::Create));
        assert_eq!(ddl_kind("  -- c\n create or replace materialized view v"), Some(Ddl::Create));
        assert_eq!(ddl_kind("/* x */ DROP MATERIALIZED VIEW IF EXISTS v"), Some(Ddl::Drop));
        assert_eq!(ddl_kind("SELECT 'CREATE MATERIALIZED VIEW'"), None);
        assert_eq!(ddl_kind("CREATE VIEW v AS SELECT 1"), None);
        assert_eq!(ddl_kind("\"CREATE\" MATERIALIZED VIEW v"), None);
    }

    #[test]
    fn calls_are_found_anywhere_and_their_literals_rendered_as_datafusion_renders_them() {
        let sql = "WITH x AS (SELECT * FROM list_partitions('log_stats', NULL)) \
                   SELECT * FROM x JOIN (SELECT * FROM retire_partitions('v', 'global', '2024-01-01', '2024-01-02')) r ON true \
                   UNION ALL SELECT * FROM list_partitions('log_stats', NULL)";
        let found = calls(sql, &["list_partitions", "retire_partitions"]).unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].args, vec![Some("log_stats".to_string()), None]);
        assert_eq!(
            found[1].postgres_sql(),
            "SELECT * FROM micromegas.retire_partitions('v', 'global', '2024-01-01', '2024-01-02')"
        );
        let n = calls("SELECT * FROM materialize_partitions('v', '2024-01-01', '2024-01-02', 3600.0)", &["materialize_partitions"]).unwrap();
        assert_eq!(n[0].args[3].as_deref(), Some("3600"));
        let quote = calls("SELECT * FROM deny_queries('sql_hash = ''ab''', 'it''s slow')", &["deny_queries"]).unwrap();
        assert_eq!(
            quote[0].postgres_sql(),
            "SELECT * FROM micromegas.deny_queries('sql_hash = ''ab''', 'it''s slow')"
        );
    }

    #[test]
    fn a_non_literal_argument_is_refused_by_name() {
        let e = calls("SELECT * FROM list_partitions(lower('X'))", &["list_partitions"]).unwrap_err();
        assert!(e.contains("list_partitions()") && e.contains("literals"), "{e}");
    }
}
