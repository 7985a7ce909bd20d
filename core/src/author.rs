//! The author obligations micromegas lists as "not enforced, but easy to get
//! wrong", found on the planned queries: each a [`Finding`] that the caller
//! raises as a warning (or, by setting, refuses). Precision before recall:
//! a shape a check cannot judge for certain (a column it cannot trace to a
//! table, an aggregate hidden in an expression it does not read) stays
//! silent.

use crate::catalog::{Catalog, SourceKind};
use crate::planner::{BEGIN_VALUE, END_VALUE};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{Column, ScalarValue};
use datafusion_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A merge aggregate that does not compose over already-aggregated rows.
pub const NON_COMPOSABLE_MERGE: &str = "non_composable_merge";
/// An extract without a range filter that counts or sums raw rows.
pub const DOUBLE_COUNT_WITHOUT_RANGE: &str = "double_count_without_range";
/// `{begin}`/`{end}` bounding the wrong column of what the extract reads.
pub const RANGE_FILTER_COLUMN: &str = "range_filter_column";

/// One unmet obligation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The check's stable name.
    pub check: &'static str,
    /// The SQLSTATE of the warning (class 01); the refusal under
    /// `author_checks = error` is the same code in class 42.
    pub sqlstate: &'static str,
    pub message: String,
    pub hint: String,
}

fn finding(check: &'static str, message: String, hint: String) -> Finding {
    let sqlstate = match check {
        NON_COMPOSABLE_MERGE => "01M01",
        DOUBLE_COUNT_WITHOUT_RANGE => "01M02",
        _ => "01M03",
    };
    Finding {
        check,
        sqlstate,
        message,
        hint,
    }
}

/// Every finding for a definition whose extract and merge queries planned
/// to `extract` and `merge` against `catalog`.
pub fn findings(extract: &LogicalPlan, merge: &LogicalPlan, catalog: &Catalog) -> Vec<Finding> {
    let mut out = non_composable_merge(merge);
    let ranges = range_bounds(extract);
    if ranges.is_empty() && !mentions_placeholder(extract) && reads_only_ingested(extract, catalog)
    {
        out.extend(double_count_without_range(extract));
    }
    out.extend(range_filter_column(&ranges, catalog));
    out
}

/// An aggregate call as the plan has it.
struct Aggregate {
    /// The function's name, lower case (`count`, `avg`, …).
    function: String,
    distinct: bool,
    /// Its text, e.g. `count(*)`.
    text: String,
    /// The output column it becomes, when a projection names it directly.
    column: Option<String>,
}

/// The columns the query's output is computed from: those the top
/// projection (under any sort, limit or distinct) refers to. `None` when
/// the plan has no such projection (the caller then stays silent).
fn output_inputs(plan: &LogicalPlan) -> Option<BTreeSet<String>> {
    let mut node = plan;
    loop {
        match node {
            LogicalPlan::Projection(p) => {
                let mut names = BTreeSet::new();
                for e in &p.expr {
                    let _ = e.apply(|x| {
                        if let Expr::Column(c) = x {
                            names.insert(c.name.clone());
                        }
                        Ok(TreeNodeRecursion::Continue)
                    });
                }
                return Some(names);
            }
            LogicalPlan::Sort(_) | LogicalPlan::Limit(_) | LogicalPlan::Distinct(_) => {
                node = node.inputs().into_iter().next()?;
            }
            _ => return None,
        }
    }
}

