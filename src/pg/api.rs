//! The Rust steps the SQL in `sql/` calls. Each is a pure function of its
//! arguments: parsing, option rules, planning and checks come from the core;
//! every table read and write happens in SQL, under the catalog lock.

use super::errors::{raise, OrRaise};
use super::thread::run_isolated;
use micromegas_views_core::builtins::{builtins, LOG_STATS_SQL};
use micromegas_views_core::options::OptionValues;
use micromegas_views_core::{
    checks, ddl, schema, Catalog, Definition, Error, ErrorKind, Statement,
};
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::json;

fn definition_json(d: &Definition) -> JsonB {
    JsonB(serde_json::to_value(d).expect("definitions serialize"))
}

fn definition_from_json(value: &JsonB) -> Definition {
    serde_json::from_value(value.0.clone()).unwrap_or_else(|e| {
        raise(Error::internal("malformed definition").with_detail(e.to_string()))
    })
}

#[pg_schema]
mod micromegas {
    use super::*;

    /// Parses a CREATE or DROP MATERIALIZED VIEW statement.
    #[pg_extern(immutable, parallel_safe, name = "_mm_parse_statement")]
    fn parse_statement(statement: &str) -> JsonB {
        match ddl::parse(statement).or_raise() {
            Statement::Create(create) => {
                let definition = Definition::from_statement(&create).or_raise();
                JsonB(json!({
                    "kind": "create",
                    "or_replace": create.or_replace,
                    "name": definition.name,
                    "definition": definition_json(&definition).0,
                }))
            }
            Statement::Drop(drop) => {
                micromegas_views_core::options::check_view_name(&drop.name)
                    .or_else(|e| {
                        if e.kind == ErrorKind::ReservedName {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                    .or_raise();
                JsonB(json!({"kind": "drop", "if_exists": drop.if_exists, "name": drop.name}))
            }
        }
    }

    /// The definition a table row describes. `definition_sql`, when given, is
    /// parsed; when columns are given too, both must describe the same view.
    #[pg_extern(immutable, parallel_safe, name = "_mm_definition_from_row")]
    fn definition_from_row(
        view_set_name: Option<&str>,
        definition_sql: Option<&str>,
        extract_query: Option<String>,
        count_src_query: Option<String>,
        merge_partitions_query: Option<String>,
        update_group: Option<i32>,
        view_options: Option<JsonB>,
    ) -> JsonB {
        let has_columns = extract_query.is_some()
            || count_src_query.is_some()
            || merge_partitions_query.is_some()
            || update_group.is_some()
            || view_options.is_some();
        let from_text = definition_sql.map(|text| match ddl::parse(text).or_raise() {
            Statement::Create(create) => Definition::from_statement(&create).or_raise(),
            Statement::Drop(_) => raise(
                Error::option("definition_sql must be a CREATE MATERIALIZED VIEW statement")
                    .with_hint("Delete the row to drop a view."),
            ),
        });
        if let (Some(d), Some(name)) = (&from_text, view_set_name) {
            if d.name != name {
                raise(Error::option(format!(
                    "definition_sql defines \"{}\" but the row's view_set_name is \"{name}\"",
                    d.name
                )));
            }
        }
        let from_columns = if has_columns || from_text.is_none() {
            let name = view_set_name
                .or(from_text.as_ref().map(|d| d.name.as_str()))
                .unwrap_or_else(|| raise(Error::option("view_set_name is required")));
            Some(
                Definition::from_row(
                    name,
                    extract_query,
                    count_src_query,
                    merge_partitions_query,
                    update_group,
                    view_options.as_ref().map(|j| &j.0),
                )
                .or_raise(),
            )
        } else {
            None
        };
        let definition = match (from_text, from_columns) {
            (Some(t), Some(c)) if t != c => raise(
                Error::option(format!(
                    "definition_sql does not match the row's columns for \"{}\"",
                    t.name
                ))
                .with_detail(first_difference(&t, &c))
                .with_hint("Write either definition_sql or the columns; the other is derived."),
            ),
            (Some(t), _) => t,
            (None, Some(c)) => c,
            (None, None) => unreachable!(),
        };
        definition_json(&definition)
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

    /// The canonical statement for the named-argument form of mm_create_view.
    #[pg_extern(immutable, parallel_safe, name = "_mm_render_create")]
    #[allow(clippy::too_many_arguments)]
    fn render_create(
        name: &str,
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
        values.into_definition(name).or_raise().render(or_replace)
    }

    /// The relation names a definition's queries mention: the rows the caller
    /// loads into the catalog snapshot.
    #[pg_extern(immutable, parallel_safe, name = "_mm_referenced_relations")]
    fn referenced_relations(definition: JsonB) -> Vec<String> {
        let definition = definition_from_json(&definition);
        run_isolated(move || checks::referenced_relations(&definition)).or_raise()
    }

    /// Plans and checks a definition against a catalog snapshot
    /// (`[{name, schema_ipc, update_group, kind}]`).
    #[pg_extern(immutable, parallel_safe, name = "_mm_validate")]
    fn validate(definition: JsonB, catalog: JsonB) -> JsonB {
        let definition = definition_from_json(&definition);
        let catalog = Catalog::from_json(&catalog.0).or_raise();
        let validated = run_isolated({
            let definition = definition.clone();
            move || checks::validate(&definition, &catalog)
        })
        .or_raise();
        JsonB(json!({
            "view_options": definition.view_options_json(),
            "definition_sql": definition.render(false),
            "schema_ipc": schema::to_ipc_base64(&validated.schema).or_raise(),
            "schema_json": schema::to_json(&validated.schema),
            "schema_hash": hex::encode(schema::schema_hash_bytes(&validated.schema)),
            "reads": validated.reads,
        }))
    }

    /// Reads a schema given as JSON or base64 Arrow IPC and returns every stored form.
    #[pg_extern(immutable, parallel_safe, name = "_mm_normalize_schema")]
    fn normalize_schema(schema_text: &str) -> JsonB {
        let parsed = schema::parse_any(schema_text).or_raise();
        JsonB(json!({
            "schema_ipc": schema::to_ipc_base64(&parsed).or_raise(),
            "schema_json": schema::to_json(&parsed),
            "schema_hash": hex::encode(schema::schema_hash_bytes(&parsed)),
            "formatted": schema::format(&parsed),
        }))
    }

    /// The readable one-field-per-line form of a stored schema.
    #[pg_extern(immutable, parallel_safe, name = "_mm_format_schema")]
    fn format_schema(schema_ipc: &str) -> String {
        schema::format(&schema::from_ipc_base64(schema_ipc).or_raise())
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
