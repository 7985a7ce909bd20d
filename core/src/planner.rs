//! DataFusion planning of one query against a [`Catalog`], behind the
//! `ContextProvider` seam of `datafusion-sql`. Planning is synchronous and
//! never executes anything.

use crate::catalog::{cte_bodies, normalized_name, Catalog, CatalogEntry, SourceKind};
use crate::error::{Error, Result};
use crate::functions::{registry, FunctionRegistry};
use crate::isolate;
use crate::width;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{plan_err, DataFusionError, Result as DfResult, TableReference};
use datafusion_expr::logical_plan::builder::LogicalTableSource;
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{
    AggregateUDF, Expr, HigherOrderUDF, LogicalPlan, ScalarUDF, TableSource, Volatility,
    WindowFunctionDefinition, WindowUDF,
};
use datafusion_optimizer::{Analyzer, AnalyzerRule};
use datafusion_sql::parser::{DFParserBuilder, Statement as DfStatement};
use datafusion_sql::planner::SqlToRel;
use sqlparser::ast::{Statement as SqlStatement, Visit, Visitor};
use std::cell::RefCell;
use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};

/// The table `{source}` stands for while the merge query is planned.
pub const SOURCE_TABLE: &str = "__mm_source";
/// What `{begin}` and `{end}` stand for while planning.
pub const BEGIN_VALUE: &str = "2024-01-01T00:00:00+00:00";
pub const END_VALUE: &str = "2024-01-02T00:00:00+00:00";
/// Parser nesting limit: deeper input is an error, never a deep recursion.
pub const PARSER_RECURSION_LIMIT: usize = 256;
/// Expression and subquery nesting limit, checked right after parsing. A
/// long operator chain (`1 + 1 + …`) parses without recursion into a deep
/// tree; everything downstream walks it recursively, so depth is capped here.
pub const MAX_NESTING: usize = 500;
pub use crate::isolate::{DEFAULT_MAX_PLAN_NODES, MAX_MAX_PLAN_NODES};

/// `{begin}` or `{end}` written outside a string: the services substitute a
/// timestamp's text, which SQL reads only as a string constant. Asked when a
/// query does not parse, to say so instead of pointing at the substituted
/// text.
fn unquoted_placeholder(option: &str, text: &str) -> Option<Error> {
    let tokens = sqlparser::tokenizer::Tokenizer::new(&sqlparser::dialect::GenericDialect {}, text)
        .tokenize()
        .ok()?;
    let tokens: Vec<_> = tokens
        .into_iter()
        .filter(|t| !matches!(t, sqlparser::tokenizer::Token::Whitespace(_)))
        .collect();
    tokens.windows(3).find_map(|w| match w {
        [sqlparser::tokenizer::Token::LBrace, sqlparser::tokenizer::Token::Word(word), sqlparser::tokenizer::Token::RBrace]
            if word.quote_style.is_none() && matches!(word.value.as_str(), "begin" | "end") =>
        {
            let placeholder = format!("{{{}}}", word.value);
            Some(
                Error::definition(format!("{option} uses {placeholder} outside quotes"))
                    .with_detail(format!(
                        "{placeholder} is replaced by a timestamp's text, which a query reads as a string constant."
                    ))
                    .with_hint(format!("Write '{placeholder}', e.g. insert_time >= '{{begin}}'.")),
            )
        }
        _ => None,
    })
}

/// Substitutes the placeholders the services substitute at run time.
pub fn substitute(query: &str) -> String {
    query
        .replace("{begin}", BEGIN_VALUE)
        .replace("{end}", END_VALUE)
        .replace("{source}", SOURCE_TABLE)
}

/// Parses one option's text: exactly one statement, and a read-only query.
pub fn parse_query(option: &str, text: &str) -> Result<Box<sqlparser::ast::Query>> {
    let given = text;
    let text = substitute(text);
    check_text_nesting(option, &text)?;
    let refused = |e: &DataFusionError| {
        unquoted_placeholder(option, given).unwrap_or_else(|| does_not_parse(option, e))
    };
    let mut parser = DFParserBuilder::new(text.as_str())
        .with_recursion_limit(PARSER_RECURSION_LIMIT)
        .build()
        .map_err(|e| refused(&e))?;
    let mut statements = parser.parse_statements().map_err(|e| refused(&e))?;
    if statements.len() != 1 {
        return Err(Error::definition(format!(
            "{option} must hold exactly one query, found {} statements",
            statements.len()
        )));
    }
    let kind = match statements.pop_front().expect("one statement") {
        DfStatement::Statement(statement) => match *statement {
            SqlStatement::Query(query) => {
                check_nesting(option, &query)?;
                return Ok(query);
            }
            other => statement_kind(&other),
        },
        DfStatement::CreateExternalTable(_) => "CREATE EXTERNAL TABLE".to_string(),
        DfStatement::CopyTo(_) => "COPY … TO".to_string(),
        DfStatement::Explain(_) => "EXPLAIN".to_string(),
        DfStatement::Reset(_) => "RESET".to_string(),
    };
    Err(
        Error::definition(format!("{option} must be a read-only query, not {kind}"))
            .with_detail("A definition's queries may not embed DDL, DML or session statements."),
    )
}

