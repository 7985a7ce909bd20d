//! One write of a definition row, in two steps around the caller's catalog
//! look-up: [`derive`] reads the row (statement text, columns, or both) into
//! a [`Definition`] and names the view sets its queries mention; the caller
//! fetches those from its tables; [`prepare`] plans and checks the
//! definition against them and returns every derived column of the row.

use crate::catalog::{Catalog, CatalogRow, SourceKind};
use crate::checks;
use crate::ddl::{self, Statement};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Definition;
use crate::schema;
use arrow_schema::Schema;
use sha2::{Digest, Sha256};

/// A row as written: any of the statement and the columns may be missing.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowInput {
    pub view_set_name: Option<String>,
    pub definition_sql: Option<String>,
    pub extract_query: Option<String>,
    pub count_src_query: Option<String>,
    pub merge_partitions_query: Option<String>,
    pub update_group: Option<i32>,
    pub view_options: Option<serde_json::Value>,
}

/// What a row defines, before planning.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Derived {
    pub definition: Definition,
    /// The statement said CREATE OR REPLACE.
    pub or_replace: bool,
    /// The statement text to store (the row's own), if the row gave one.
    pub statement: Option<String>,
    /// Every relation name the queries mention: the view sets to look up.
    pub mentioned: Vec<String>,
    /// Why the queries do not parse, if they do not: a definition error,
    /// reported by [`prepare`] (where a restored row may be kept as failed
    /// instead). The parsed trees themselves are not in a `Derived`: it
    /// goes back to the backend's thread, whose stack is Postgres' (8 MB,
    /// not checked by `max_stack_depth` for Rust frames), and cloning or
    /// dropping a deep tree there recurses as deep as the tree (a UNION ALL
    /// of a thousand arms overflowed it). They stay on the planning thread
    /// (`kept`), where [`prepare`] takes them or parses again.
    pub parse_error: Option<Error>,
}

/// Two derivations are the same when they define the same thing (the parsed
/// queries follow from the definition).
impl PartialEq for Derived {
    fn eq(&self, other: &Self) -> bool {
        self.definition == other.definition
            && self.or_replace == other.or_replace
            && self.statement == other.statement
            && self.mentioned == other.mentioned
    }
}

/// Every column a validated row stores.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Prepared {
    pub definition_sql: String,
    pub view_options: serde_json::Value,
    pub schema_ipc: String,
    pub schema_json: serde_json::Value,
    pub schema_hash: Vec<u8>,
    pub reads: Vec<String>,
    /// Set only for a restored row kept as failed to load.
    pub load_error: Option<String>,
    /// The author obligations the definition does not meet, as a JSON
    /// array of `{check, sqlstate, message, hint}` (empty when it meets
    /// them all, or failed to load).
    pub warnings: serde_json::Value,
}

