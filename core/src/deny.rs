//! micromegas' query deny list: a rule is a Boolean SQL expression over
//! the match context (twelve nullable Utf8 columns), compiled with DataFusion
//! when it is written and evaluated against a query's context; and
//! `sql_hash`, the fingerprint micromegas writes to its query audit log.

use crate::error::{Error, ErrorKind, Result};
use crate::isolate;
use crate::planner;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion_common::tree_node::Transformed;
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::DataFusionError;
use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::expr::InList;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::simplify::SimplifyContext;
use datafusion_expr::utils::split_conjunction;
use datafusion_expr::ColumnarValue;
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable, Operator};
use datafusion_optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion_optimizer::simplify_expressions::ExprSimplifier;
use datafusion_physical_expr::expressions::{LikeExpr, Literal};
use datafusion_physical_expr::{create_physical_expr, PhysicalExpr};
use regex::{Regex, RegexBuilder};
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

/// A compiled rule: its expression, and what the matcher's index reads.
pub struct Rule {
    expr: Arc<dyn PhysicalExpr>,
    /// A column and the values it must equal for the rule to be TRUE: from
    /// a top-level conjunct `column = 'v'` or `column IN ('a', 'b')`. A rule
    /// with a key is only evaluated for a context that holds one of them.
    key: Option<(usize, Vec<String>)>,
    /// Whether the expression reads `sql_hash` (the fingerprint of `sql`
    /// is computed only when a rule to evaluate needs it).
    reads_sql_hash: bool,
    /// The same expression for direct evaluation on the context's values,
    /// when it is made only of what [`Fast`] knows (most rules are).
    fast: Option<Fast>,
}

/// Compiles a rule's expression, with every check of `deny_queries`.
pub fn compile(text: &str) -> Result<Rule> {
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
            .with_detail(format!(
                "A rule is evaluated on every query, before it is planned: no subqueries, aggregates or window \
                 functions, no || (it multiplies what the rule reads), and only functions that cost no more than \
                 reading their input: {}.",
                RULE_FUNCTIONS.join(", ")
            )));
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
    // Simplified before it is made executable, as DataFusion's own planner
    // does: some functions (coalesce, nvl) are only defined as a rewrite
    // and refuse to run as written.
    let simplified = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(Arc::new(df_schema.clone()))
            .build(),
    )
    .simplify(coerced.clone())
    .map_err(|e| invalid("match_expr does not compile").with_detail(planner::df_message(&e)))?;
    let physical = create_physical_expr(
        &simplified,
        df_schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )
    .and_then(compile_patterns)
    .map_err(|e| invalid("match_expr does not compile").with_detail(planner::df_message(&e)))?;
    // The canary: one evaluation over a probe row.
    let probe: [Option<String>; 12] =
        std::array::from_fn(|i| Some(format!("probe-{}", MATCH_COLUMNS[i])));
    evaluate(&physical, &context_batch(&probe)?).map_err(|e| {
        invalid("match_expr fails on a probe row").with_detail(e.detail.unwrap_or(e.message))
    })?;
    Ok(Rule {
        expr: physical,
        fast: Fast::of(&coerced).filter(|f| f.kind() == Kind::Bool),
        key: key_of(&coerced),
        reads_sql_hash: coerced
            .column_refs()
            .iter()
            .any(|c| c.name == MATCH_COLUMNS[SQL_HASH]),
    })
}

/// The first top-level conjunct that only one set of values of one column
/// can make TRUE: `column = 'v'` (either side) or `column IN ('a', 'b')`.
/// Under SQL's rules the conjunction is then TRUE only when the column holds
/// one of them (a NULL or any other value makes it FALSE or NULL).
fn key_of(expr: &Expr) -> Option<(usize, Vec<String>)> {
    let (column, text) = (context_column, text_literal);
    split_conjunction(expr)
        .into_iter()
        .find_map(|conjunct| match conjunct {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => match (column(left), text(right), column(right), text(left)) {
                (Some(c), Some(v), _, _) | (_, _, Some(c), Some(v)) => Some((c, vec![v])),
                _ => None,
            },
            Expr::InList(InList {
                expr,
                list,
                negated: false,
            }) => {
                let c = column(expr)?;
                let values: Option<Vec<String>> = list.iter().map(text).collect();
                values.map(|v| (c, v))
            }
            _ => None,
        })
}

/// The match-context column an expression is, if it is one.
fn context_column(e: &Expr) -> Option<usize> {
    match e {
        Expr::Column(c) if c.relation.is_none() => {
            MATCH_COLUMNS.iter().position(|name| *name == c.name)
        }
        _ => None,
    }
}

/// The text of a string literal.
fn text_literal(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(ScalarValue::Utf8(Some(t)), _)
        | Expr::Literal(ScalarValue::Utf8View(Some(t)), _)
        | Expr::Literal(ScalarValue::LargeUtf8(Some(t)), _) => Some(t.clone()),
        _ => None,
    }
}