/// How much a query asks planning to do, beyond its nesting: the tables
/// it reads (every FROM and JOIN item, in every CTE, subquery and set
/// operation member), its SELECT and VALUES blocks, and its expressions —
/// each reference to a CTE counted as the CTE's own shape, since planning
/// expands it there (a CTE over itself twice, sixteen deep, is 65,536
/// scans). Planning grows faster than linearly with them, and it cannot be
/// stopped part way, so a service caps them before planning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryShape {
    pub tables: usize,
    pub selects: usize,
    pub expressions: usize,
}

impl QueryShape {
    fn add(&mut self, other: QueryShape) {
        self.tables = self.tables.saturating_add(other.tables);
        self.selects = self.selects.saturating_add(other.selects);
        self.expressions = self.expressions.saturating_add(other.expressions);
    }
}

/// The [`QueryShape`] of a parsed query.
pub fn query_shape(query: &sqlparser::ast::Query) -> QueryShape {
    use std::collections::HashMap;
    struct Count<'a> {
        shape: QueryShape,
        ctes: &'a HashMap<String, QueryShape>,
    }
    impl Visitor for Count<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &sqlparser::ast::TableFactor) -> ControlFlow<()> {
            let cte = match factor {
                sqlparser::ast::TableFactor::Table { name, .. } if name.0.len() == 1 => name.0[0]
                    .as_ident()
                    .and_then(|i| self.ctes.get(&i.value.to_lowercase())),
                _ => None,
            };
            match cte {
                Some(shape) => self.shape.add(*shape),
                None => self.shape.tables = self.shape.tables.saturating_add(1),
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_query(&mut self, query: &sqlparser::ast::Query) -> ControlFlow<()> {
            // The SELECT and VALUES blocks of this query's own body (a
            // nested query is visited on its own).
            let mut pending = vec![query.body.as_ref()];
            while let Some(body) = pending.pop() {
                match body {
                    sqlparser::ast::SetExpr::Select(_) | sqlparser::ast::SetExpr::Values(_) => {
                        self.shape.selects = self.shape.selects.saturating_add(1)
                    }
                    sqlparser::ast::SetExpr::SetOperation { left, right, .. } => {
                        pending.push(left.as_ref());
                        pending.push(right.as_ref());
                    }
                    _ => {}
                }
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, _: &sqlparser::ast::Expr) -> ControlFlow<()> {
            self.shape.expressions = self.shape.expressions.saturating_add(1);
            ControlFlow::Continue(())
        }
    }
    let mut ctes = HashMap::new();
    let mut total = QueryShape::default();
    let mut main = query.clone();
    if let Some(with) = main.with.take() {
        for cte in &with.cte_tables {
            let mut count = Count { shape: QueryShape::default(), ctes: &ctes };
            let _ = cte.query.visit(&mut count);
            // Planned once where it is defined, and again where used.
            total.add(count.shape);
            ctes.insert(cte.alias.name.value.to_lowercase(), count.shape);
        }
    }
    let mut count = Count { shape: QueryShape::default(), ctes: &ctes };
    let _ = main.visit(&mut count);
    total.add(count.shape);
    total
}

struct NestingGuard {
    depth: usize,
}

impl Visitor for NestingGuard {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &sqlparser::ast::Expr) -> ControlFlow<()> {
        // A type nests too, and Arrow recurses once per level of it when it
        // casts (a CAST to INT followed by 20,000 `[]` overflowed even the
        // planning thread's stack): a cast's type, or the type string of
        // arrow_cast, counts its depth at the expression that names it.
        if self.depth + 1 + named_type_depth(expr) > MAX_NESTING {
            return ControlFlow::Break(());
        }
        self.enter()
    }

    fn post_visit_expr(&mut self, _expr: &sqlparser::ast::Expr) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, _query: &sqlparser::ast::Query) -> ControlFlow<()> {
        self.enter()
    }

    fn post_visit_query(&mut self, _query: &sqlparser::ast::Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}

