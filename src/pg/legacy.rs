//! The Rust functions of released install scripts that the current one no
//! longer declares (0.1.3; `_mm_prepare_definition`'s 0.1.6–0.1.8 symbol,
//! `_mm_check_definition_with`, replaced in 0.1.9, and
//! `_mm_recheck_definition`, replaced in 0.1.11). A released script (the
//! upgrade test's fixtures, sql-tests/upgrade/releases/) names their symbols
//! (`AS 'MODULE_PATHNAME', '…_wrapper'`), and it must still install and work
//! against this library: the upgrade test creates each old version, writes
//! definitions with it, then runs ALTER EXTENSION UPDATE. So they keep their
//! exact signatures and behaviour, with no SQL object of their own
//! (`sql = false`): each is a thin adapter over the same core steps the
//! current functions use.

use super::errors::OrRaise;
use super::helper::run_isolated;
use micromegas_views_core::options::{check_name, NameUse, OptionValues};
use micromegas_views_core::prepare;
use super::api::{definition_columns, overrides_from, prepare_row, recheck, row_input, stored_row};
use micromegas_views_core::{checks, ddl, schema, Catalog, Definition, Error, Result, Statement};
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::{json, Value};

fn definition_value(d: &Definition) -> Value {
    serde_json::to_value(d).expect("definitions serialize")
}

fn definition_from_value(value: Value) -> Result<Definition> {
    serde_json::from_value(value)
        .map_err(|e| Error::internal("malformed definition").with_detail(e.to_string()))
}

#[pg_extern(sql = false, immutable, parallel_safe)]
fn parse_statement(statement: &str) -> JsonB {
    JsonB(
        run_isolated(statement.to_owned(), |statement| match ddl::parse(&statement)? {
            Statement::Create(create) => {
                let definition = Definition::from_statement(&create)?;
                Ok(json!({
                    "kind": "create",
                    "or_replace": create.or_replace,
                    "name": definition.name,
                    "definition": definition_value(&definition),
                }))
            }
            Statement::Drop(drop) => {
                check_name(&drop.name, NameUse::Reference)?;
                Ok(json!({"kind": "drop", "if_exists": drop.if_exists, "name": drop.name}))
            }
        })
        .or_raise(),
    )
}

#[pg_extern(sql = false, immutable, parallel_safe)]
fn definition_from_row(
    view_set_name: Option<String>,
    definition_sql: Option<String>,
    extract_query: Option<String>,
    count_src_query: Option<String>,
    merge_partitions_query: Option<String>,
    update_group: Option<i32>,
    view_options: Option<JsonB>,
) -> JsonB {
    let row = row_input(
        view_set_name,
        definition_sql,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        view_options,
    );
    JsonB(
        run_isolated(row, |row| {
            Ok(definition_value(&prepare::derive(row)?.definition))
        })
        .or_raise(),
    )
}

#[pg_extern(sql = false, immutable, parallel_safe)]
#[allow(clippy::too_many_arguments)]
fn render_create(
    name: String,
    extract_query: Option<String>,
    count_src_query: Option<String>,
    merge_partitions_query: Option<String>,
    update_group: Option<i32>,
    time_column: Option<String>,
    min_time_column: Option<String>,
    max_time_column: Option<String>,
    source_partition_delta: Option<String>,
    merge_partition_delta: Option<String>,
    merge_sort_order: Option<String>,
    or_replace: bool,
) -> String {
    let values = [
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group.map(|g| g.to_string()),
        time_column,
        min_time_column,
        max_time_column,
        source_partition_delta,
        merge_partition_delta,
        merge_sort_order,
    ];
    run_isolated((name, values, or_replace), |(name, values, or_replace)| {
        Ok(OptionValues::from_positional(values)
            .into_definition(&name)?
            .render(or_replace))
    })
    .or_raise()
}

#[pg_extern(sql = false, immutable, parallel_safe)]
fn referenced_relations(definition: JsonB) -> Vec<String> {
    run_isolated(definition.0, |definition| {
        checks::referenced_relations(&definition_from_value(definition)?)
    })
    .or_raise()
}