fn definition_from_text(text: &str) -> Result<(Definition, bool)> {
    match ddl::parse(text)? {
        Statement::Create(create) => Ok((Definition::from_statement(&create)?, create.or_replace)),
        Statement::Drop(_) => Err(Error::new(
            ErrorKind::Syntax,
            "expected CREATE MATERIALIZED VIEW, not DROP MATERIALIZED VIEW",
        )
        .with_hint("Use micromegas.mm_drop_view() to drop a view.")),
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

/// The definition a row describes. `definition_sql`, when given, is parsed;
/// when columns are given too, both must describe the same view.
pub fn derive(row: RowInput) -> Result<Derived> {
    let has_columns = row.extract_query.is_some()
        || row.count_src_query.is_some()
        || row.merge_partitions_query.is_some()
        || row.update_group.is_some()
        || row.view_options.is_some();
    let from_text = row
        .definition_sql
        .as_deref()
        .map(definition_from_text)
        .transpose()?;
    if let (Some((d, _)), Some(name)) = (&from_text, &row.view_set_name) {
        if &d.name != name {
            return Err(Error::option(format!(
                "definition_sql defines \"{}\" but the row's view_set_name is \"{name}\"",
                d.name
            )));
        }
    }
    let from_columns = if has_columns || from_text.is_none() {
        let name = row
            .view_set_name
            .clone()
            .or(from_text.as_ref().map(|(d, _)| d.name.clone()))
            .ok_or_else(|| Error::option("view_set_name is required"))?;
        Some(Definition::from_row(
            &name,
            row.extract_query,
            row.count_src_query,
            row.merge_partitions_query,
            row.update_group,
            row.view_options.as_ref(),
        )?)
    } else {
        None
    };
    let (definition, or_replace) = match (from_text, from_columns) {
        (Some((t, _)), Some(c)) if t != c => {
            return Err(Error::option(format!(
                "definition_sql does not match the row's columns for \"{}\"",
                t.name
            ))
            .with_detail(first_difference(&t, &c))
            .with_hint("Write either definition_sql or the columns; the other is derived."))
        }
        (Some((t, or_replace)), _) => (t, or_replace),
        (None, Some(c)) => (c, false),
        (None, None) => unreachable!("a row has text or columns"),
    };
    let (mentioned, parse_error) = match checks::parse_queries(&definition) {
        Err(e) if e.kind != ErrorKind::InvalidDefinition => return Err(e),
        Err(e) => (Vec::new(), Some(e)),
        Ok(parsed) => {
            let mentioned = checks::mentioned_relations(&parsed);
            kept::keep(&definition, parsed);
            (mentioned, None)
        }
    };
    Ok(Derived {
        definition,
        or_replace,
        statement: row.definition_sql,
        mentioned,
        parse_error,
    })
}

/// Plans and checks `derived` against the view sets it mentions (`rows`:
/// those that exist, the view itself excluded), and returns the row's
/// derived columns. With `keep_failed` (a restored row that had failed to
/// load), a definition whose queries no longer plan is kept as failed with
/// the reason, the empty schema, and the existing view sets it mentions as
/// what it reads; any other problem is still an error.
pub fn prepare(derived: &Derived, rows: &[CatalogRow], keep_failed: bool) -> Result<Prepared> {
    let definition = &derived.definition;
    let definition_sql = statement_sql(derived);
    // The trees `derive` kept (taken first: whatever fails below, they do
    // not outlive this write), or parsed again (see `Derived::parse_error`).
    let kept = kept::take(definition);
    let catalog = Catalog::from_rows(rows)?;
    let parsed = match &derived.parse_error {
        Some(e) => Err(e.clone()),
        None => kept.map_or_else(|| checks::parse_queries(definition), Ok),
    };
    let validated = parsed.and_then(|parsed| checks::validate_parsed(definition, parsed, &catalog));
    let (schema, reads, load_error, findings) = match validated {
        Ok(validated) => (validated.schema, validated.reads, None, validated.findings),
        Err(e) if keep_failed && e.kind == ErrorKind::InvalidDefinition => {
            let mut reads: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
            reads.sort();
            reads.dedup();
            let reason = format!("no longer valid when restored: {}", e.message);
            (Schema::empty().into(), reads, Some(reason), Vec::new())
        }
        Err(e) => return Err(e),
    };
    Ok(Prepared {
        definition_sql,
        view_options: definition.view_options_json(),
        schema_ipc: schema::to_ipc_base64(&schema)?,
        schema_json: schema::to_json(&schema),
        schema_hash: schema::schema_hash_bytes(&schema).to_vec(),
        reads,
        load_error,
        warnings: serde_json::to_value(findings).expect("findings serialize"),
    })
}

/// The statement text a row stores: the one it was written with, or the
/// definition rendered.
fn statement_sql(derived: &Derived) -> String {
    derived
        .statement
        .clone()
        .unwrap_or_else(|| derived.definition.render(false))
}

/// What a validation read besides the definition itself, as a SHA-256: the
/// view sets it mentions as stored (`rows`, in any order), the plan-node
/// limit it ran under and the version of the code that ran it
/// (`code_version`: the extension's, passed by the extension — this crate's
/// own version never moves). A stored row
/// keeps this beside what its validation derived; a later write of the same
/// definition whose sources hash the same would derive the same columns
/// (validation is a function of these and the definition), so it takes
/// them from the row instead of planning again ([`reuse`]). SHA-256, not a
/// fast hash: an admin must not be able to make two different catalogs
/// look alike. Linear in the rows' size and never recursive, so it may run
/// on the backend's thread.
pub fn sources_hash(rows: &[CatalogRow], max_plan_nodes: usize, code_version: &str) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, value: Option<&[u8]>) {
        match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                out.extend_from_slice(v);
            }
        }
    }
    let mut encoded: Vec<Vec<u8>> = rows
        .iter()
        .map(|row| {
            // Every field (one added to CatalogRow must be listed here).
            let CatalogRow {
                name,
                schema_ipc,
                update_group,
                kind,
                load_error,
            } = row;
            let mut out = Vec::new();
            field(&mut out, Some(name.as_bytes()));
            field(&mut out, schema_ipc.as_deref().map(str::as_bytes));
            field(&mut out, update_group.map(i32::to_le_bytes).as_ref().map(|b| &b[..]));
            let kind: u8 = match kind {
                SourceKind::Raw => 1,
                SourceKind::Materialized => 2,
                SourceKind::Defined => 3,
                SourceKind::InstanceOnly => 4,
            };
            field(&mut out, Some(&[kind]));
            field(&mut out, load_error.as_deref().map(str::as_bytes));
            out
        })
        .collect();
    // The look-up returns the rows in no particular order.
    encoded.sort();
    let mut hasher = Sha256::new();
    hasher.update(b"micromegas_views validation sources\0");
    hasher.update((code_version.len() as u64).to_le_bytes());
    hasher.update(code_version.as_bytes());
    hasher.update((max_plan_nodes as u64).to_le_bytes());
    hasher.update((encoded.len() as u64).to_le_bytes());
    for row in &encoded {
        hasher.update(row);
    }
    hasher.finalize().to_vec()
}