impl NestingGuard {
    fn enter(&mut self) -> ControlFlow<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// How deep the type an expression names nests: a CAST's type, or the
/// Arrow type string given to `arrow_cast`/`arrow_try_cast`; 0 for any other
/// expression. (Recursive over the parsed type, which the parser built by
/// recursing as deep: this runs on the planning thread, like the parse.)
fn named_type_depth(expr: &sqlparser::ast::Expr) -> usize {
    use sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, FunctionArguments};
    match expr {
        Expr::Cast { data_type, .. } => type_depth(data_type),
        // `INT[] '{}'`: DataFusion plans it as a cast.
        Expr::TypedString(typed) => type_depth(&typed.data_type),
        Expr::Function(f)
            if f.name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| {
                i.value.eq_ignore_ascii_case("arrow_cast")
                    || i.value.eq_ignore_ascii_case("arrow_try_cast")
            }) =>
        {
            let FunctionArguments::List(list) = &f.args else {
                return 0;
            };
            list.args
                .iter()
                .filter_map(|a| match a {
                    // Any quoting: '…', E'…', $$…$$.
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v))) => v
                        .value
                        .clone()
                        .into_string()
                        .map(|text| bracket_depth(&text)),
                    _ => None,
                })
                .max()
                .unwrap_or(0)
        }
        _ => 0,
    }
}

fn type_depth(t: &sqlparser::ast::DataType) -> usize {
    use sqlparser::ast::{ArrayElemTypeDef, DataType as T};
    let deepest = |types: &mut dyn Iterator<Item = &T>| types.map(type_depth).max().unwrap_or(0);
    1 + match t {
        T::Array(ArrayElemTypeDef::AngleBracket(e))
        | T::Array(ArrayElemTypeDef::SquareBracket(e, _))
        | T::Array(ArrayElemTypeDef::Parenthesis(e))
        | T::Nullable(e)
        | T::LowCardinality(e) => type_depth(e),
        T::Map(k, v) => type_depth(k).max(type_depth(v)),
        T::Tuple(fields) | T::Struct(fields, _) => {
            deepest(&mut fields.iter().map(|f| &f.field_type))
        }
        T::Union(fields) => deepest(&mut fields.iter().map(|f| &f.field_type)),
        T::Nested(columns) | T::Table(Some(columns)) | T::NamedTable { columns, .. } => {
            deepest(&mut columns.iter().map(|c| &c.data_type))
        }
        _ => 0,
    }
}

/// The deepest nesting of brackets in an Arrow type string
/// (`List(List(Int32))` is 2).
fn bracket_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '<' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | '>' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Words after which `<` opens a type's arguments (`ARRAY<INT>`).
const ANGLE_TYPES: [&str; 8] = [
    "ARRAY",
    "STRUCT",
    "MAP",
    "UNION",
    "TUPLE",
    "NULLABLE",
    "LOWCARDINALITY",
    "NESTED",
];

/// Bounds, before anything parses it, the nesting that the parser's own
/// recursion limit does not count: a data type recurses in sqlparser once
/// per `ARRAY<`/`STRUCT<`/`(` level (about 24 KB of stack each in a debug
/// build: 15,000 levels overflowed the planning thread) and in DataFusion
/// once per `[]` suffix. Tokenizing is a loop; the depth counted is that of
/// parentheses, type angle brackets, square brackets, and runs of
/// consecutive `[…]` groups.
fn check_text_nesting(option: &str, text: &str) -> Result<()> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let dialect = sqlparser::dialect::GenericDialect {};
    // A text that does not tokenize is the parser's to report.
    let Ok(tokens) = Tokenizer::new(&dialect, text).tokenize() else {
        return Ok(());
    };
    let (mut parens, mut angles, mut brackets, mut run) = (0usize, 0usize, 0usize, 0usize);
    let mut previous: Option<&Token> = None;
    for token in tokens.iter().filter(|t| !matches!(t, Token::Whitespace(_))) {
        let after_group = matches!(previous, Some(Token::RBracket));
        match token {
            Token::LParen => parens += 1,
            Token::RParen => parens = parens.saturating_sub(1),
            Token::Lt
                if matches!(previous, Some(Token::Word(w))
                    if ANGLE_TYPES.iter().any(|k| w.value.eq_ignore_ascii_case(k))) =>
            {
                angles += 1
            }
            Token::Gt => angles = angles.saturating_sub(1),
            Token::ShiftRight => angles = angles.saturating_sub(2),
            // `[…][…]…`: each group right after the previous one is a level.
            Token::LBracket => {
                run = if after_group { run + 1 } else { 1 };
                brackets += 1;
            }
            Token::RBracket => brackets = brackets.saturating_sub(1),
            _ if after_group => run = 0,
            _ => {}
        }
        if parens + angles + brackets.max(run) > MAX_NESTING {
            return Err(Error::too_complex(format!("{option} is nested too deeply"))
                .with_detail(format!(
                    "Parentheses, brackets and type arguments nest more than {MAX_NESTING} levels; the limit is {MAX_NESTING}."
                )));
        }
        previous = Some(token);
    }
    Ok(())
}