/// A rule's expression evaluated directly on one context's values, with
/// SQL's three-valued logic, instead of as a DataFusion expression over a
/// one-row batch (about 1 µs per rule, which a deny list of rules without a
/// key pays per rule on every query). Only what it reproduces exactly:
/// column references, text and Boolean literals and NULL, the six
/// comparisons of two texts (byte order, as Arrow compares Utf8), AND, OR,
/// NOT, IS [NOT] NULL, [NOT] IN a list of literals, and [NOT] [I]LIKE a
/// constant pattern without ESCAPE. Anything else is left to DataFusion; a
/// test compares the two over generated expressions and contexts.
#[derive(Debug)]
enum Fast {
    Column(usize),
    Text(String),
    Bool(bool),
    Null,
    Compare(Operator, Box<Fast>, Box<Fast>),
    And(Box<Fast>, Box<Fast>),
    Or(Box<Fast>, Box<Fast>),
    Not(Box<Fast>),
    IsNull(Box<Fast>, bool),
    InList(Box<Fast>, Vec<Option<String>>, bool),
    Like(Box<Fast>, Regex, bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Bool,
    Null,
}

/// A value of [`Fast`]'s evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FastValue<'a> {
    Null,
    Text(&'a str),
    Bool(bool),
}

impl Fast {
    /// The direct form of a coerced expression, when every part has one.
    fn of(expr: &Expr) -> Option<Fast> {
        let of = |e: &Expr| Fast::of(e).map(Box::new);
        let fast = match expr {
            Expr::Column(_) => Fast::Column(context_column(expr)?),
            Expr::Literal(value, _) => match (text_literal(expr), value) {
                (Some(t), _) => Fast::Text(t),
                (None, ScalarValue::Boolean(Some(b))) => Fast::Bool(*b),
                (
                    None,
                    ScalarValue::Utf8(None)
                    | ScalarValue::LargeUtf8(None)
                    | ScalarValue::Utf8View(None)
                    | ScalarValue::Boolean(None)
                    | ScalarValue::Null,
                ) => Fast::Null,
                _ => return None,
            },
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
                Operator::Eq
                | Operator::NotEq
                | Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq => Fast::Compare(*op, of(left)?, of(right)?),
                Operator::And => Fast::And(of(left)?, of(right)?),
                Operator::Or => Fast::Or(of(left)?, of(right)?),
                _ => return None,
            },
            Expr::Not(inner) => Fast::Not(of(inner)?),
            Expr::IsNull(inner) => Fast::IsNull(of(inner)?, false),
            Expr::IsNotNull(inner) => Fast::IsNull(of(inner)?, true),
            Expr::InList(InList {
                expr,
                list,
                negated,
            }) => {
                let values = list
                    .iter()
                    .map(|item| match Fast::of(item)? {
                        Fast::Text(t) => Some(Some(t)),
                        Fast::Null => Some(None),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                Fast::InList(of(expr)?, values, *negated)
            }
            Expr::Like(like) if like.escape_char.is_none() => {
                let Fast::Text(pattern) = Fast::of(&like.pattern)? else {
                    return None;
                };
                let regex = like_regex(&pattern, like.case_insensitive).ok()?;
                Fast::Like(of(&like.expr)?, regex, like.negated)
            }
            _ => return None,
        };
        fast.well_typed().then_some(fast)
    }

    fn kind(&self) -> Kind {
        match self {
            Fast::Column(_) | Fast::Text(_) => Kind::Text,
            Fast::Null => Kind::Null,
            _ => Kind::Bool,
        }
    }

    /// Whether each operand has the kind its operator takes (NULL fits any).
    fn well_typed(&self) -> bool {
        let is = |f: &Fast, k: Kind| f.kind() == k || f.kind() == Kind::Null;
        match self {
            Fast::Compare(_, l, r) => is(l, Kind::Text) && is(r, Kind::Text),
            Fast::And(l, r) | Fast::Or(l, r) => is(l, Kind::Bool) && is(r, Kind::Bool),
            Fast::Not(inner) => is(inner, Kind::Bool),
            Fast::InList(inner, _, _) | Fast::Like(inner, _, _) => is(inner, Kind::Text),
            _ => true,
        }
    }

    fn eval<'a>(&'a self, context: &[Option<&'a str>; 12]) -> FastValue<'a> {
        use FastValue::{Bool, Null, Text};
        let truth = |f: &Fast| match f.eval(context) {
            Bool(b) => Some(b),
            _ => None,
        };
        match self {
            Fast::Column(i) => context[*i].map_or(Null, Text),
            Fast::Text(t) => Text(t),
            Fast::Bool(b) => Bool(*b),
            Fast::Null => Null,
            Fast::Compare(op, l, r) => match (l.eval(context), r.eval(context)) {
                (Text(a), Text(b)) => Bool(match op {
                    Operator::Eq => a == b,
                    Operator::NotEq => a != b,
                    Operator::Lt => a < b,
                    Operator::LtEq => a <= b,
                    Operator::Gt => a > b,
                    _ => a >= b,
                }),
                _ => Null,
            },
            Fast::And(l, r) => match (truth(l), truth(r)) {
                (Some(false), _) | (_, Some(false)) => Bool(false),
                (Some(true), Some(true)) => Bool(true),
                _ => Null,
            },
            Fast::Or(l, r) => match (truth(l), truth(r)) {
                (Some(true), _) | (_, Some(true)) => Bool(true),
                (Some(false), Some(false)) => Bool(false),
                _ => Null,
            },
            Fast::Not(inner) => truth(inner).map_or(Null, |b| Bool(!b)),
            Fast::IsNull(inner, negated) => Bool((inner.eval(context) == Null) != *negated),
            Fast::InList(inner, list, negated) => match inner.eval(context) {
                Text(v) => {
                    if list.iter().any(|item| item.as_deref() == Some(v)) {
                        Bool(!negated)
                    } else if list.iter().any(Option::is_none) {
                        Null
                    } else {
                        Bool(*negated)
                    }
                }
                _ => Null,
            },
            Fast::Like(inner, regex, negated) => match inner.eval(context) {
                Text(v) => Bool(regex.is_match(v) != *negated),
                _ => Null,
            },
        }
    }
}

/// Every `LIKE`/`ILIKE` with a constant pattern becomes a [`CompiledLike`]:
/// Arrow's kernel builds its regular expression again on each evaluation
/// (for any pattern with `_` or `\\` or `%` inside), about 80 µs, which a
/// rule checked on every query served cannot pay.
fn compile_patterns(
    expr: Arc<dyn PhysicalExpr>,
) -> datafusion_common::Result<Arc<dyn PhysicalExpr>> {
    expr.transform_up(|node| {
        let any: &dyn std::any::Any = node.as_ref();
        let Some(like) = any.downcast_ref::<LikeExpr>() else {
            return Ok(Transformed::no(node));
        };
        let pattern: &dyn std::any::Any = like.pattern().as_ref();
        let text = match pattern.downcast_ref::<Literal>().map(Literal::value) {
            Some(ScalarValue::Utf8(Some(t)))
            | Some(ScalarValue::LargeUtf8(Some(t)))
            | Some(ScalarValue::Utf8View(Some(t))) => t.clone(),
            _ => return Ok(Transformed::no(node)),
        };
        // A pattern whose automaton would pass the bound stays DataFusion's
        // (built per evaluation, and dropped): what a backend keeps per
        // cached rule is bounded.
        let Ok(regex) = like_regex(&text, like.case_insensitive()) else {
            return Ok(Transformed::no(node));
        };
        Ok(Transformed::yes(Arc::new(CompiledLike {
            input: Arc::clone(like.expr()),
            negated: like.negated(),
            pattern: text,
            case_insensitive: like.case_insensitive(),
            regex,
            original: Arc::clone(&node),
        }) as Arc<dyn PhysicalExpr>))
    })
    .map(|t| t.data)
}

/// The most memory one kept LIKE automaton (and its lazy DFA's cache) may
/// take.
const COMPILED_LIKE_BYTES: usize = 256 * 1024;

/// The regular expression of a LIKE pattern: `%` any run of characters,
/// `_` one character, a backslash makes the next character literal (a
/// trailing one is itself); `.` crosses newlines. Anchored at each end that
/// is not a `%` (an unanchored search lets the regex engine look for the
/// literal part first).
fn like_regex(pattern: &str, case_insensitive: bool) -> datafusion_common::Result<Regex> {
    enum Part {
        Any,
        One,
        Text(char),
    }
    let mut parts = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        parts.push(match c {
            '%' => Part::Any,
            '_' => Part::One,
            '\\' => Part::Text(chars.next().unwrap_or('\\')),
            other => Part::Text(other),
        });
    }
    let open_start = matches!(parts.first(), Some(Part::Any));
    let open_end = matches!(parts.last(), Some(Part::Any));
    let mut out = String::with_capacity(pattern.len() + 8);
    if !open_start {
        out.push('^');
    }
    let (from, to) = (
        usize::from(open_start),
        parts.len() - usize::from(open_end && parts.len() > usize::from(open_start)),
    );
    for part in &parts[from.min(to)..to] {
        match part {
            Part::Any => out.push_str(".*"),
            Part::One => out.push('.'),
            Part::Text(c) => out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
        }
    }
    if !open_end {
        out.push('$');
    }
    RegexBuilder::new(&out)
        .case_insensitive(case_insensitive)
        .dot_matches_new_line(true)
        .size_limit(COMPILED_LIKE_BYTES)
        .dfa_size_limit(COMPILED_LIKE_BYTES)
        .build()
        .map_err(|e| {
            DataFusionError::Plan(format!(
                "the LIKE pattern {pattern:?} does not compile: {e}"
            ))
        })
}

/// `input [NOT] [I]LIKE 'constant'` with its regular expression built once.
#[derive(Debug)]
struct CompiledLike {
    input: Arc<dyn PhysicalExpr>,
    negated: bool,
    pattern: String,
    case_insensitive: bool,
    regex: Regex,
    /// DataFusion's own expression: what is shown, and what evaluates an
    /// input that is not a string array.
    original: Arc<dyn PhysicalExpr>,
}

impl PartialEq for CompiledLike {
    fn eq(&self, other: &Self) -> bool {
        self.original.eq(&other.original)
    }
}
impl Eq for CompiledLike {}
impl std::hash::Hash for CompiledLike {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.pattern.hash(state);
        self.negated.hash(state);
        self.case_insensitive.hash(state);
        self.input.hash(state);
    }
}
impl std::fmt::Display for CompiledLike {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.original.fmt(f)
    }
}