/// What a stored row's validation derived (the row's own columns).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredValidation {
    pub schema_ipc: String,
    pub schema_json: serde_json::Value,
    pub schema_hash: Vec<u8>,
    pub reads: Vec<String>,
    pub warnings: serde_json::Value,
}

/// The derived columns of a write whose definition (name, queries, group,
/// options) is the one a stored row holds and whose [`sources_hash`] is the
/// one the row was validated with: the row's own, with the statement text
/// and options of this write. The caller matches the row; nothing is
/// parsed or planned here.
pub fn reuse(derived: &Derived, stored: StoredValidation) -> Prepared {
    Prepared {
        definition_sql: statement_sql(derived),
        view_options: derived.definition.view_options_json(),
        schema_ipc: stored.schema_ipc,
        schema_json: stored.schema_json,
        schema_hash: stored.schema_hash,
        reads: stored.reads,
        load_error: None,
        warnings: stored.warnings,
    }
}

/// The parsed queries of the last definition [`derive`] read on this
/// thread, for the [`prepare`] that follows it (the caller's catalog
/// look-up sits between the two, on the backend's thread): parsing was a
/// fifth of a validation, and was done twice.
///
/// The trees never reach the backend's thread (see `Derived::parse_error`):
/// in the extension both functions run on a planning thread, and the slot
/// is that thread's, so a tree is only ever dropped there — replaced by the
/// next `derive`, consumed by planning, or when the thread ends. `take`
/// hands them out only for exactly the query texts they were parsed from
/// (parsing depends on nothing else: the limits and the denied functions
/// are constants); anything else, or a `prepare` on another helper, parses
/// again. When no `prepare` follows (the backend remembered the answer or
/// took the stored one, or the write failed in between), the trees stay
/// until the next `derive` on that thread: only definitions of at most
/// [`MAX_KEPT_TEXT`] bytes of
/// query text are kept (a tree is at most a few hundred bytes per byte of
/// text: a few MB, at most one per planning thread of the backend).
mod kept {
    use crate::checks::ParsedQueries;
    use crate::options::Definition;
    use std::cell::RefCell;

    /// The largest total query text whose trees are kept (a definition is
    /// typically 1 KiB).
    pub const MAX_KEPT_TEXT: usize = 16 * 1024;

    thread_local! {
        static SLOT: RefCell<Option<([String; 3], ParsedQueries)>> = const { RefCell::new(None) };
    }

    fn texts(definition: &Definition) -> [&str; 3] {
        crate::checks::queries(definition).map(|(_, text)| text)
    }

    fn small(texts: &[&str; 3]) -> bool {
        texts.iter().map(|t| t.len()).sum::<usize>() <= MAX_KEPT_TEXT
    }

    pub fn keep(definition: &Definition, parsed: ParsedQueries) {
        let texts = texts(definition);
        let entry = small(&texts).then(|| (texts.map(str::to_string), parsed));
        // The previous trees (or these, when too big) are dropped here.
        drop(SLOT.replace(entry));
    }

    pub fn take(definition: &Definition) -> Option<ParsedQueries> {
        let wanted = texts(definition);
        SLOT.with_borrow_mut(|slot| {
            let matches = slot
                .as_ref()
                .is_some_and(|(texts, _)| texts.iter().eq(wanted.iter()));
            if matches {
                slot.take().map(|(_, parsed)| parsed)
            } else {
                None
            }
        })
    }

    /// What the slot holds trees for (tests).
    #[cfg(test)]
    pub fn held() -> Option<[String; 3]> {
        SLOT.with_borrow(|slot| slot.as_ref().map(|(texts, _)| texts.clone()))
    }

