//! Every CREATE-time check micromegas makes of a view set, run over the planned queries.

use crate::author::{self, Finding};
use crate::catalog::{Catalog, SourceKind};
use crate::error::{Error, Result};
use crate::functions::DENIED_FUNCTIONS;
use crate::isolate;
use crate::options::Definition;
use crate::planner::{self, output_schema, SOURCE_TABLE};
use crate::schema;
use arrow_schema::{DataType, Schema, SchemaRef, TimeUnit};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::ScalarValue;
use datafusion_expr::{Expr, ExprSchemable, LogicalPlan};
use std::sync::Arc;
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
    /// The author obligations it does not meet (warnings by default).
    pub findings: Vec<Finding>,
}

const EXTRACT: &str = "extract_query";
const COUNT: &str = "count_src_query";
const MERGE: &str = "merge_partitions_query";

/// The three queries of `def` with their option names, in option order.
pub(crate) fn queries(def: &Definition) -> [(&'static str, &str); 3] {
    [
        (EXTRACT, def.extract_query.as_str()),
        (COUNT, def.count_src_query.as_str()),
        (MERGE, def.merge_partitions_query.as_str()),
    ]
}

/// The three queries of a definition, parsed and screened for denied
/// functions, in option order (extract, count, merge).
#[derive(Debug, Clone)]
pub struct ParsedQueries(pub [Box<Query>; 3]);

/// Parses the three queries of `def`.
pub fn parse_queries(def: &Definition) -> Result<ParsedQueries> {
    let mut parsed = Vec::with_capacity(3);
    for (option, text) in queries(def) {
        isolate::set_phase(option);
        isolate::checkpoint()?;
        let query = planner::parse_query(option, text)?;
        check_denied_functions(option, &query)?;
        parsed.push(query);
    }
    let parsed: [Box<Query>; 3] = parsed.try_into().expect("three queries");
    Ok(ParsedQueries(parsed))
}

/// Every relation name the queries mention (a superset of what they read:
/// CTE names are included). The caller loads just these into the catalog.
pub fn mentioned_relations(parsed: &ParsedQueries) -> Vec<String> {
    let mut names = BTreeSet::new();
    for query in &parsed.0 {
        let _ = visit_relations(query, |relation: &ObjectName| {
            if let Some(last) = relation.0.last() {
                if let Some(ident) = last.as_ident() {
                    let name = crate::catalog::normalized_name(ident);
                    if name != SOURCE_TABLE {
                        names.insert(name);
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
    names.into_iter().collect()
}

/// [`mentioned_relations`] of a definition's text.
pub fn referenced_relations(def: &Definition) -> Result<Vec<String>> {
    Ok(mentioned_relations(&parse_queries(def)?))
}

/// Runs every check; on success returns the view's schema, hash and reads.
pub fn validate(def: &Definition, catalog: &Catalog) -> Result<Validated> {
    validate_parsed(def, parse_queries(def)?, catalog)
}

/// [`validate`] with the queries already parsed by [`parse_queries`].
pub fn validate_parsed(
    def: &Definition,
    parsed: ParsedQueries,
    catalog: &Catalog,
) -> Result<Validated> {
    let [extract_query, count_query, merge_query] = parsed.0;

    let (extract, extract_resolved) = planner::plan_resolving(EXTRACT, extract_query, catalog, None)?;
    check_plan(EXTRACT, &extract)?;
    let schema = output_schema(&extract);
    check_audience(&schema)?;
    check_time_columns(def, &schema)?;
    check_sort_order(def, &schema)?;

    let (merge, merge_resolved) =
        planner::plan_resolving(MERGE, merge_query, catalog, Some(schema.clone()))?;
    check_plan(MERGE, &merge)?;
    check_merge_reads_source(&merge)?;
    check_merge_schema(&schema, &output_schema(&merge))?;

    let (count, count_resolved) = planner::plan_resolving(COUNT, count_query, catalog, None)?;
    check_plan(COUNT, &count)?;
    check_count_placeholders(&count)?;
    check_count_schema(&output_schema(&count))?;
    // What follows (the reads, the author checks) belongs to no one query.
    isolate::set_phase("validation");
    isolate::checkpoint()?;

    // What a query reads is every view set its planning resolved, in a
    // CTE it never uses too: DataFusion plans every CTE, so each must exist
    // (the dependency guard keeps it) and come earlier in the order. The
    // count must also scan raw block metadata in its final plan.
    let mut reads = BTreeSet::new();
    let mut count_reads_raw = false;
    for (option, plan, resolved) in [
        (EXTRACT, &extract, extract_resolved),
        (MERGE, &merge, merge_resolved),
        (COUNT, &count, count_resolved),
    ] {
        let scanned = scanned_tables(plan);
        for name in resolved.into_iter().chain(scanned.iter().cloned()) {
            let Some(entry) = catalog.get(&name) else {
                continue;
            };
            if option == COUNT && entry.kind != SourceKind::Raw {
                return Err(not_raw_count_source(&name));
            }
            count_reads_raw |= option == COUNT && scanned.contains(&name);
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
        return Err(
            Error::definition("count_src_query reads no raw block metadata")
                .with_detail(COUNT_RULE)
                .with_hint(COUNT_HINT),
        );
    }

    let findings = author::findings(&extract, &merge, catalog);
    Ok(Validated {
        schema_hash: schema::schema_hash(&schema),
        schema,
        reads: reads.into_iter().collect(),
        findings,
    })
}

const COUNT_RULE: &str = "The daemon decides that a partition is stale when this count differs from the one it recorded when it materialized the partition, so the count must read the raw block metadata that ingestion appends to (such as blocks), whose rows for an insert_time range change exactly when new data arrives.";
const COUNT_HINT: &str = "For example: SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'";

fn not_raw_count_source(name: &str) -> Error {
    Error::definition(format!(
        "count_src_query reads \"{name}\", which is not raw block metadata"
    ))
    .with_detail(format!(
        "\"{name}\" is a view set derived from the ingested blocks, not the block metadata itself. {COUNT_RULE}"
    ))
    .with_hint(COUNT_HINT)
}

/// `{source}` must stand for a table the merge query really scans (not a
/// comment or a string).
fn check_merge_reads_source(plan: &LogicalPlan) -> Result<()> {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            found |= scan.table_name.table() == SOURCE_TABLE;
        }
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    if found {
        return Ok(());
    }
    Err(Error::definition("merge_partitions_query must read {source}")
        .with_detail("{source} stands for the set of partitions being merged; the query must scan it (FROM {source}), not just mention it.")
        .with_hint("For example: SELECT … FROM {source} GROUP BY …"))
}

/// `{begin}` and `{end}` must each reach the count query's plan as a value
/// (not sit in a comment or inside an unrelated string).
fn check_count_placeholders(plan: &LogicalPlan) -> Result<()> {
    let mut seen_begin = false;
    let mut seen_end = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::Literal(ScalarValue::Utf8(Some(text)), _) = e {
                    seen_begin |= text == planner::BEGIN_VALUE;
                    seen_end |= text == planner::END_VALUE;
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    for (placeholder, seen) in [("{begin}", seen_begin), ("{end}", seen_end)] {
        if !seen {
            return Err(Error::definition(format!(
                "count_src_query must use {placeholder}"
            ))
            .with_detail("The count query is run for one insert_time range, bounded by {begin} and {end}; each must be a value the query uses, e.g. insert_time >= '{begin}', not text in a comment or inside another string.")
            .with_hint(COUNT_HINT));
        }
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
        let inputs = node.inputs();
        node.apply_expressions(|expr| {
            problem = planner::volatility_problem(option, expr)
                .or_else(|| constant_problem(option, expr, &inputs));
            Ok(if problem.is_some() {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })
    });
    match problem {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A string constant the query gives where a function (or a CAST) wants
/// another type, and that does not convert: `date_bin('1 fortnight', t)`.
/// DataFusion converts such a constant only when the query runs; a
/// definition would fail at its first materialization, so it is refused
/// here, naming the constant and the type.
fn constant_problem(option: &str, expr: &Expr, inputs: &[&LogicalPlan]) -> Option<Error> {
    fn text(e: &Expr) -> Option<&str> {
        match e {
            Expr::Literal(
                ScalarValue::Utf8(Some(s))
                | ScalarValue::LargeUtf8(Some(s))
                | ScalarValue::Utf8View(Some(s)),
                _,
            ) => Some(s),
            _ => None,
        }
    }
    let converts = |value: &str, to: &DataType| match to {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => None,
        _ => ScalarValue::Utf8(Some(value.to_string()))
            .cast_to(to)
            .err()
            .map(|e| planner::df_message(&e)),
    };
    let mut problem = None;
    let _ = expr.apply(|e| {
        let found = match e {
            Expr::Cast(c) => text(&c.expr).and_then(|v| {
                converts(v, c.field.data_type()).map(|why| (v.to_string(), c.field.data_type().clone(), None, why))
            }),
            Expr::ScalarFunction(f)
                if f.args.iter().any(|a| matches!(a, Expr::Cast(c) if text(&c.expr).is_some())) =>
            {
                // The planner cast the constant for the function already.
                f.args.iter().find_map(|a| match a {
                    Expr::Cast(c) => text(&c.expr).and_then(|v| {
                        converts(v, c.field.data_type()).map(|why| {
                            (v.to_string(), c.field.data_type().clone(), Some(f.func.name().to_string()), why)
                        })
                    }),
                    _ => None,
                })
            }
            Expr::ScalarFunction(f) if f.args.iter().any(|a| text(a).is_some()) => {
                let schema = inputs.iter().map(|p| p.schema().as_ref().clone()).reduce(|mut a, b| {
                    a.merge(&b);
                    a
                });
                let types: Option<Vec<DataType>> = f
                    .args
                    .iter()
                    .map(|a| match (a, schema.as_ref()) {
                        (Expr::Literal(v, _), _) => Some(v.data_type()),
                        (_, Some(schema)) => a.get_type(schema).ok(),
                        (_, None) => None,
                    })
                    .collect();
                types
                    .and_then(|types| {
                        let fields: Vec<_> = types
                            .into_iter()
                            .map(|t| Arc::new(arrow_schema::Field::new("a", t, true)))
                            .collect();
                        datafusion_expr::type_coercion::functions::fields_with_udf(&fields, f.func.as_ref()).ok()
                    })
                    .map(|fields| fields.iter().map(|f| f.data_type().clone()).collect::<Vec<_>>())
                    .and_then(|wanted| {
                        f.args.iter().zip(wanted).find_map(|(a, to)| {
                            let v = text(a)?;
                            converts(v, &to).map(|why| (v.to_string(), to, Some(f.func.name().to_string()), why))
                        })
                    })
            }
            _ => None,
        };
        if let Some((value, to, function, why)) = found {
            let place = match function {
                Some(name) => format!("as an argument of {name}()"),
                None => "in a CAST".to_string(),
            };
            let error = Error::definition(format!("{option}: '{value}' {place} is not a valid {to}"));
            problem = Some(if value.starts_with('{') && value.ends_with('}') {
                error
                    .with_detail(format!("{value} is not a placeholder: the services substitute only {{begin}}, {{end}} and {{source}}."))
                    .with_hint("Write '{begin}' or '{end}' for the bounds of the range materialized.")
            } else {
                let example = match to {
                    DataType::Interval(_) => "e.g. '1 hour' or '30 minutes'",
                    DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
                        "e.g. '2024-01-01T00:00:00Z', or '{begin}' and '{end}' for the range materialized"
                    }
                    _ => "of that type",
                };
                error.with_detail(why).with_hint(format!(
                    "DataFusion would refuse it only when the view is materialized; write a constant it reads, {example}."
                ))
            });
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    problem
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

/// The audience column's accepted types, as micromegas' registry checks
/// them: `Utf8`, or a dictionary of `Utf8` with any key type.
pub fn is_audience_type(t: &DataType) -> bool {
    match t {
        DataType::Utf8 => true,
        DataType::Dictionary(_, value) => value.as_ref() == &DataType::Utf8,
        _ => false,
    }
}

/// The column that filters rows for non-admin callers: `audience` when the
/// output has it, else `process_id`; it must be `Utf8` or `Dictionary(_, Utf8)`.
fn check_audience(schema: &Schema) -> Result<()> {
    let column = ["audience", "process_id"]
        .into_iter()
        .find_map(|name| schema.field_with_name(name).ok());
    let Some(field) = column else {
        return Err(Error::definition(
            "extract_query output has no \"audience\" or \"process_id\" column",
        )
        .with_detail("Without one, the view would serve every row to every caller.")
        .with_hint("Non-admin queries are filtered by audience; select audience or process_id."));
    };
    if is_audience_type(field.data_type()) {
        return Ok(());
    }
    let decides = if field.name() == "audience" {
        "\"audience\" is present, so it decides who may read each row"
    } else {
        "without an \"audience\" column, \"process_id\" decides who may read each row"
    };
    Err(Error::definition(format!(
        "extract_query column \"{}\" must be Utf8 or Dictionary(_, Utf8), not {}",
        field.name(),
        field.data_type()
    ))
    .with_detail(format!(
        "{decides}; micromegas accepts only Utf8 or a dictionary of Utf8 there."
    ))
    .with_hint(format!(
        "Cast it, e.g. arrow_cast({}, 'Dictionary(Int32, Utf8)').",
        field.name()
    )))
}

fn check_time_columns(def: &Definition, schema: &Schema) -> Result<()> {
    let o = &def.options;
    // One column given as time_column is named by that option.
    let (min, max) = if o.min_time_column == o.max_time_column {
        ("time_column", "time_column")
    } else {
        ("min_time_column", "max_time_column")
    };
    for (option, column) in [(min, &o.min_time_column), (max, &o.max_time_column)] {
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
    if fields[0].data_type() != &DataType::Int64 {
        return Err(Error::definition(format!(
            "count_src_query column \"count\" must be Int64, not {}",
            fields[0].data_type()
        ))
        .with_detail("The daemon reads the count as an Int64.")
        .with_hint(
            "sum(nb_objects) and count(*) are Int64; cast other types, e.g. CAST(x AS BIGINT).",
        ));
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