fn check_nesting<V: Visit>(option: &str, node: &V) -> Result<()> {
    let mut guard = NestingGuard { depth: 0 };
    if node.visit(&mut guard).is_break() {
        return Err(Error::too_complex(format!("{option} is nested too deeply"))
            .with_detail(format!(
                "Expressions, subqueries and the types they cast to nest more than {MAX_NESTING} levels; the limit is {MAX_NESTING}."
            )));
    }
    Ok(())
}

/// A lower estimate of the plan nodes a query expands to, computed on the
/// parsed text in one pass: every query, SELECT, set operation and table
/// reference counts one, and a reference to a common table expression
/// counts the whole weight of its body — as the planner copies it. Linear in
/// the text, it finds an exponential CTE chain before planning (DataFusion's
/// planner itself walks shared CTE plans as trees, with no callback to stop
/// it). Saturates instead of overflowing.
pub fn estimate_plan_nodes(query: &sqlparser::ast::Query) -> u64 {
    let mut estimate = Estimate {
        frames: Vec::new(),
        total: 0,
    };
    let _ = query.visit(&mut estimate);
    estimate.total
}

struct Frame {
    weight: u64,
    /// Common table expressions this query defines: body identity → name.
    bodies: std::collections::HashMap<*const sqlparser::ast::Query, String>,
    /// Their weights, once visited.
    ctes: std::collections::HashMap<String, u64>,
}

struct Estimate {
    frames: Vec<Frame>,
    total: u64,
}

fn relation_key(name: &sqlparser::ast::ObjectName) -> Option<String> {
    Some(normalized_name(name.0.last()?.as_ident()?))
}

impl Visitor for Estimate {
    type Break = ();