    #[cfg(test)]
    pub fn holds(definition: &Definition) -> bool {
        held().is_some_and(|texts| texts.iter().eq(self::texts(definition).iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::LOG_STATS_SQL;
    use crate::catalog::SourceKind;

    fn blocks() -> CatalogRow {
        let schema = schema::parse_any(
            r#"[{"name": "insert_time", "type": "Timestamp(Nanosecond, Some(\"+00:00\"))", "nullable": false},
                {"name": "process_id", "type": "Utf8", "nullable": false},
                {"name": "nb_objects", "type": "Int32", "nullable": false}]"#,
        )
        .unwrap();
        CatalogRow {
            name: "blocks".into(),
            schema_ipc: Some(schema::to_ipc_base64(&schema).unwrap()),
            update_group: None,
            kind: SourceKind::Raw,
            load_error: None,
        }
    }

    #[test]
    fn a_statement_row_keeps_its_text_and_says_or_replace() {
        let text = LOG_STATS_SQL.replace("CREATE MATERIALIZED", "CREATE OR REPLACE MATERIALIZED");
        let derived = derive(RowInput {
            definition_sql: Some(text.clone()),
            ..Default::default()
        })
        .unwrap();
        assert!(derived.or_replace);
        assert_eq!(derived.definition.name, "log_stats");
        assert!(derived.mentioned.contains(&"log_entries".to_string()));
        assert_eq!(derived.statement.as_deref(), Some(text.as_str()));
    }

    #[test]
    fn a_column_row_is_rendered() {
        let d = derive(RowInput {
            definition_sql: Some(LOG_STATS_SQL.into()),
            ..Default::default()
        })
        .unwrap()
        .definition;
        let derived = derive(RowInput {
            view_set_name: Some(d.name.clone()),
            extract_query: Some(d.extract_query.clone()),
            count_src_query: Some(d.count_src_query.clone()),
            merge_partitions_query: Some(d.merge_partitions_query.clone()),
            update_group: Some(d.update_group),
            view_options: Some(d.view_options_json()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(derived.definition, d);
        assert!(!derived.or_replace);
        assert_eq!(derived.statement, None);
    }

    #[test]
    fn text_and_columns_must_agree() {
        let d = derive(RowInput {
            definition_sql: Some(LOG_STATS_SQL.into()),
            ..Default::default()
        })
        .unwrap()
        .definition;
        let e = derive(RowInput {
            definition_sql: Some(LOG_STATS_SQL.into()),
            extract_query: Some(d.extract_query.clone()),
            count_src_query: Some(d.count_src_query.clone()),
            merge_partitions_query: Some(d.merge_partitions_query.clone()),
            update_group: Some(d.update_group + 1),
            view_options: Some(d.view_options_json()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.detail.as_deref(), Some("update_group differs."));
        assert_eq!(
            e.message,
            "definition_sql does not match the row's columns for \"log_stats\""
        );
    }

    /// A shipped built-in, as its row stores it.
    fn builtin_row(name: &str) -> CatalogRow {
        crate::builtins::builtin_rows()
            .into_iter()
            .find(|row| row.name == name)
            .expect("a shipped built-in")
    }

    fn derived(text: &str) -> Derived {
        derive(RowInput {
            definition_sql: Some(text.into()),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn prepare_plans_the_trees_derive_parsed_and_keeps_none() {
        let first = derived(LOG_STATS_SQL);
        assert!(kept::holds(&first.definition));
        // Another derive replaces them: the first definition parses again.
        let other = LOG_STATS_SQL
            .replace("log_stats", "other")
            .replace("count(*)", "count(1)");
        let second = derived(&other);
        assert!(!kept::holds(&first.definition));
        assert!(kept::holds(&second.definition));
        let rows = [builtin_row("log_entries"), builtin_row("blocks")];
        let parsed_again = prepare(&first, &rows, false).unwrap();
        assert!(
            kept::holds(&second.definition),
            "a miss leaves the slot alone"
        );
        // With the kept trees: the same answer, and the slot is empty after.
        let first_again = derived(LOG_STATS_SQL);
        assert!(kept::holds(&first_again.definition));
        let from_kept = prepare(&first_again, &rows, false).unwrap();
        assert!(!kept::holds(&first_again.definition));
        assert_eq!(from_kept, parsed_again);
    }

    #[test]
    fn big_definitions_are_not_kept() {
        let small = derived(LOG_STATS_SQL);
        assert!(kept::holds(&small.definition));
        let padding = format!("/*{}*/", "x".repeat(kept::MAX_KEPT_TEXT));
        let text = LOG_STATS_SQL.replacen("SELECT", &format!("SELECT {padding}"), 1);
        let big = derived(&text);
        assert!(big.definition.extract_query.len() > kept::MAX_KEPT_TEXT);
        // Neither the big trees nor the previous ones are held.
        assert_eq!(kept::held(), None);
        // The big one is parsed again, and validates the same.
        let rows = [builtin_row("log_entries"), builtin_row("blocks")];
        prepare(&big, &rows, false).unwrap();
    }

    #[test]
    fn a_failed_write_does_not_leave_its_trees() {
        let d = derived(LOG_STATS_SQL);
        assert!(kept::holds(&d.definition));
        let mut broken = builtin_row("blocks");
        broken.schema_ipc = Some("not base64!".into());
        prepare(&d, &[builtin_row("log_entries"), broken], false).unwrap_err();
        assert_eq!(kept::held(), None);
    }

    #[test]
    fn a_failed_restore_is_kept_with_its_reason() {
        let text = "CREATE MATERIALIZED VIEW r WITH (extract_query = 'SELECT nope FROM blocks', \
                    count_src_query = 'SELECT 1', merge_partitions_query = 'SELECT * FROM {source}', \
                    update_group = 5, time_column = 'nope')";
        let derived = derive(RowInput {
            definition_sql: Some(text.into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(derived.mentioned, ["blocks"]);
        let e = prepare(&derived, &[blocks()], false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidDefinition);
        let kept = prepare(&derived, &[blocks()], true).unwrap();
        assert!(kept
            .load_error
            .unwrap()
            .starts_with("no longer valid when restored: "));
        assert_eq!(kept.reads, ["blocks"]);
        assert_eq!(kept.definition_sql, text);
        assert_eq!(kept.schema_json, serde_json::json!({"fields": []}));
    }

    #[test]
    fn the_sources_hash_follows_every_field_of_every_row_but_not_their_order() {
        let rows = vec![builtin_row("log_entries"), builtin_row("blocks")];
        let hash = |rows: &[CatalogRow], limit| sources_hash(rows, limit, "1.2.3");
        let base = hash(&rows, 1000);
        assert_eq!(base.len(), 32);
        let reversed: Vec<CatalogRow> = rows.iter().rev().cloned().collect();
        assert_eq!(hash(&reversed, 1000), base, "the look-up's order is not a change");
        assert_ne!(hash(&rows, 999), base, "the plan-node limit");
        assert_ne!(sources_hash(&rows, 1000, "1.2.4"), base, "the code's version");
        assert_ne!(hash(&rows[..1], 1000), base, "a source gone");
        assert_ne!(hash(&[], 1000), base);
        let changes: [fn(&mut CatalogRow); 6] = [
            |r| r.name.push('x'),
            |r| r.schema_ipc = None,
            |r| r.schema_ipc.as_mut().unwrap().push('A'),
            |r| r.update_group = Some(r.update_group.unwrap_or(0) + 1),
            |r| r.kind = SourceKind::Defined,
            |r| r.load_error = Some("failed".into()),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut changed = rows.clone();
            change(&mut changed[1]);
            assert_ne!(hash(&changed, 1000), base, "change {i}");
        }
        // Fields are delimited: text moved from one field to the next is a change.
        let mut a = blocks();
        a.name = "ab".into();
        a.load_error = Some("c".into());
        let mut b = blocks();
        b.name = "a".into();
        b.load_error = Some("bc".into());
        assert_ne!(hash(&[a], 1000), hash(&[b], 1000));
    }

    #[test]
    fn a_reused_validation_is_what_planning_derives() {
        let rows = [builtin_row("log_entries"), builtin_row("blocks")];
        let planned = prepare(&derived(LOG_STATS_SQL), &rows, false).unwrap();
        let replace = LOG_STATS_SQL.replace("CREATE MATERIALIZED", "CREATE OR REPLACE MATERIALIZED");
        let again = derived(&replace);
        let stored = StoredValidation {
            schema_ipc: planned.schema_ipc.clone(),
            schema_json: planned.schema_json.clone(),
            schema_hash: planned.schema_hash.clone(),
            reads: planned.reads.clone(),
            warnings: planned.warnings.clone(),
        };
        // Everything the write would derive by planning, its own statement text included.
        assert_eq!(reuse(&again, stored), prepare(&again, &rows, false).unwrap());
    }
}