/// The aggregate calls whose results the query outputs (an aggregate used
/// only in HAVING, or inside a subquery of a filter, is left out).
fn aggregates(plan: &LogicalPlan) -> Vec<Aggregate> {
    let Some(output) = output_inputs(plan) else {
        return Vec::new();
    };
    // Output names: a projection's `<aggregate column> AS name`.
    let mut names: HashMap<String, String> = HashMap::new();
    let mut found = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Projection(p) => {
                for e in &p.expr {
                    match e {
                        Expr::Alias(a) => {
                            // `count(Int64(1)) AS count(*) AS count`
                            let mut inner = a.expr.as_ref();
                            while let Expr::Alias(next) = inner {
                                inner = next.expr.as_ref();
                            }
                            if let Expr::Column(c) = inner {
                                names.insert(c.name.clone(), a.name.clone());
                            }
                        }
                        Expr::Column(c) => {
                            names
                                .entry(c.name.clone())
                                .or_insert_with(|| c.name.clone());
                        }
                        _ => {}
                    }
                }
            }
            LogicalPlan::Aggregate(a) => {
                for e in &a.aggr_expr {
                    let inner = match e {
                        Expr::Alias(alias) => alias.expr.as_ref(),
                        other => other,
                    };
                    if let Expr::AggregateFunction(f) = inner {
                        found.push((
                            f.func.name().to_lowercase(),
                            f.params.distinct,
                            e.schema_name().to_string(),
                            inner.to_string(),
                        ));
                    }
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
        .into_iter()
        .filter(|(_, _, schema_name, _)| output.contains(schema_name))
        .map(|(function, distinct, schema_name, text)| Aggregate {
            column: names.get(&schema_name).cloned(),
            function,
            distinct,
            text: readable(&text),
        })
        .collect()
}

/// DataFusion's text of a call, closer to what was written: `count(*)`
/// for the count of rows, no table qualifiers, and no `Int64(…)`/`Utf8(…)`
/// literal wrappers.
fn readable(text: &str) -> String {
    let text = unqualified(&text.replace("count(Int64(1))", "count(*)"));
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find(|c: char| c.is_ascii_uppercase()) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let word_end = tail
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(tail.len());
        let (word, after) = tail.split_at(word_end);
        let literal = [
            "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32",
            "Float64", "Utf8", "Boolean",
        ]
        .contains(&word);
        if literal && after.starts_with("(\"") {
            // a string literal: up to its closing quote and parenthesis
            if let Some(close) = after.find("\")") {
                out.push('\'');
                out.push_str(&after[2..close]);
                out.push('\'');
                rest = &after[close + 2..];
                continue;
            }
        } else if literal && after.starts_with('(') {
            if let Some(close) = after.find(')') {
                out.push_str(&after[1..close]);
                rest = &after[close + 1..];
                continue;
            }
        }
        out.push_str(word);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `t.c` becomes `c` (outside string literals).
fn unqualified(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let mut quoted = false;
    for ch in text.chars() {
        if ch == '\'' || ch == '"' {
            quoted = !quoted;
        }
        if !quoted && (ch.is_ascii_alphanumeric() || ch == '_') {
            word.push(ch);
            continue;
        }
        if !quoted && ch == '.' && word.chars().next().is_some_and(|c| !c.is_ascii_digit()) {
            word.clear();
            continue;
        }
        out.push_str(&word);
        word.clear();
        out.push(ch);
    }
    out.push_str(&word);
    out
}

fn column_note(a: &Aggregate) -> String {
    match &a.column {
        Some(c) => format!(" (column \"{c}\")"),
        None => String::new(),
    }
}

/// The merge query runs over partitions that are already aggregated, and
/// over partitions it merged itself: only aggregates whose result over
/// results equals the result over the rows compose.
fn non_composable_merge(merge: &LogicalPlan) -> Vec<Finding> {
    const OTHER: &[&str] = &[
        "median",
        "approx_median",
        "approx_distinct",
        "approx_percentile_cont",
        "approx_percentile_cont_with_weight",
        "percentile_cont",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "var",
        "var_pop",
        "var_samp",
        "var_population",
        "var_sample",
    ];
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for a in aggregates(merge) {
        if !seen.insert(a.text.clone()) {
            continue;
        }
        let order_only = matches!(
            a.function.as_str(),
            "min" | "max" | "bool_and" | "bool_or" | "first_value" | "last_value"
        );
        let (why, hint) = if a.distinct && !order_only {
            (
                format!("{} does not compose: the distinct values of several partitions overlap", a.function),
                "Keep the distinct values at the extract's grain (GROUP BY them) and count when reading, or use approx_distinct's sketch outside the view.".to_string(),
            )
        } else if a.function == "count" {
            (
                "it counts partition rows, not the rows they summarize".to_string(),
                match &a.column {
                    Some(c) => {
                        format!("Sum the count the extract query computes: sum({c}) AS {c}.")
                    }
                    None => "Sum the count the extract query computes, e.g. sum(count) AS count."
                        .to_string(),
                },
            )
        } else if a.function == "avg" || a.function == "mean" {
            (
                "an average of averages weighs every partition alike, whatever it summarizes".to_string(),
                "Carry a sum and a count through extract and merge (sum(total), sum(count)) and divide when reading.".to_string(),
            )
        } else if OTHER.contains(&a.function.as_str()) {
            (
                format!("{} does not compose: merging merged partitions changes the result", a.function),
                "Keep its inputs at the extract's grain, or compute it when reading (sum, min, max, bool_and and bool_or compose).".to_string(),
            )
        } else {
            continue;
        };
        out.push(finding(
            NON_COMPOSABLE_MERGE,
            format!(
                "merge_partitions_query computes {}{} over partitions that are already aggregated: {why}",
                a.text,
                column_note(&a)
            ),
            hint,
        ));
    }
    out
}

/// Whether every table the plan scans is ingested data (a built-in view set
/// with an insert_time): over a view materialized here, whose rows are
/// already aggregated, the check stays silent.
fn reads_only_ingested(plan: &LogicalPlan, catalog: &Catalog) -> bool {
    let mut ingested = true;
    let mut any = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            any = true;
            ingested &= catalog.get(scan.table_name.table()).is_some_and(|e| {
                matches!(e.kind, SourceKind::Raw | SourceKind::Materialized)
                    && e.schema.field_with_name("insert_time").is_ok()
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    any && ingested
}

/// Without a range filter the extract may be run over a wider partition in
/// full: only aggregates that extra rows do not change are safe there.
fn double_count_without_range(extract: &LogicalPlan) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for a in aggregates(extract) {
        if !matches!(a.function.as_str(), "count" | "sum" | "avg" | "mean")
            || !seen.insert(a.text.clone())
        {
            continue;
        }
        out.push(finding(
            DOUBLE_COUNT_WITHOUT_RANGE,
            format!(
                "extract_query computes {}{} without a range filter on {{begin}}/{{end}}: a partition built over a wider range counts rows another partition already counted",
                a.text,
                column_note(&a)
            ),
            "Filter what it reads on insert_time (WHERE insert_time >= '{begin}' AND insert_time < '{end}'), or aggregate only with functions extra rows do not change (min, max).".to_string(),
        ));
    }
    out
}

fn is_placeholder(e: &Expr) -> bool {
    match e {
        Expr::Literal(ScalarValue::Utf8(Some(t)), _)
        | Expr::Literal(ScalarValue::Utf8View(Some(t)), _)
        | Expr::Literal(ScalarValue::LargeUtf8(Some(t)), _) => t == BEGIN_VALUE || t == END_VALUE,
        _ => false,
    }
}

fn contains_placeholder(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.apply(|x| {
        found |= is_placeholder(x);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// Whether `{begin}` or `{end}` reaches the plan anywhere.
fn mentions_placeholder(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            found |= contains_placeholder(e);
            Ok(TreeNodeRecursion::Continue)
        })
    });
    found
}

/// The column under casts, if that is all there is.
fn bare_column(mut e: &Expr) -> Option<&Column> {
    loop {
        match e {
            Expr::Column(c) => return Some(c),
            Expr::Cast(c) => e = c.expr.as_ref(),
            Expr::TryCast(c) => e = c.expr.as_ref(),
            _ => return None,
        }
    }
}

/// Every column compared with `{begin}` or `{end}`, as the table it belongs
/// to and its name (columns that cannot be traced to a table are left out).
fn range_bounds(plan: &LogicalPlan) -> BTreeSet<(String, String)> {
    // Qualifiers in scope: a table's own name and its alias.
    let mut tables: HashMap<String, String> = HashMap::new();
    let mut compared: Vec<Column> = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(scan) => {
                let name = scan.table_name.table().to_string();
                tables.insert(name.clone(), name);
            }
            LogicalPlan::SubqueryAlias(sa) => {
                if let LogicalPlan::TableScan(scan) = sa.input.as_ref() {
                    tables.insert(
                        sa.alias.table().to_string(),
                        scan.table_name.table().to_string(),
                    );
                }
            }
            _ => {}
        }
        node.apply_expressions(|e| {
            e.apply(|x| {
                match x {
                    Expr::BinaryExpr(BinaryExpr { left, op, right })
                        if matches!(
                            op,
                            Operator::Gt
                                | Operator::GtEq
                                | Operator::Lt
                                | Operator::LtEq
                                | Operator::Eq
                        ) =>
                    {
                        if contains_placeholder(right) {
                            compared.extend(bare_column(left).cloned());
                        }
                        if contains_placeholder(left) {
                            compared.extend(bare_column(right).cloned());
                        }
                    }
                    Expr::Between(b)
                        if contains_placeholder(&b.low) || contains_placeholder(&b.high) =>
                    {
                        compared.extend(bare_column(&b.expr).cloned());
                    }
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    compared
        .into_iter()
        .filter_map(|c| {
            let qualifier = c.relation.as_ref()?.table().to_string();
            let table = tables.get(&qualifier)?.clone();
            Some((table, c.name))
        })
        .collect()
}

/// `{begin}`/`{end}` bound when a row arrived in ingested data (its
/// insert_time), and the time column of a view materialized here.
fn range_filter_column(ranges: &BTreeSet<(String, String)>, catalog: &Catalog) -> Vec<Finding> {
    let mut by_table: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (table, column) in ranges {
        by_table.entry(table).or_default().insert(column);
    }
    let ingested = |table: &str| {
        catalog.get(table).is_some_and(|e| {
            matches!(e.kind, SourceKind::Raw | SourceKind::Materialized)
                && e.schema.field_with_name("insert_time").is_ok()
        })
    };
    // One ingested source bounded on its insert_time: the query's range is
    // right, and bounds on other tables (a dimension joined in) are the
    // author's business.
    if by_table
        .iter()
        .any(|(table, columns)| ingested(table) && columns.contains("insert_time"))
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (table, columns) in by_table {
        if !ingested(table) {
            // A view defined here: whether a column is its time column is
            // not known here; silent.
            continue;
        }
        for column in columns {
            out.push(finding(
                RANGE_FILTER_COLUMN,
                format!("extract_query bounds {table}.{column} by {{begin}}/{{end}}, but {table} is ingested data: its range is insert_time, when a row arrived"),
                format!("Filter {table} on insert_time >= '{{begin}}' AND insert_time < '{{end}}': rows that arrive late for an earlier {column} are otherwise never materialized."),
            ));
        }
    }
    out
}