    fn pre_visit_query(&mut self, query: &sqlparser::ast::Query) -> ControlFlow<()> {
        use sqlparser::ast::SetExpr;
        let mut weight = 1u64;
        let mut pending = vec![query.body.as_ref()];
        while let Some(body) = pending.pop() {
            match body {
                SetExpr::SetOperation { left, right, .. } => {
                    weight = weight.saturating_add(1);
                    pending.push(left);
                    pending.push(right);
                }
                SetExpr::Query(_) => {}
                _ => weight = weight.saturating_add(1),
            }
        }
        self.frames.push(Frame {
            weight,
            bodies: cte_bodies(query),
            ctes: Default::default(),
        });
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &sqlparser::ast::Query) -> ControlFlow<()> {
        let frame = self.frames.pop().expect("a frame per query");
        match self.frames.last_mut() {
            Some(parent) => {
                let me = query as *const _;
                match parent.bodies.get(&me) {
                    // A CTE body weighs nothing until it is referenced.
                    Some(name) => {
                        parent.ctes.insert(name.clone(), frame.weight);
                    }
                    None => parent.weight = parent.weight.saturating_add(frame.weight),
                }
            }
            None => self.total = frame.weight,
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, relation: &sqlparser::ast::ObjectName) -> ControlFlow<()> {
        let key = relation_key(relation);
        let weight = key
            .and_then(|key| {
                self.frames
                    .iter()
                    .rev()
                    .find_map(|frame| frame.ctes.get(&key).copied())
            })
            .unwrap_or(1);
        if let Some(top) = self.frames.last_mut() {
            top.weight = top.weight.saturating_add(weight);
        }
        ControlFlow::Continue(())
    }
}

fn statement_kind(statement: &SqlStatement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    match words.as_slice() {
        [first, second]
            if first.eq_ignore_ascii_case("create")
                || first.eq_ignore_ascii_case("drop")
                || first.eq_ignore_ascii_case("alter") =>
        {
            format!("{} {}", first.to_uppercase(), second.to_uppercase())
        }
        [first, ..] => first.to_uppercase(),
        [] => "an empty statement".to_string(),
    }
}

fn does_not_parse(option: &str, e: &DataFusionError) -> Error {
    if df_message(e).contains("recursion limit exceeded") {
        return Error::too_complex(format!("{option} is nested too deeply")).with_detail(format!(
            "The parser reached its nesting limit of {PARSER_RECURSION_LIMIT} levels."
        ));
    }
    Error::definition(format!(
        "{option} does not parse: {}",
        first_line(&df_message(e))
    ))
    .with_detail(df_message(e))
}

/// DataFusion's own message, without its "Error during planning:"-style prefixes.
pub fn df_message(e: &DataFusionError) -> String {
    match e.find_root() {
        DataFusionError::Plan(s)
        | DataFusionError::NotImplemented(s)
        | DataFusionError::Execution(s)
        | DataFusionError::Configuration(s) => s.clone(),
        DataFusionError::SchemaError(s, _) => s.to_string(),
        DataFusionError::SQL(s, _) => s.to_string(),
        DataFusionError::ArrowError(s, _) => s.to_string(),
        other => other.strip_backtrace(),
    }
}

pub fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

struct Provider<'a> {
    option: &'a str,
    catalog: &'a Catalog,
    source: Option<SchemaRef>,
    registry: &'static FunctionRegistry,
    options: &'static ConfigOptions,
    /// Tables asked for and not known, for a message that names them.
    missing: RefCell<Vec<String>>,
    /// Instance-only view sets asked for.
    instance_only: RefCell<Vec<String>>,
    /// The budget error that stopped planning, if any.
    interrupted: RefCell<Option<Error>>,
    /// Every view set planning resolved, whether or not the final plan
    /// scans it: DataFusion plans every CTE, used or not, so each of these
    /// must exist and come earlier in the materialization order.
    resolved: RefCell<std::collections::BTreeSet<String>>,
    /// The names of the query's common table expressions: DataFusion asks
    /// for every relation it reads, a CTE too (and uses the CTE when it
    /// has one), so a CTE name is no missing view set.
    ctes: std::collections::HashSet<String>,
}

/// The names of every common table expression in `query`, at any depth.
fn cte_names(query: &sqlparser::ast::Query) -> std::collections::HashSet<String> {
    struct Names(std::collections::HashSet<String>);
    impl Visitor for Names {
        type Break = ();
        fn pre_visit_query(&mut self, query: &sqlparser::ast::Query) -> ControlFlow<()> {
            self.0.extend(cte_bodies(query).into_values());
            ControlFlow::Continue(())
        }
    }
    let mut names = Names(Default::default());
    let _ = query.visit(&mut names);
    names.0
}

fn config() -> &'static ConfigOptions {
    static OPTIONS: OnceLock<ConfigOptions> = OnceLock::new();
    OPTIONS.get_or_init(ConfigOptions::default)
}

impl ContextProvider for Provider<'_> {
    fn get_table_source(&self, name: TableReference) -> DfResult<Arc<dyn TableSource>> {
        self.checkpoint()?;
        let TableReference::Bare { table } = &name else {
            self.missing.borrow_mut().push(name.to_string());
            return plan_err!(
                "table \"{name}\" not found: view sets are named without a schema or catalog"
            );
        };
        if table.as_ref() == SOURCE_TABLE {
            if let Some(schema) = &self.source {
                return Ok(Arc::new(LogicalTableSource::new(Arc::clone(schema))));
            }
        }
        match self.catalog.get(table) {
            Some(entry) if entry.kind == SourceKind::InstanceOnly => {
                self.instance_only.borrow_mut().push(table.to_string());
                plan_err!("view set \"{table}\" has no global instance")
            }
            Some(CatalogEntry {
                load_error: Some(error),
                ..
            }) => {
                *self.interrupted.borrow_mut() = Some(failed_source(self.option, table, error));
                plan_err!("view set \"{table}\" failed to load")
            }
            Some(entry) => {
                self.resolved.borrow_mut().insert(table.to_string());
                Ok(Arc::new(LogicalTableSource::new(Arc::clone(&entry.schema))))
            }
            None => {
                if !self.ctes.contains(table.as_ref()) {
                    self.missing.borrow_mut().push(table.to_string());
                }
                plan_err!("table \"{table}\" not found")
            }
        }
    }

    fn get_table_function_source(
        &self,
        name: &str,
        args: Vec<Expr>,
    ) -> DfResult<Arc<dyn TableSource>> {
        self.checkpoint()?;
        // The arguments do not stay in the plan: check them here, like
        // every other expression of the query.
        if let Some(problem) = args
            .iter()
            .find_map(|arg| volatility_problem(self.option, arg))
        {
            *self.interrupted.borrow_mut() = Some(problem);
            return plan_err!("table function argument refused");
        }
        match self.registry.table_functions.get(name) {
            Some(fields) => Ok(Arc::new(LogicalTableSource::new(Arc::new(Schema::new(
                fields.clone(),
            ))))),
            None => plan_err!("table function \"{name}\" not found"),
        }
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.registry.expr_planners
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        // No error channel here: a passed deadline is remembered and
        // reported by the next call that has one, or after planning.
        let _ = self.checkpoint();
        self.registry.scalars.get(name).cloned()
    }

    fn get_higher_order_meta(&self, name: &str) -> Option<Arc<HigherOrderUDF>> {
        self.registry.higher_order.get(name).cloned()
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        let _ = self.checkpoint();
        self.registry.aggregates.get(name).cloned()
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.registry.windows.get(name).cloned()
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.registry.scalars.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        self.registry.higher_order.keys().cloned().collect()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.registry.aggregates.keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.registry.windows.keys().cloned().collect()
    }
}

