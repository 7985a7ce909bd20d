//! A snapshot of the view sets a definition may read, built by the caller
//! from the tables for one validation and passed down — never global state.

use crate::error::{Error, ErrorKind, Result};
use crate::schema;
use arrow_schema::SchemaRef;
use serde::Deserialize;
use std::collections::HashMap;

/// A relation name as DataFusion looks it up: quoted as written, unquoted
/// folded to lower case — ASCII letters only, as DataFusion folds them (a
/// Unicode fold would make `"É"` and `É` differ from DataFusion's view).
pub fn normalized_name(ident: &sqlparser::ast::Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_ascii_lowercase()
    }
}

/// The common table expressions `query` defines itself (not those of its
/// subqueries): each body's identity and the name a reference reads it by.
pub fn cte_bodies(query: &sqlparser::ast::Query) -> HashMap<*const sqlparser::ast::Query, String> {
    query
        .with
        .iter()
        .flat_map(|with| with.cte_tables.iter())
        .map(|cte| {
            (
                cte.query.as_ref() as *const _,
                normalized_name(&cte.alias.name),
            )
        })
        .collect()
}

/// How the daemon treats a view set as a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A raw, insert_time-bearing table (blocks): the only kind a count query may read.
    Raw,
    /// A view set the services materialize from ingested data (built-in:
    /// log_entries, measures, …); it carries insert_time.
    Materialized,
    /// A materialized view defined here (DDL).
    Defined,
    /// Only reachable through `view_instance(...)`: no global instance.
    InstanceOnly,
}

#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub name: String,
    pub schema: SchemaRef,
    pub update_group: Option<i32>,
    pub kind: SourceKind,
    /// Why a DDL view set failed to load; reading it is refused.
    pub load_error: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: HashMap<String, CatalogEntry>,
}

/// A view set as the tables store it: what the caller looks up for a
/// validation (the schema still in its stored base64 IPC form, read on the
/// planning thread).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CatalogRow {
    pub name: String,
    pub schema_ipc: Option<String>,
    pub update_group: Option<i32>,
    pub kind: SourceKind,
    #[serde(default)]
    pub load_error: Option<String>,
}

impl Catalog {
    pub fn new(entries: impl IntoIterator<Item = CatalogEntry>) -> Self {
        Catalog {
            entries: entries.into_iter().map(|e| (e.name.clone(), e)).collect(),
        }
    }

    /// Reads `[{"name", "schema_ipc", "update_group", "kind"}, …]`, the form the
    /// SQL side aggregates from `builtin_view_sets` and the definitions table.
    pub fn from_json(value: &serde_json::Value) -> Result<Self> {
        let rows: Vec<CatalogRow> = serde_json::from_value(value.clone()).map_err(|e| {
            Error::new(ErrorKind::Internal, "malformed catalog snapshot").with_detail(e.to_string())
        })?;
        Self::from_rows(&rows)
    }

    /// Reads the stored rows (decoding each schema).
    pub fn from_rows(rows: &[CatalogRow]) -> Result<Self> {
        let mut entries = Vec::with_capacity(rows.len());
        for row in rows {
            let schema = match &row.schema_ipc {
                Some(ipc) => schema::from_ipc_base64(ipc).map_err(|e| {
                    Error::new(
                        ErrorKind::InvalidSchema,
                        format!("stored schema of view set \"{}\" cannot be read", row.name),
                    )
                    .with_detail(e.detail.unwrap_or(e.message))
                })?,
                None => SchemaRef::new(arrow_schema::Schema::empty()),
            };
            entries.push(CatalogEntry {
                name: row.name.clone(),
                schema,
                update_group: row.update_group,
                kind: row.kind,
                load_error: row.load_error.clone(),
            });
        }
        Ok(Catalog::new(entries))
    }

    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.entries.get(name)
    }

    pub fn insert(&mut self, entry: CatalogEntry) {
        self.entries.insert(entry.name.clone(), entry);
    }
}
