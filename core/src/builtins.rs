//! What CREATE EXTENSION ships: the code-defined view sets of today's
//! micromegas (`builtins.json`) and the log_stats definition (`log_stats.sql`).

use crate::catalog::{Catalog, CatalogEntry, CatalogRow, SourceKind};
use crate::schema;

pub const BUILTINS_JSON: &str = include_str!("builtins.json");
pub const LOG_STATS_SQL: &str = include_str!("log_stats.sql");

/// The shipped built-in view sets, as a JSON array.
pub fn builtins() -> serde_json::Value {
    serde_json::from_str(BUILTINS_JSON).expect("builtins.json is valid JSON")
}

/// The shipped built-ins as catalog entries (schemas decoded from JSON).
fn builtin_entries() -> Vec<CatalogEntry> {
    let mut entries = Vec::new();
    for row in builtins().as_array().expect("array") {
        let kind = match row["kind"].as_str().expect("kind") {
            "raw" => SourceKind::Raw,
            "materialized" => SourceKind::Materialized,
            _ => SourceKind::InstanceOnly,
        };
        entries.push(CatalogEntry {
            name: row["view_set_name"].as_str().expect("name").to_string(),
            schema: schema::from_json(&row["schema"]).expect("builtin schema"),
            update_group: row["update_group"].as_i64().map(|g| g as i32),
            kind,
            load_error: None,
        });
    }
    entries
}

/// A catalog of the shipped built-ins (used by tests and benchmarks).
pub fn builtin_catalog() -> Catalog {
    Catalog::new(builtin_entries())
}

/// The shipped built-ins as their rows in `builtin_view_sets` store them
/// (the schema as Arrow IPC), for tests and benchmarks of the steps that
/// read stored rows.
pub fn builtin_rows() -> Vec<CatalogRow> {
    builtin_entries()
        .into_iter()
        .map(|entry| CatalogRow {
            schema_ipc: Some(schema::to_ipc_base64(&entry.schema).expect("builtin schema encodes")),
            name: entry.name,
            update_group: entry.update_group,
            kind: entry.kind,
            load_error: None,
        })
        .collect()
}