impl Provider<'_> {
    /// The job's budget, checked from inside DataFusion's planning; the
    /// error is kept so that it, not DataFusion's wrapping of it, is reported.
    fn checkpoint(&self) -> DfResult<()> {
        if self.interrupted.borrow().is_some() {
            return plan_err!("validation interrupted");
        }
        if let Err(e) = isolate::checkpoint() {
            *self.interrupted.borrow_mut() = Some(e);
            return plan_err!("validation interrupted");
        }
        Ok(())
    }
}

/// An analyzer rule that checks the job's budget before it runs.
#[derive(Debug)]
struct Checked(Arc<dyn AnalyzerRule + Send + Sync>);

impl AnalyzerRule for Checked {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        isolate::checkpoint().map_err(|e| DataFusionError::External(Box::new(e)))?;
        self.0.analyze(plan, config)
    }

    fn name(&self) -> &str {
        self.0.name()
    }
}

fn analyzer() -> &'static Analyzer {
    static ANALYZER: OnceLock<Analyzer> = OnceLock::new();
    ANALYZER.get_or_init(|| {
        let rules = Analyzer::new()
            .rules
            .into_iter()
            .map(|rule| Arc::new(Checked(rule)) as Arc<dyn AnalyzerRule + Send + Sync>)
            .collect();
        Analyzer::with_rules(rules)
    })
}

/// Counts a plan's nodes as a tree, subqueries included, and stops as soon
/// as the count passes `limit`: the walk itself is bounded by the limit even
/// when shared CTE plans make the tree exponentially larger than the text.
pub fn count_plan_nodes(plan: &LogicalPlan, limit: usize) -> usize {
    let mut count = 0usize;
    let _ = plan.apply_with_subqueries(|_| {
        count += 1;
        if count > limit || (count % 1024 == 0 && isolate::checkpoint().is_err()) {
            Ok(TreeNodeRecursion::Stop)
        } else {
            Ok(TreeNodeRecursion::Continue)
        }
    });
    count
}

fn too_many_nodes(option: &str, limit: usize) -> Error {
    Error::too_complex(format!("{option} plans to more than {limit} plan nodes"))
        .with_detail(format!(
            "Counted as a tree, with every common table expression counted once per reference, the plan has more than {limit} nodes; the limit is micromegas_views.max_plan_nodes = {limit}."
        ))
        .with_hint("Reference each common table expression fewer times, or split the view into views that read each other.")
}

fn too_wide(option: &str, work: u64) -> Error {
    let limit = width::MAX_COLUMN_WORK;
    Error::too_complex(format!("{option} is too wide to plan"))
        .with_detail(format!(
            "Planning resolves each SELECT's column names and output columns against the columns it reads and returns (a * counts every column it expands to): about {work} look-ups here; the limit is {limit}."
        ))
        .with_hint(if option == "merge_partitions_query" {
            "Name the columns the merge needs instead of SELECT * FROM {source}: it reads every column of the extract query's output."
        } else {
            "Name the columns the view needs instead of * over wide inputs, or split it into views that read each other."
        })
}