#[pg_extern(sql = false, immutable, parallel_safe)]
fn validate(definition: JsonB, catalog: JsonB) -> JsonB {
    JsonB(
        run_isolated((definition.0, catalog.0), |(definition, catalog)| {
            let definition = definition_from_value(definition)?;
            let catalog = Catalog::from_json(&catalog)?;
            let validated = checks::validate(&definition, &catalog)?;
            Ok(json!({
                "view_options": definition.view_options_json(),
                "definition_sql": definition.render(false),
                "schema_ipc": schema::to_ipc_base64(&validated.schema)?,
                "schema_json": schema::to_json(&validated.schema),
                "schema_hash": hex::encode(schema::schema_hash_bytes(&validated.schema)),
                "reads": validated.reads,
            }))
        })
        .or_raise(),
    )
}

#[pg_extern(sql = false, immutable, parallel_safe)]
fn normalize_schema(schema_text: &str) -> JsonB {
    JsonB(
        run_isolated(schema_text.to_owned(), |text| {
            let parsed = schema::parse_any(&text)?;
            Ok(json!({
                "schema_ipc": schema::to_ipc_base64(&parsed)?,
                "schema_json": schema::to_json(&parsed),
                "schema_hash": hex::encode(schema::schema_hash_bytes(&parsed)),
                "formatted": schema::format(&parsed),
            }))
        })
        .or_raise(),
    )
}

/// `_mm_prepare_definition` as 0.1.6 to 0.1.8 declare it (14 columns; 0.1.3
/// to 0.1.5 declare the first 13): the current steps, without the sources'
/// hash that 0.1.9 added. Their tables have no column for it, so nothing is
/// reused (`rows_keep_sources_hash`).
#[pg_extern(sql = false, volatile)]
#[allow(clippy::too_many_arguments)]
fn prepare_definition(
    view_set_name: Option<String>,
    definition_sql: Option<String>,
    extract_query: Option<String>,
    count_src_query: Option<String>,
    merge_partitions_query: Option<String>,
    update_group: Option<i32>,
    view_options: Option<JsonB>,
    keep_failed: bool,
) -> TableIterator<
    'static,
    (
        name!(view_set_name, String),
        name!(or_replace, bool),
        name!(definition_sql, String),
        name!(extract_query, String),
        name!(count_src_query, String),
        name!(merge_partitions_query, String),
        name!(update_group, i32),
        name!(view_options, JsonB),
        name!(schema_ipc, String),
        name!(schema_json, JsonB),
        name!(schema_hash, Vec<u8>),
        name!(reads, Vec<String>),
        name!(load_error, Option<String>),
        name!(warnings, JsonB),
    ),
> {
    let row = row_input(
        view_set_name,
        definition_sql,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        view_options,
    );
    let (
        name,
        or_replace,
        definition_sql,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        view_options,
        schema_ipc,
        schema_json,
        schema_hash,
        reads,
        load_error,
        warnings,
        _sources_hash,
    ) = definition_columns(row, keep_failed);
    TableIterator::once((
        name,
        or_replace,
        definition_sql,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        view_options,
        schema_ipc,
        schema_json,
        schema_hash,
        reads,
        load_error,
        warnings,
    ))
}

/// `_mm_check_definition_with` of 0.1.6 to 0.1.8 (0.1.9 declares
/// `_mm_recheck_definition_with` instead): the schema the definition would
/// have against the given view sets, or its validation's error, raised.
#[pg_extern(sql = false, stable)]
#[allow(clippy::too_many_arguments)]
fn check_definition_with(
    view_set_name: String,
    extract_query: String,
    count_src_query: String,
    merge_partitions_query: String,
    update_group: i32,
    view_options: Option<JsonB>,
    names: Vec<String>,
    schemas: Vec<String>,
    groups: Vec<i32>,
    errors: Vec<Option<String>>,
) -> String {
    let overrides = overrides_from(names, schemas, groups, errors);
    let row = stored_row(
        view_set_name,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        view_options.map(|j| j.0),
    );
    prepare_row(row, false, &overrides).1.schema_ipc
}

/// `_mm_recheck_definition` of 0.1.9 and 0.1.10 (0.1.11's re-check, one
/// routine for the write and the dry run, calls `_mm_recheck_definition_with`
/// with no overrides): a stored dependent's schema as it validates now, or
/// why it no longer does.
#[pg_extern(sql = false, volatile)]
fn recheck_definition(
    view_set_name: String,
    extract_query: String,
    count_src_query: String,
    merge_partitions_query: String,
    update_group: i32,
    view_options: JsonB,
) -> TableIterator<'static, (name!(schema_ipc, Option<String>), name!(problem, Option<String>))> {
    let row = stored_row(
        view_set_name,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        Some(view_options.0),
    );
    TableIterator::once(recheck(row, &[]))
}
