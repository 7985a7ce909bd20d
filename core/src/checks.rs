//! Every CREATE-time check of seed 000, run over the planned queries.

use crate::catalog::{Catalog, SourceKind};
use crate::error::{Error, Result};
use crate::functions::DENIED_FUNCTIONS;
use crate::options::Definition;
use crate::planner::{self, output_schema, SOURCE_TABLE};
use crate::schema;
use arrow_schema::{DataType, Schema, SchemaRef, TimeUnit};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_expr::{Expr, LogicalPlan, Volatility, WindowFunctionDefinition};
use sqlparser::ast::{visit_expressions, visit_relations, ObjectName, Query};
use std::collections::BTreeSet;
use std::ops::ControlFlow;

/// What validation learns about a definition.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The extract query's output: the view's schema.
    pub schema: SchemaRef,
    pub schema_hash: u64,
    /// Every view set any of the three queries reads, sorted.
    pub reads: Vec<String>,
}

const EXTRACT: &str = "extract_query";
const COUNT: &str = "count_src_query";
const MERGE: &str = "merge_partitions_query";

fn queries(def: &Definition) -> [(&'static str, &str); 3] {
    [
        (EXTRACT, def.extract_query.as_str()),
        (COUNT, def.count_src_query.as_str()),
        (MERGE, def.merge_partitions_query.as_str()),
    ]
}

/// Every relation name the queries mention (a superset of what they read:
/// CTE names are included). The caller loads just these into the catalog.
pub fn referenced_relations(def: &Definition) -> Result<Vec<String>> {
    let mut names = BTreeSet::new();
    for (option, text) in queries(def) {
        let query = planner::parse_query(option, text)?;
        let _ = visit_relations(&query, |relation: &ObjectName| {
            if let Some(last) = relation.0.last() {
                if let Some(ident) = last.as_ident() {
                    let name = if ident.quote_style.is_some() {
                        ident.value.clone()
                    } else {
                        ident.value.to_lowercase()
                    };
                    if name != SOURCE_TABLE {
                        names.insert(name);
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
    Ok(names.into_iter().collect())
}

/// Runs every check; on success returns the view's schema, hash and reads.
pub fn validate(def: &Definition, catalog: &Catalog) -> Result<Validated> {
    check_placeholders(def)?;
    let mut parsed = Vec::with_capacity(3);
    for (option, text) in queries(def) {
        let query = planner::parse_query(option, text)?;
        check_denied_functions(option, &query)?;
        parsed.push(query);
    }
    let merge_query = parsed.pop().expect("three queries");
    let count_query = parsed.pop().expect("three queries");
    let extract_query = parsed.pop().expect("three queries");

    let extract = planner::plan(EXTRACT, extract_query, catalog, None)?;
    check_plan(EXTRACT, &extract)?;
    let schema = output_schema(&extract);
    check_audience(&schema)?;
    check_time_columns(def, &schema)?;
    check_sort_order(def, &schema)?;

    let merge = planner::plan(MERGE, merge_query, catalog, Some(schema.clone()))?;
    check_plan(MERGE, &merge)?;
    check_merge_schema(&schema, &output_schema(&merge))?;

    let count = planner::plan(COUNT, count_query, catalog, None)?;
    check_plan(COUNT, &count)?;
    check_count_schema(&output_schema(&count))?;

    let mut reads = BTreeSet::new();
    let mut count_reads_raw = false;
    for (option, plan) in [(EXTRACT, &extract), (MERGE, &merge), (COUNT, &count)] {
        for name in scanned_tables(plan) {
            let Some(entry) = catalog.get(&name) else {
                continue;
            };
            if option == COUNT && entry.kind != SourceKind::Raw {
                return Err(Error::definition(format!(
                    "count_src_query reads \"{name}\", which is not a raw insert_time-bearing table"
                ))
                .with_detail("The count query detects stale partitions by counting raw source rows; a materialized view has no reliable insert_time.")
                .with_hint("Count the raw table the data comes from, such as blocks."));
            }
            count_reads_raw |= option == COUNT;
            if let Some(group) = entry.update_group {
                if def.update_group <= group {
                    return Err(Error::definition(format!(
                        "update_group {} must be greater than {group}, the update_group of \"{name}\", which {option} reads",
                        def.update_group
                    ))
                    .with_detail("The daemon materializes in ascending update_group; a view must come after everything it reads.")
                    .with_hint(format!("Use an update_group of at least {}.", group as i64 + 1)));
                }
            }
            reads.insert(name);
        }
    }
    if !count_reads_raw {
        return Err(Error::definition("count_src_query reads no raw table")
            .with_hint("Count the raw table the data comes from, such as blocks."));
    }

    Ok(Validated {
        schema_hash: schema::schema_hash(&schema),
        schema,
        reads: reads.into_iter().collect(),
    })
}

fn check_placeholders(def: &Definition) -> Result<()> {
    for placeholder in ["{begin}", "{end}"] {
        if !def.count_src_query.contains(placeholder) {
            return Err(Error::definition(format!(
                "count_src_query must reference {placeholder}"
            ))
            .with_detail("The count query is run for one insert_time range, bounded by {begin} and {end}."));
        }
    }
    if !def.merge_partitions_query.contains("{source}") {
        return Err(
            Error::definition("merge_partitions_query must reference {source}")
                .with_detail("{source} stands for the set of partitions being merged."),
        );
    }
    Ok(())
}

fn check_denied_functions(option: &str, query: &Query) -> Result<()> {
    let denied = |name: &ObjectName| -> Option<String> {
        let last = name.0.last()?.as_ident()?.value.to_lowercase();
        DENIED_FUNCTIONS.contains(&last.as_str()).then_some(last)
    };
    let mut found = None;
    let _ = visit_relations(query, |relation| {
        found = denied(relation);
        if found.is_some() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    if found.is_none() {
        let _ = visit_expressions(query, |expr| {
            if let sqlparser::ast::Expr::Function(f) = expr {
                found = denied(&f.name);
            }
            if found.is_some() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
    }
    match found {
        Some(name) => Err(Error::definition(format!("{option} calls {name}(), which a definition may not call"))
            .with_detail("Mutating admin functions and per-instance table functions would be re-run on every daemon tick.")),
        None => Ok(()),
    }
}

/// No DDL, DML or statement node anywhere, and only immutable functions.
fn check_plan(option: &str, plan: &LogicalPlan) -> Result<()> {
    let mut problem: Option<Error> = None;
    let _ = plan.apply_with_subqueries(|node| {
        if matches!(
            node,
            LogicalPlan::Dml(_)
                | LogicalPlan::Ddl(_)
                | LogicalPlan::Copy(_)
                | LogicalPlan::Statement(_)
                | LogicalPlan::Explain(_)
                | LogicalPlan::Analyze(_)
                | LogicalPlan::DescribeTable(_)
        ) {
            problem = Some(Error::definition(format!(
                "{option} must be a read-only query, not {}",
                node.display()
            )));
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Some((name, volatility)) = function_volatility(e) {
                    if volatility != Volatility::Immutable {
                        let kind = match volatility {
                            Volatility::Stable => "stable",
                            _ => "volatile",
                        };
                        problem = Some(
                            Error::definition(format!(
                                "{option} calls {name}(), which is not immutable"
                            ))
                            .with_detail(format!(
                                "{name}() is {kind}: its result would be frozen into a partition instead of being recomputed."
                            )),
                        );
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    match problem {
        Some(e) => Err(e),
        None => Ok(()),
    }
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

fn scanned_tables(plan: &LogicalPlan) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let name = scan.table_name.table().to_string();
            if name != SOURCE_TABLE {
                names.insert(name);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names
}

pub fn is_string_type(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, value) => is_string_type(value),
        _ => false,
    }
}

fn check_audience(schema: &Schema) -> Result<()> {
    let ok = schema.fields().iter().any(|f| {
        (f.name() == "audience" || f.name() == "process_id") && is_string_type(f.data_type())
    });
    if ok {
        return Ok(());
    }
    let found: Vec<String> = schema
        .fields()
        .iter()
        .filter(|f| f.name() == "audience" || f.name() == "process_id")
        .map(|f| format!("\"{}\" is {}", f.name(), f.data_type()))
        .collect();
    let detail = if found.is_empty() {
        "Without one, the view would serve every row to every caller.".to_string()
    } else {
        format!(
            "{}; a string type (Utf8, LargeUtf8, Utf8View or a dictionary of one) is needed.",
            found.join(", ")
        )
    };
    Err(Error::definition(
        "extract_query output has no \"audience\" or \"process_id\" column of a string type",
    )
    .with_detail(detail)
    .with_hint("Non-admin queries are filtered by audience; select audience or process_id."))
}

fn check_time_columns(def: &Definition, schema: &Schema) -> Result<()> {
    let o = &def.options;
    for (option, column) in [
        ("min_time_column", &o.min_time_column),
        ("max_time_column", &o.max_time_column),
    ] {
        let Ok(field) = schema.field_with_name(column) else {
            return Err(Error::definition(format!(
                "time column \"{column}\" ({option}) is not in the extract_query output"
            ))
            .with_detail(format!(
                "The extract_query output columns are: {}.",
                column_list(schema)
            )));
        };
        if !matches!(
            field.data_type(),
            DataType::Timestamp(TimeUnit::Nanosecond, _)
        ) {
            return Err(Error::definition(format!(
                "time column \"{column}\" ({option}) must be a nanosecond timestamp, not {}",
                field.data_type()
            ))
            .with_hint("Cast it, e.g. arrow_cast(x, 'Timestamp(Nanosecond, Some(\"+00:00\"))')."));
        }
    }
    Ok(())
}

fn check_sort_order(def: &Definition, schema: &Schema) -> Result<()> {
    for column in def.options.merge_sort_order.iter().flatten() {
        if schema.field_with_name(column).is_err() {
            return Err(Error::definition(format!(
                "merge_sort_order column \"{column}\" is not in the extract_query output"
            ))
            .with_detail(format!(
                "The extract_query output columns are: {}.",
                column_list(schema)
            )));
        }
    }
    Ok(())
}

fn check_merge_schema(extract: &Schema, merge: &Schema) -> Result<()> {
    let mismatch = |detail: String| {
        Err(Error::definition(
            "merge_partitions_query output does not match the extract_query schema",
        )
        .with_detail(detail)
        .with_hint(
            "The merge output must have the extract output's column names, types and order.",
        ))
    };
    for (i, (e, m)) in extract
        .fields()
        .iter()
        .zip(merge.fields().iter())
        .enumerate()
    {
        if e.name() != m.name() || e.data_type() != m.data_type() {
            return mismatch(format!(
                "column {}: extract_query has \"{}\" {}, merge_partitions_query has \"{}\" {}",
                i + 1,
                e.name(),
                e.data_type(),
                m.name(),
                m.data_type()
            ));
        }
    }
    if extract.fields().len() != merge.fields().len() {
        let (longer, which, n) = if extract.fields().len() > merge.fields().len() {
            (extract, "extract_query", merge.fields().len())
        } else {
            (merge, "merge_partitions_query", extract.fields().len())
        };
        let f = longer.field(n);
        return mismatch(format!(
            "column {}: only {which} has a column there (\"{}\" {}); extract_query has {} columns, merge_partitions_query has {}",
            n + 1,
            f.name(),
            f.data_type(),
            extract.fields().len(),
            merge.fields().len()
        ));
    }
    Ok(())
}

fn check_count_schema(schema: &Schema) -> Result<()> {
    let fields = schema.fields();
    if fields.len() != 1 || fields[0].name() != "count" {
        return Err(Error::definition(format!(
            "count_src_query must produce exactly one column named \"count\", not ({})",
            column_list(schema)
        ))
        .with_hint("For example: SELECT sum(nb_objects) AS count FROM blocks WHERE …"));
    }
    if !fields[0].data_type().is_integer() {
        return Err(Error::definition(format!(
            "count_src_query column \"count\" must be of an integer type, not {}",
            fields[0].data_type()
        )));
    }
    Ok(())
}

fn column_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}