/// Plans a parsed query (type coercion included) and returns the plan.
/// `source` is the schema `{source}` stands for, when planning a merge query.
pub fn plan(
    option: &str,
    query: Box<sqlparser::ast::Query>,
    catalog: &Catalog,
    source: Option<SchemaRef>,
) -> Result<LogicalPlan> {
    plan_resolving(option, query, catalog, source).map(|(plan, _)| plan)
}

/// [`plan`], and the name of every view set planning resolved (in any CTE,
/// subquery or set operation, whether the final plan reads it or not).
pub fn plan_resolving(
    option: &str,
    query: Box<sqlparser::ast::Query>,
    catalog: &Catalog,
    source: Option<SchemaRef>,
) -> Result<(LogicalPlan, std::collections::BTreeSet<String>)> {
    let provider = Provider {
        resolved: RefCell::new(Default::default()),
        option,
        catalog,
        source,
        registry: registry(),
        options: config(),
        missing: RefCell::new(Vec::new()),
        instance_only: RefCell::new(Vec::new()),
        interrupted: RefCell::new(None),
        ctes: cte_names(&query),
    };
    isolate::set_phase(option);
    isolate::checkpoint()?;
    crate::functions::take_arg_problem();
    let limit = isolate::max_plan_nodes();
    let estimate = estimate_plan_nodes(&query);
    if estimate > limit as u64 {
        return Err(too_many_nodes(option, limit));
    }
    let source_width = provider.source.as_ref().map(|schema| schema.fields().len());
    let work = width::column_work(&query, catalog, SOURCE_TABLE, source_width);
    if work > width::MAX_COLUMN_WORK {
        return Err(too_wide(option, work));
    }
    let unanalyzed = SqlToRel::new(&provider).sql_statement_to_plan(SqlStatement::Query(query));
    if let Some(e) = provider.interrupted.borrow_mut().take() {
        return Err(e);
    }
    if let Ok(plan) = &unanalyzed {
        isolate::checkpoint()?;
        if count_plan_nodes(plan, limit) > limit {
            return Err(too_many_nodes(option, limit));
        }
        isolate::checkpoint()?;
    }
    let planned =
        unanalyzed.and_then(|plan| analyzer().execute_and_check(plan, config(), |_, _| {}));
    // The analyzer's last rule ran without a check inside it.
    isolate::checkpoint()?;
    if let Err(e) = &planned {
        if let DataFusionError::External(inner) = e.find_root() {
            if let Some(e) = inner.downcast_ref::<Error>() {
                return Err(e.clone());
            }
        }
    }
    planned.map_err(|e| {
        let detail = df_message(&e);
        if let Some(name) = provider.instance_only.borrow().first() {
            return Error::definition(format!(
                "{option} reads view set \"{name}\", which has no global instance"
            ))
            .with_detail(format!(
                "\"{name}\" is only reachable through view_instance(), which a definition may not call."
            ));
        }
        if let Some(problem) = crate::functions::take_arg_problem() {
            return Error::definition(format!("{option} does not plan: {problem}"))
                .with_detail(detail);
        }
        if let Some(name) = provider.missing.borrow().first() {
            return Error::definition(format!(
                "{option} reads \"{name}\", which is not a known view set"
            ))
            .with_detail(detail)
            .with_hint(if option == "merge_partitions_query" {
                "merge_partitions_query reads the view's own partitions as {source}, not by the view's name."
            } else {
                "A definition reads built-in view sets and other materialized views by their unqualified name."
            });
        }
        // The message shows the diagnostic's first line; the DETAIL, the
        // rest of it, if any (not the first line again).
        let first = first_line(&detail).to_string();
        let error = Error::definition(format!("{option} does not plan: {first}"));
        let rest = detail.lines().skip(1).collect::<Vec<_>>().join("\n");
        if rest.trim().is_empty() {
            error
        } else {
            error.with_detail(rest.trim().to_string())
        }
    })
    .map(|plan| (plan, provider.resolved.take()))
}

/// Parses one SQL expression (all of `text`), with the same nesting
/// limits as a query.
pub fn parse_expression(option: &str, text: &str) -> Result<sqlparser::ast::Expr> {
    check_text_nesting(option, text)?;
    let dialect = sqlparser::dialect::GenericDialect {};
    let mut parser = sqlparser::parser::Parser::new(&dialect)
        .with_recursion_limit(PARSER_RECURSION_LIMIT)
        .try_with_sql(text)
        .map_err(|e| expression_syntax(option, &e))?;
    let expr = parser
        .parse_expr()
        .map_err(|e| expression_syntax(option, &e))?;
    let next = parser.peek_token();
    if next.token != sqlparser::tokenizer::Token::EOF {
        return Err(Error::new(
            crate::error::ErrorKind::Syntax,
            format!(
                "{option} must be one expression; it goes on at \"{}\"",
                next.token
            ),
        )
        .with_detail(format!(
            "at line {}, column {}",
            next.span.start.line, next.span.start.column
        )));
    }
    check_nesting(option, &expr)?;
    Ok(expr)
}

