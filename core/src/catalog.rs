//! A snapshot of the view sets a definition may read, built by the caller
//! from the tables for one validation and passed down — never global state
//! (only the decoding of a stored schema is remembered, keyed by its bytes).

use crate::error::{Error, ErrorKind, Result};
use crate::schema;
use arrow_schema::SchemaRef;
use serde::Deserialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
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
                Some(ipc) => decoded_schema(ipc).map_err(|e| {
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

/// How many decoded stored schemas [`decoded_schema`] remembers, and the
/// largest it remembers (a built-in's is a few KiB).
const DECODED_SCHEMAS: usize = 32;
const MAX_DECODED_TEXT: usize = 64 * 1024;

/// `schema::from_ipc_base64(ipc)`, remembered for the last few stored
/// schemas: most definitions read the same few built-ins, and decoding
/// their IPC at every write was 2% of a validation. Keyed by the text
/// itself, so a changed schema is a different entry.
static DECODED: Mutex<VecDeque<(String, SchemaRef)>> = Mutex::new(VecDeque::new());

fn decoded_schema(ipc: &str) -> Result<SchemaRef> {
    {
        let mut decoded = DECODED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = decoded.iter().position(|(text, _)| text == ipc) {
            // The most recently used last: what many writes read stays.
            let entry = decoded.remove(at).expect("found");
            let schema = entry.1.clone();
            decoded.push_back(entry);
            return Ok(schema);
        }
    }
    let schema = schema::from_ipc_base64(ipc)?;
    if ipc.len() > MAX_DECODED_TEXT {
        return Ok(schema);
    }
    let mut decoded = DECODED.lock().unwrap_or_else(|p| p.into_inner());
    if decoded.len() == DECODED_SCHEMAS {
        decoded.pop_front();
    }
    decoded.push_back((ipc.to_string(), schema.clone()));
    Ok(schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn row(schema: &arrow_schema::Schema) -> CatalogRow {
        CatalogRow {
            name: "s".into(),
            schema_ipc: Some(schema::to_ipc_base64(schema).unwrap()),
            update_group: None,
            kind: SourceKind::Raw,
            load_error: None,
        }
    }

    #[test]
    fn a_remembered_decoding_follows_the_stored_bytes() {
        use arrow_schema::{DataType, Field, Schema};
        let before = Schema::new(vec![Field::new("a", DataType::Int64, false)]);
        let after = Schema::new(vec![Field::new("a", DataType::Utf8, true)]);
        for schema in [&before, &after, &before] {
            let catalog = Catalog::from_rows(&[row(schema)]).unwrap();
            assert_eq!(catalog.get("s").unwrap().schema.as_ref(), schema);
        }
        // Decoded once: the same bytes give the same schema back.
        let stored = row(&before).schema_ipc.unwrap();
        let first = decoded_schema(&stored).unwrap();
        assert!(Arc::ptr_eq(&first, &decoded_schema(&stored).unwrap()));
    }

    #[test]
    fn a_schema_that_does_not_decode_is_not_remembered() {
        let bad = "bm90IGFuIElQQyBzY2hlbWE="; // base64, not Arrow IPC
        assert!(decoded_schema(bad).is_err());
        let decoded = DECODED.lock().unwrap();
        assert!(!decoded.iter().any(|(text, _)| text == bad));
    }
}