impl PhysicalExpr for CompiledLike {
    fn data_type(&self, _schema: &Schema) -> datafusion_common::Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, schema: &Schema) -> datafusion_common::Result<bool> {
        self.input.nullable(schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> datafusion_common::Result<ColumnarValue> {
        let input = self.input.evaluate(batch)?.into_array(batch.num_rows())?;
        let test = |v: Option<&str>| v.map(|s| self.regex.is_match(s) != self.negated);
        let result: BooleanArray = match input.data_type() {
            DataType::Utf8 => input.as_string::<i32>().iter().map(test).collect(),
            DataType::LargeUtf8 => input.as_string::<i64>().iter().map(test).collect(),
            DataType::Utf8View => input.as_string_view().iter().map(test).collect(),
            _ => return self.original.evaluate(batch),
        };
        Ok(ColumnarValue::Array(Arc::new(result)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> datafusion_common::Result<Arc<dyn PhysicalExpr>> {
        let pattern = Arc::clone(self.original.children()[1]);
        Ok(Arc::new(CompiledLike {
            input: Arc::clone(&children[0]),
            negated: self.negated,
            pattern: self.pattern.clone(),
            case_insensitive: self.case_insensitive,
            regex: self.regex.clone(),
            original: Arc::new(LikeExpr::new(
                self.negated,
                self.case_insensitive,
                Arc::clone(&children[0]),
                pattern,
            )),
        }))
    }

    fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.original.fmt_sql(f)
    }
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

/// The functions a rule may call: each costs time linear in its input and
/// makes no more than it reads (no repetition, padding, concatenation,
/// edit distance, or anything whose cost grows faster than its input).
pub const RULE_FUNCTIONS: &[&str] = &[
    "lower", "upper", "initcap", "btrim", "ltrim", "rtrim", "trim", "length", "char_length",
    "character_length", "octet_length", "bit_length", "starts_with", "ends_with", "strpos", "instr",
    "contains", "substr", "substring", "left", "right", "split_part", "reverse", "translate", "ascii",
    "regexp_like", "regexp_match", "regexp_count", "coalesce", "nvl", "nvl2", "nullif", "md5",
    "sha256", "to_hex",
];

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
            // Evaluated on every query (in the query services' own
            // process too), before its deadline: only what costs no more
            // than reading the context, and makes no more than it reads.
            Expr::ScalarFunction(f) if !RULE_FUNCTIONS.contains(&f.func.name()) => {
                Some(format!("{}()", f.func.name()))
            }
            Expr::BinaryExpr(BinaryExpr { op: Operator::StringConcat, .. }) => Some("||".to_string()),
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

/// One query's context as the one-row batch rules are evaluated on.
fn context_batch<S: AsRef<str>>(context: &[Option<S>; 12]) -> Result<RecordBatch> {
    let (schema, _) = match_schema();
    let columns: Vec<ArrayRef> = context
        .iter()
        .map(|v| Arc::new(StringArray::from(vec![v.as_ref().map(AsRef::as_ref)])) as ArrayRef)
        .collect();
    RecordBatch::try_new(Arc::clone(schema), columns)
        .map_err(|e| Error::internal("match context batch").with_detail(e.to_string()))
}

/// Evaluates a compiled rule on one context's batch: `Some(true)` is a
/// match, NULL is `None`.
fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<Option<bool>> {
    let value = expr
        .evaluate(batch)
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
fn compiled(text: &str) -> Result<Arc<Rule>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Rule>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().expect("cache").get(text) {
        return Ok(Arc::clone(hit));
    }
    let expr = Arc::new(compile(text)?);
    let mut cache = cache.lock().expect("cache");
    if cache.len() >= 1024 {
        cache.clear();
    }
    cache.insert(text.to_string(), Arc::clone(&expr));
    Ok(expr)
}

/// Rules compiled once, tried in order: what a service keeps in memory to
/// check every query it serves (the client crate's `DenyMatcher`), and what
/// the SQL function builds from the stored rules (its compilations cached
/// per backend). Rules with a key (see [`Rule`]) are indexed by it, so a
/// context is evaluated only against the rules that can match it.
pub struct Matcher {
    rules: Vec<(String, Arc<Rule>)>,
    /// Rules without a key, in order.
    unkeyed: Vec<usize>,
    /// Per column with keyed rules: each value and its rules, in order.
    keyed: Vec<(usize, HashMap<String, Vec<usize>>)>,
}

impl Matcher {
    /// Compiles `(rule_id, match_expr)` pairs; a rule that does not compile
    /// is an error naming it.
    pub fn new(rules: &[(String, String)]) -> Result<Matcher> {
        Self::build(rules, |text| compile(text).map(Arc::new))
    }

    fn build(
        rules: &[(String, String)],
        compile: impl Fn(&str) -> Result<Arc<Rule>>,
    ) -> Result<Matcher> {
        let mut matcher = Matcher {
            rules: Vec::with_capacity(rules.len()),
            unkeyed: Vec::new(),
            keyed: Vec::new(),
        };
        for (i, (id, text)) in rules.iter().enumerate() {
            isolate::checkpoint()?;
            let rule = compile(text).map_err(|e| {
                Error::new(e.kind, format!("rule {id}: {}", e.message))
                    .with_detail(e.detail.clone().unwrap_or_default())
            })?;
            match &rule.key {
                None => matcher.unkeyed.push(i),
                Some((column, values)) => {
                    let at = match matcher.keyed.iter().position(|(c, _)| c == column) {
                        Some(at) => at,
                        None => {
                            matcher.keyed.push((*column, HashMap::new()));
                            matcher.keyed.len() - 1
                        }
                    };
                    for value in values {
                        let list = matcher.keyed[at].1.entry(value.clone()).or_default();
                        if list.last() != Some(&i) {
                            list.push(i);
                        }
                    }
                }
            }
            matcher.rules.push((id.clone(), rule));
        }
        Ok(matcher)
    }

    /// The index of the first rule whose expression is TRUE for `context`
    /// (`sql_hash`, when not given, is the fingerprint of `sql`).
    pub fn first(&self, context: &[Option<String>; 12]) -> Result<Option<usize>> {
        let borrowed: [Option<&str>; 12] = std::array::from_fn(|i| context[i].as_deref());
        self.first_of(&borrowed)
    }

    /// [`Matcher::first`] on borrowed text.
    pub fn first_of(&self, context: &[Option<&str>; 12]) -> Result<Option<usize>> {
        let size: usize = context.iter().flatten().map(|s| s.len()).sum();
        if size > MAX_CONTEXT_BYTES {
            return Err(too_long("the match context", size));
        }
        // The fingerprint, computed at most once and only when needed.
        let mut fingerprint: Option<String> = None;
        let mut hash_of = |context: &[Option<&str>; 12]| -> Result<Option<String>> {
            match (context[SQL_HASH], context[SQL]) {
                (Some(given), _) => Ok(Some(given.to_string())),
                (None, Some(sql)) => {
                    if fingerprint.is_none() {
                        fingerprint = Some(sql_hash(sql)?);
                    }
                    Ok(fingerprint.clone())
                }
                (None, None) => Ok(None),
            }
        };
        // The rules that can match, in order.
        let mut candidates = self.unkeyed.clone();
        for (column, values) in &self.keyed {
            let value = if *column == SQL_HASH {
                hash_of(context)?
            } else {
                context[*column].map(str::to_string)
            };
            if let Some(hits) = value.as_deref().and_then(|v| values.get(v)) {
                candidates.extend_from_slice(hits);
            }
        }
        if candidates.is_empty() {
            return Ok(None);
        }
        candidates.sort_unstable();
        candidates.dedup();
        let needs_hash = context[SQL_HASH].is_none()
            && candidates.iter().any(|&i| self.rules[i].1.reads_sql_hash);
        let hash = if needs_hash { hash_of(context)? } else { None };
        let mut full = *context;
        full[SQL_HASH] = context[SQL_HASH].or(hash.as_deref());
        // The one-row batch, built only for a rule that needs DataFusion.
        let mut batch = None;
        for i in candidates {
            let (id, rule) = &self.rules[i];
            isolate::checkpoint()?;
            if let Some(fast) = &rule.fast {
                if fast.eval(&full) == FastValue::Bool(true) {
                    return Ok(Some(i));
                }
                continue;
            }
            if batch.is_none() {
                batch = Some(context_batch(&full)?);
            }
            match evaluate(&rule.expr, batch.as_ref().expect("built")) {
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
}

/// The index of the first rule (in the given order) whose expression is
/// TRUE for `context`. A stored rule that no longer compiles is an error
/// naming it, whatever the context (every rule is compiled first); one that
/// fails to evaluate is an error when it is evaluated — a rule whose key the
/// context does not hold is not (it cannot be TRUE).
pub fn first_match(
    rules: &[(String, String)],
    context: &[Option<String>; 12],
) -> Result<Option<usize>> {
    Matcher::build(rules, compiled)?.first(context)
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

    /// The direct evaluation answers exactly what DataFusion's expression
    /// answers: generated expressions of every shape it takes (and some it
    /// leaves to DataFusion), over generated contexts with NULLs, empty
    /// strings, case and LIKE metacharacters.
    #[test]
    fn fast_evaluation_agrees_with_datafusion() {
        struct Gen(u64);
        impl Gen {
            fn next(&mut self, n: usize) -> usize {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (self.0 % n as u64) as usize
            }
        }
        const COLUMNS: [&str; 4] = ["client", "user_id", "sql", "session"];
        const TEXTS: [&str; 8] = ["", "a", "A", "ab", "b%", "x_y", "\\", "é"];
        const PATTERNS: [&str; 8] = ["a%", "%b", "_", "%", "a\\%", "A_%", "%\\_%", ""];
        fn text(g: &mut Gen) -> String {
            match g.next(12) {
                0..=3 => COLUMNS[g.next(4)].to_string(),
                4 => "NULL".to_string(),
                _ => format!("'{}'", TEXTS[g.next(8)]),
            }
        }
        fn boolean(g: &mut Gen, depth: usize) -> String {
            let leaf = depth == 0 || g.next(3) == 0;
            // Leaves are mostly comparisons, the commonest shape.
            let shape = match (leaf, g.next(3)) {
                (true, 0) => 0,
                (true, _) => g.next(6),
                (false, _) => 6 + g.next(4),
            };
            match shape {
                0 => format!(
                    "{} {} {}",
                    text(g),
                    ["=", "<>", "<", "<=", ">", ">="][g.next(6)],
                    text(g)
                ),
                1 => {
                    let items: Vec<String> = (0..1 + g.next(3))
                        .map(|_| text(g))
                        .filter(|t| !COLUMNS.contains(&t.as_str()))
                        .collect();
                    let items = if items.is_empty() {
                        vec!["'a'".to_string()]
                    } else {
                        items
                    };
                    format!(
                        "{} {}IN ({})",
                        COLUMNS[g.next(4)],
                        ["", "NOT "][g.next(2)],
                        items.join(", ")
                    )
                }
                2 => format!(
                    "{} {}{} '{}'",
                    COLUMNS[g.next(4)],
                    ["", "NOT "][g.next(2)],
                    ["LIKE", "ILIKE"][g.next(2)],
                    PATTERNS[g.next(8)]
                ),
                3 => format!("{} IS {}NULL", COLUMNS[g.next(4)], ["", "NOT "][g.next(2)]),
                4 => ["TRUE", "FALSE", "NULL"][g.next(3)].to_string(),
                // Left to DataFusion: a function call.
                5 => format!("lower({}) = 'a'", COLUMNS[g.next(4)]),
                6 => format!(
                    "({}) AND ({})",
                    boolean(g, depth - 1),
                    boolean(g, depth - 1)
                ),
                7 => format!("({}) OR ({})", boolean(g, depth - 1), boolean(g, depth - 1)),
                8 => format!("NOT ({})", boolean(g, depth - 1)),
                _ => format!("({}) IS NULL", boolean(g, depth - 1)),
            }
        }
        let mut g = Gen(0x2545_F491_4F6C_DD1D);
        let contexts: Vec<[Option<String>; 12]> = (0..40)
            .map(|_| {
                std::array::from_fn(|_| match g.next(9) {
                    8 => None,
                    k => Some(TEXTS[k % 8].to_string()),
                })
            })
            .collect();
        let (mut fast, mut compared) = (0, 0);
        for _ in 0..3000 {
            let text = boolean(&mut g, 3);
            let Ok(rule) = isolate::run({
                let text = text.clone();
                move || compile(&text)
            }) else {
                continue;
            };
            let Some(direct) = &rule.fast else {
                continue;
            };
            fast += 1;
            for context in &contexts {
                let borrowed: [Option<&str>; 12] = std::array::from_fn(|i| context[i].as_deref());
                let expected = evaluate(&rule.expr, &context_batch(&borrowed).unwrap()).unwrap();
                let got = match direct.eval(&borrowed) {
                    FastValue::Bool(b) => Some(b),
                    FastValue::Null => None,
                    FastValue::Text(t) => panic!("{text}: a text value {t:?}"),
                };
                assert_eq!(got, expected, "{text} on {borrowed:?}");
                compared += 1;
            }
        }
        assert!(
            fast >= 1000,
            "only {fast} generated rules took the direct path"
        );
        assert!(compared >= 40_000, "{compared}");
    }

    #[test]
    fn a_function_call_is_left_to_datafusion() {
        let rule = isolate::run(|| compile("lower(client) = 'a' AND user_id = 'x'")).unwrap();
        assert!(rule.fast.is_none());
        let rule = isolate::run(|| compile("client = 'a' AND user_id LIKE 'x%'")).unwrap();
        assert!(rule.fast.is_some());
    }

    /// coalesce and nvl exist in DataFusion only as a rewrite to CASE: a
    /// rule using them is simplified before it runs, and decides like CASE.
    #[test]
    fn functions_datafusion_rewrites_compile_and_decide() {
        for (text, context_pairs, expected) in [
            ("coalesce(user_id, 'x') = coalesce(user_id, 'x')", &[("client", "c")][..], Some(true)),
            ("coalesce(user_id, 'anonymous') = 'anonymous'", &[("client", "c")][..], Some(true)),
            ("coalesce(user_id, 'anonymous') = 'anonymous'", &[("user_id", "bob")][..], Some(false)),
            ("nvl(email, client) = 'c'", &[("client", "c")][..], Some(true)),
        ] {
            let rule = isolate::run({
                let text = text.to_string();
                move || compile(&text)
            })
            .unwrap_or_else(|e| panic!("{text}: {}", e.message));
            let got = evaluate(&rule.expr, &context_batch(&context(context_pairs)).unwrap()).unwrap();
            assert_eq!(got, expected, "{text} over {context_pairs:?}");
        }
    }

    #[test]
    fn the_documented_example_rules_compile() {
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
        // A function outside the rule functions is refused first.
        let e = refused("notebook = now()");
        assert_eq!(e.message, "match_expr may not use now()");
        let e = refused("notebook = CAST(1 AS TIMESTAMP)");
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
        // Evaluated on every query: nothing whose output multiplies its
        // input, under any name or nesting.
        for amplifying in [
            "length(repeat(sql, 1000)) > 5",
            "client = 'a' OR lpad(sql, 100000000) = 'x'",
            "strpos(list_repeat(client, 9), 'a') > 0",
            "cardinality(range(1, 10000000)) > 1",
            "upper(regexp_replace(sql, '(.)', '\\1\\1', 'g')) = 'X'",
            // Linear alone, but it multiplies with every argument or step.
            "concat(sql, sql, sql, sql) = 'x'",
            "sql || sql || sql = 'x'",
            // Cost grows faster than its input.
            "levenshtein(sql, 'qqqq') IS NULL",
        ] {
            let e = refused(amplifying);
            assert!(e.message.starts_with("match_expr may not use "), "{amplifying}: {}", e.message);
        }
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

    /// Every rule evaluated on the context, in order, without the index.
    fn first_without_index(
        rules: &[(String, String)],
        ctx: &[Option<String>; 12],
    ) -> Option<usize> {
        let mut full = ctx.clone();
        if full[SQL_HASH].is_none() {
            full[SQL_HASH] = full[SQL].as_deref().map(|s| sql_hash(s).unwrap());
        }
        let batch = context_batch(&full).unwrap();
        rules.iter().position(|(_, text)| {
            evaluate(&compile(text).unwrap().expr, &batch).unwrap() == Some(true)
        })
    }

    #[test]
    fn a_compiled_like_answers_what_datafusion_answers() {
        use datafusion_physical_expr::expressions::Column;
        let patterns = [
            "",
            "%",
            "_",
            "a%",
            "%a",
            "%a%",
            "a_c",
            "a\\%b",
            "a\\_",
            "\\\\",
            "trailing\\",
            "%.*%",
            "(x)",
            "a%b%c",
            "%thread_spans_1%",
            "ÅB%",
            "%\n%",
            "%s%",
            "[a]",
            "_%_",
            "%%",
            "%_",
            "_%",
            "%a\\%",
            "%%a%%",
            "ab%",
            "%b",
            "\\%%",
            "%\\",
        ];
        let haystacks = [
            Some(""),
            Some("a"),
            Some("abc"),
            Some("a%b"),
            Some("a_"),
            Some("\\"),
            Some("trailing\\"),
            Some(".*"),
            Some("(x)"),
            Some("axbxc"),
            Some("SELECT * FROM thread_spans_12"),
            Some("åbc"),
            Some("line\nline"),
            Some("A"),
            Some("ABC"),
            Some("ſ"),
            Some("[a]"),
            Some("ab"),
            None,
        ];
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Utf8, true)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(StringArray::from(haystacks.to_vec())) as ArrayRef],
        )
        .unwrap();
        let mut compiled_any = 0;
        for pattern in patterns {
            for (negated, case_insensitive) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                let like: Arc<dyn PhysicalExpr> = Arc::new(LikeExpr::new(
                    negated,
                    case_insensitive,
                    Arc::new(Column::new("v", 0)),
                    Arc::new(Literal::new(ScalarValue::Utf8(Some(pattern.to_string())))),
                ));
                let theirs = like
                    .evaluate(&batch)
                    .unwrap()
                    .into_array(batch.num_rows())
                    .unwrap();
                let compiled = compile_patterns(Arc::clone(&like)).unwrap();
                let any: &dyn std::any::Any = compiled.as_ref();
                compiled_any += usize::from(any.is::<CompiledLike>());
                let ours = compiled
                    .evaluate(&batch)
                    .unwrap()
                    .into_array(batch.num_rows())
                    .unwrap();
                assert_eq!(
                    ours.as_boolean(),
                    theirs.as_boolean(),
                    "{pattern:?} negated {negated} case-insensitive {case_insensitive}"
                );
            }
        }
        assert_eq!(
            compiled_any,
            patterns.len() * 4,
            "every constant pattern is compiled"
        );
        // A pattern whose automaton passes the bound is left to DataFusion,
        // and answers the same.
        let huge = format!("%{}x%", "_".repeat(2_000));
        let like: Arc<dyn PhysicalExpr> = Arc::new(LikeExpr::new(
            false,
            false,
            Arc::new(Column::new("v", 0)),
            Arc::new(Literal::new(ScalarValue::Utf8(Some(huge)))),
        ));
        let kept = compile_patterns(Arc::clone(&like)).unwrap();
        let any: &dyn std::any::Any = kept.as_ref();
        assert!(any.is::<LikeExpr>(), "{kept}");
        assert_eq!(
            kept.evaluate(&batch)
                .unwrap()
                .into_array(batch.num_rows())
                .unwrap()
                .as_boolean(),
            like.evaluate(&batch)
                .unwrap()
                .into_array(batch.num_rows())
                .unwrap()
                .as_boolean()
        );
    }

    #[test]
    fn the_index_keys_only_what_decides_a_match() {
        let key = |text: &str| {
            let text = text.to_string();
            isolate::run(move || compile(&text).map(|r| r.key)).unwrap()
        };
        let at = |name: &str| MATCH_COLUMNS.iter().position(|c| *c == name).unwrap();
        assert_eq!(key("client = 'a'"), Some((at("client"), vec!["a".into()])));
        assert_eq!(
            key("'a' = client AND sql LIKE '%x%'"),
            Some((at("client"), vec!["a".into()]))
        );
        assert_eq!(
            key("sql LIKE '%x%' AND user_id IN ('u', 'v')"),
            Some((at("user_id"), vec!["u".into(), "v".into()]))
        );
        // Not keys: a disjunction, a negation, a list with a computed value, a
        // comparison of two columns, an inequality.
        for text in [
            "client = 'a' OR user_id = 'u'",
            "NOT (client = 'a')",
            "client NOT IN ('a')",
            "client IN ('a', upper(user_id))",
            "client = user_id",
            "client <> 'a'",
            "(client = 'a') IS NOT FALSE",
        ] {
            assert_eq!(key(text), None, "{text}");
        }
    }

    #[test]
    fn the_index_agrees_with_evaluating_every_rule() {
        let shapes = [
            "client = 'a'",
            "'b' = client AND sql LIKE '%spans%'",
            "client IN ('a', 'c') AND session IS NOT NULL",
            "sql LIKE '%spans%'",
            "user_id = 'u' OR client = 'b'",
            "user_id = 'u'",
            "sql_hash = 'SPANS_HASH'",
            "sql_hash IN ('SPANS_HASH', 'x') AND client = 'c'",
            "upper(notebook) = 'N' AND client = 'a'",
            "client = 'a' AND user_id = 'v'",
        ];
        let spans_hash = sql_hash("SELECT * FROM thread_spans").unwrap();
        let shapes: Vec<String> = shapes
            .iter()
            .map(|s| s.replace("SPANS_HASH", &spans_hash))
            .collect();
        let values = [
            None,
            Some("a"),
            Some("b"),
            Some("c"),
            Some("u"),
            Some("v"),
            Some("n"),
        ];
        let sqls = [None, Some("SELECT * FROM thread_spans"), Some("select 1")];
        isolate::run(move || {
            // Every ordered choice of three shapes, against many contexts.
            for a in 0..shapes.len() {
                for b in 0..shapes.len() {
                    for c in 0..shapes.len() {
                        let rules: Vec<(String, String)> = [a, b, c]
                            .iter()
                            .enumerate()
                            .map(|(i, &s)| (format!("r{i}"), shapes[s].clone()))
                            .collect();
                        let matcher = Matcher::new(&rules).unwrap();
                        for (n, client) in values.iter().enumerate() {
                            let user = values[(n * 3 + a) % values.len()];
                            let notebook = values[(n + b) % values.len()];
                            let session = values[(n + c) % values.len()];
                            for sql in sqls {
                                for given_hash in [None, Some(spans_hash.as_str())] {
                                    let mut ctx: [Option<String>; 12] = Default::default();
                                    ctx[3] = client.map(str::to_string);
                                    ctx[0] = user.map(str::to_string);
                                    ctx[7] = notebook.map(str::to_string);
                                    ctx[6] = session.map(str::to_string);
                                    ctx[SQL] = sql.map(str::to_string);
                                    ctx[SQL_HASH] = given_hash.map(str::to_string);
                                    assert_eq!(
                                        matcher.first(&ctx).unwrap(),
                                        first_without_index(&rules, &ctx),
                                        "{rules:?} on {ctx:?}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
            Ok(())
        })
        .unwrap();
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
