//! The Rust steps the SQL in `sql/` calls. Each is a pure function of its
//! arguments: parsing, option rules, planning and checks come from the core;
//! every table read and write happens in SQL, under the catalog lock.
//!
//! Every function here that reads caller-supplied text or bytes does all of
//! that reading inside `run_isolated`: on a planning thread (large stack,
//! panics caught), under the session's limits, with the backend servicing
//! interrupts while it waits.

use super::errors::OrRaise;
use super::thread::run_isolated;
use micromegas_views_core::builtins::{builtins, LOG_STATS_SQL};
use micromegas_views_core::options::{check_name, NameUse, OptionValues};
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

/// The definition a CREATE statement's text describes.
fn definition_from_text(text: &str) -> Result<Definition> {
    match ddl::parse(text)? {
        Statement::Create(create) => Definition::from_statement(&create),
        Statement::Drop(_) => Err(Error::option(
            "definition_sql must be a CREATE MATERIALIZED VIEW statement",
        )
        .with_hint("Delete the row to drop a view.")),
    }
}

fn first_difference(a: &Definition, b: &Definition) -> String {
    let field = if a.extract_query != b.extract_query {
        "extract_query"
    } else if a.count_src_query != b.count_src_query {
        "count_src_query"
    } else if a.merge_partitions_query != b.merge_partitions_query {
        "merge_partitions_query"
    } else if a.update_group != b.update_group {
        "update_group"
    } else {
        "view_options"
    };
    format!("{field} differs.")
}

/// Every stored form of a schema given as JSON or base64 IPC.
fn normalized_schema(text: &str) -> Result<Value> {
    let parsed = schema::parse_any(text)?;
    Ok(json!({
        "schema_ipc": schema::to_ipc_base64(&parsed)?,
        "schema_json": schema::to_json(&parsed),
        "schema_hash": hex::encode(schema::schema_hash_bytes(&parsed)),
        "formatted": schema::format(&parsed),
    }))
}

/// The SQL-callable steps. They are created unqualified, in the extension's
/// schema (`schema = micromegas` in the control file): a `#[pg_schema]`
/// module would emit `CREATE SCHEMA IF NOT EXISTS`, which Postgres refuses
/// for a schema the extension does not own.
mod micromegas {
    use super::*;