fn expression_syntax(option: &str, e: &sqlparser::parser::ParserError) -> Error {
    let message = match e {
        sqlparser::parser::ParserError::RecursionLimitExceeded => {
            return Error::too_complex(format!("{option} is nested too deeply"))
        }
        other => other.to_string(),
    };
    Error::new(
        crate::error::ErrorKind::Syntax,
        format!("{option} does not parse"),
    )
    .with_detail(message)
}

/// Plans one expression over `schema` (unqualified columns), with the
/// functions a definition may call. No table is known: a subquery does not
/// plan.
pub fn plan_expression(
    option: &str,
    expr: sqlparser::ast::Expr,
    schema: &datafusion_common::DFSchema,
) -> Result<Expr> {
    let catalog = Catalog::default();
    let provider = Provider {
        resolved: RefCell::new(Default::default()),
        option,
        catalog: &catalog,
        source: None,
        registry: registry(),
        options: config(),
        missing: RefCell::new(Vec::new()),
        instance_only: RefCell::new(Vec::new()),
        interrupted: RefCell::new(None),
        ctes: Default::default(),
    };
    crate::functions::take_arg_problem();
    let planned = SqlToRel::new(&provider).sql_to_expr(
        expr,
        schema,
        &mut datafusion_sql::planner::PlannerContext::new(),
    );
    if let Some(e) = provider.interrupted.borrow_mut().take() {
        return Err(e);
    }
    planned.map_err(|e| {
        let detail = match crate::functions::take_arg_problem() {
            Some(problem) => problem,
            None => df_message(&e),
        };
        Error::option(format!(
            "{option} does not compile: {}",
            first_line(&detail)
        ))
        .with_detail(detail)
    })
}

/// The Arrow schema a plan produces (unqualified names).
pub fn output_schema(plan: &LogicalPlan) -> SchemaRef {
    let fields: Vec<Field> = plan
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    Arc::new(Schema::new(fields))
}

/// A definition may not read one that failed to load (checked by the
/// planner when it resolves the table, before anything else).
pub(crate) fn failed_source(option: &str, name: &str, error: &str) -> Error {
    Error::definition(format!(
        "{option} reads materialized view \"{name}\", which failed to load"
    ))
    .with_detail(format!("\"{name}\": {error}"))
    .with_hint(format!(
        "Repair \"{name}\" first (CREATE OR REPLACE it), or read something else."
    ))
}

/// The first call in `expr` of a function that is not immutable, as the
/// error a definition gets for it. The planner runs it on table-function
/// arguments too, which do not stay in the plan.
pub(crate) fn volatility_problem(option: &str, expr: &Expr) -> Option<Error> {
    let mut problem = None;
    let _ = expr.apply(|e| {
        if let Some((name, volatility)) = function_volatility(e) {
            if volatility != Volatility::Immutable {
                let kind = match volatility {
                    Volatility::Stable => "stable",
                    _ => "volatile",
                };
                problem = Some(
                    Error::definition(format!("{option} calls {name}(), which is not immutable"))
                        .with_detail(format!(
                            "{name}() is {kind}: its result would be frozen into a partition instead of being recomputed."
                        )),
                );
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    problem
}

fn function_volatility(e: &Expr) -> Option<(String, Volatility)> {
    match e {
        Expr::ScalarFunction(f) => Some((f.func.name().to_string(), f.func.signature().volatility)),
        Expr::AggregateFunction(f) => {
            Some((f.func.name().to_string(), f.func.signature().volatility))
        }
        Expr::WindowFunction(w) => Some(match &w.fun {
            WindowFunctionDefinition::AggregateUDF(f) => {
                (f.name().to_string(), f.signature().volatility)
            }
            WindowFunctionDefinition::WindowUDF(f) => {
                (f.name().to_string(), f.signature().volatility)
            }
        }),
        Expr::HigherOrderFunction(f) => {
            Some((f.func.name().to_string(), f.func.signature().volatility))
        }
        _ => None,
    }
}
