//! What CREATE EXTENSION ships: the code-defined view sets of today's
//! micromegas (`builtins.json`) and the log_stats definition (`log_stats.sql`).

use crate::catalog::{Catalog, CatalogEntry, SourceKind};
use crate::schema;

pub const BUILTINS_JSON: &str = include_str!("builtins.json");
pub const LOG_STATS_SQL: &str = include_str!("log_stats.sql");

/// The shipped built-in view sets, as a JSON array.
pub fn builtins() -> serde_json::Value {
    serde_json::from_str(BUILTINS_JSON).expect("builtins.json is valid JSON")
}

/// A catalog of the shipped built-ins (used by tests and benchmarks).
pub fn builtin_catalog() -> Catalog {
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
    Catalog::new(entries)
}