    /// Parses a CREATE or DROP MATERIALIZED VIEW statement.
    #[pg_extern(immutable, parallel_safe, name = "_mm_parse_statement")]
    fn parse_statement(statement: &str) -> JsonB {
        let statement = statement.to_owned();
        JsonB(
            run_isolated(move || match ddl::parse(&statement)? {
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

    /// The definition a table row describes. `definition_sql`, when given, is
    /// parsed; when columns are given too, both must describe the same view.
    #[pg_extern(immutable, parallel_safe, name = "_mm_definition_from_row")]
    fn definition_from_row(
        view_set_name: Option<String>,
        definition_sql: Option<String>,
        extract_query: Option<String>,
        count_src_query: Option<String>,
        merge_partitions_query: Option<String>,
        update_group: Option<i32>,
        view_options: Option<JsonB>,
    ) -> JsonB {
        let view_options = view_options.map(|j| j.0);
        JsonB(
            run_isolated(move || {
                let has_columns = extract_query.is_some()
                    || count_src_query.is_some()
                    || merge_partitions_query.is_some()
                    || update_group.is_some()
                    || view_options.is_some();
                let from_text = definition_sql
                    .as_deref()
                    .map(definition_from_text)
                    .transpose()?;
                if let (Some(d), Some(name)) = (&from_text, &view_set_name) {
                    if &d.name != name {
                        return Err(Error::option(format!(
                            "definition_sql defines \"{}\" but the row's view_set_name is \"{name}\"",
                            d.name
                        )));
                    }
                }
                let from_columns = if has_columns || from_text.is_none() {
                    let name = view_set_name
                        .clone()
                        .or(from_text.as_ref().map(|d| d.name.clone()))
                        .ok_or_else(|| Error::option("view_set_name is required"))?;
                    Some(Definition::from_row(
                        &name,
                        extract_query,
                        count_src_query,
                        merge_partitions_query,
                        update_group,
                        view_options.as_ref(),
                    )?)
                } else {
                    None
                };
                let definition = match (from_text, from_columns) {
                    (Some(t), Some(c)) if t != c => {
                        return Err(Error::option(format!(
                            "definition_sql does not match the row's columns for \"{}\"",
                            t.name
                        ))
                        .with_detail(first_difference(&t, &c))
                        .with_hint(
                            "Write either definition_sql or the columns; the other is derived.",
                        ))
                    }
                    (Some(t), _) => t,
                    (None, Some(c)) => c,
                    (None, None) => unreachable!("a row has text or columns"),
                };
                Ok(definition_value(&definition))
            })
            .or_raise(),
        )
    }

    /// The canonical statement for the named-argument form of mm_create_view.
    #[pg_extern(immutable, parallel_safe, name = "_mm_render_create")]
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
        let values = OptionValues {
            extract_query,
            count_src_query,
            merge_partitions_query,
            update_group,
            time_column,
            min_time_column,
            max_time_column,
            source_partition_delta,
            merge_partition_delta,
            merge_sort_order,
        };
        run_isolated(move || Ok(values.into_definition(&name)?.render(or_replace))).or_raise()
    }

    /// The relation names a definition's queries mention (a superset of
    /// what they read): what a restored definition that no longer plans is
    /// recorded as reading.
    #[pg_extern(immutable, parallel_safe, name = "_mm_referenced_relations")]
    fn referenced_relations(definition: JsonB) -> Vec<String> {
        let definition = definition.0;
        run_isolated(move || checks::referenced_relations(&definition_from_value(definition)?))
            .or_raise()
    }

    /// Plans and checks a definition against a catalog snapshot
    /// (`[{name, schema_ipc, update_group, kind, load_error}]`).
    #[pg_extern(immutable, parallel_safe, name = "_mm_validate")]
    fn validate(definition: JsonB, catalog: JsonB) -> JsonB {
        let (definition, catalog) = (definition.0, catalog.0);
        JsonB(
            run_isolated(move || {
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

    /// Reads a schema given as JSON or base64 Arrow IPC and returns every stored form.
    #[pg_extern(immutable, parallel_safe, name = "_mm_normalize_schema")]
    fn normalize_schema(schema_text: &str) -> JsonB {
        let text = schema_text.to_owned();
        JsonB(run_isolated(move || normalized_schema(&text)).or_raise())
    }

    /// The readable one-field-per-line form of a stored schema.
    #[pg_extern(immutable, parallel_safe, name = "_mm_format_schema")]
    fn format_schema(schema_ipc: &str) -> String {
        let text = schema_ipc.to_owned();
        run_isolated(move || Ok(schema::format(&*schema::from_ipc_base64(&text)?))).or_raise()
    }

    /// The name rule of `usage` (`create`, `reference` or `builtin`),
    /// raised as an error. The SQL functions that take a name call it.
    #[pg_extern(immutable, parallel_safe, name = "_mm_check_name")]
    fn check_name_sql(name: &str, usage: &str) -> bool {
        let usage = match usage {
            "create" => NameUse::Create,
            "reference" => NameUse::Reference,
            "builtin" => NameUse::Builtin,
            other => pgrx::error!("unknown name use \"{other}\""),
        };
        // Short and non-recursive: checked on the backend's thread.
        check_name(name, usage).or_raise();
        true
    }

    /// True only while CREATE EXTENSION or ALTER EXTENSION UPDATE runs this
    /// extension's script: the shipped rows are written then. No setting
    /// can make it true.
    #[pg_extern(stable, name = "_mm_creating_extension")]
    fn creating_extension() -> bool {
        // SAFETY: reading two backend globals on the backend's own thread.
        unsafe {
            pg_sys::creating_extension
                && pg_sys::CurrentExtensionObject
                    == pg_sys::get_extension_oid(c"micromegas_views".as_ptr(), true)
        }
    }

    /// The built-in view sets CREATE EXTENSION seeds.
    #[pg_extern(immutable, parallel_safe, name = "_mm_shipped_builtins")]
    fn shipped_builtins() -> JsonB {
        JsonB(builtins())
    }

    /// The log_stats definition CREATE EXTENSION ships.
    #[pg_extern(immutable, parallel_safe, name = "_mm_shipped_log_stats")]
    fn shipped_log_stats() -> &'static str {
        LOG_STATS_SQL.trim_end()
    }
}
