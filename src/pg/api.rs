//! The Rust steps the SQL in `sql/` calls: one call per definition written
//! (`_mm_prepare_definition`, from the table's BEFORE trigger), and a few
//! small readers.
//!
//! Every function here that reads caller-supplied text or bytes does all of
//! that reading inside `run_isolated`: in the backend's helper process
//! (large stack, panics caught, stopped past its time or memory budget),
//! with the backend servicing interrupts while it waits. Postgres itself
//! (SPI) is called only from the backend, between two isolated steps.

use super::errors::{raise, OrRaise};
use super::settings;
use super::helper::run_isolated;
use micromegas_views_core::builtins::{builtins, LOG_STATS_SQL};
use micromegas_views_core::options::{check_name, check_view_name, NameUse};
use micromegas_views_core::prepare::{self, Derived, Prepared, RowInput, StoredValidation};
use micromegas_views_core::{ddl, schema, CatalogRow, ErrorKind, SourceKind, Statement};
use pgrx::prelude::*;
use pgrx::spi::OwnedPreparedStatement;
use pgrx::{JsonB, PgOid};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};

/// The look-up of the view sets a definition mentions: the built-ins, and
/// the DDL views other than the one being written (a replaced view never
/// reads its previous self). Planned once per backend and kept.
const CATALOG_ROWS_QUERY: &str = "
    SELECT b.view_set_name, b.schema_ipc, b.update_group, b.kind, NULL::text
      FROM micromegas.builtin_view_sets b
     WHERE b.view_set_name = ANY ($1)
    UNION ALL
    SELECT d.view_set_name, d.schema_ipc, d.update_group, 'defined',
           CASE WHEN d.load_status = 'failed' THEN coalesce(d.load_error, 'failed to load') END
      FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = ANY ($1) AND d.view_set_name <> $2";

thread_local! {
    static CATALOG_ROWS_PLAN: RefCell<Option<OwnedPreparedStatement>> = const { RefCell::new(None) };
}

/// The view sets named `names`, as the tables store them now.
fn catalog_rows(names: &[String], own: &str) -> Vec<CatalogRow> {
    if names.is_empty() {
        return Vec::new();
    }
    Spi::connect(|client| {
        let args = [names.to_vec().into(), own.to_string().into()];
        let table = CATALOG_ROWS_PLAN.with_borrow_mut(|plan| {
            if plan.is_none() {
                let oids = [pg_sys::TEXTARRAYOID, pg_sys::TEXTOID].map(PgOid::from);
                *plan = Some(client.prepare(CATALOG_ROWS_QUERY, &oids)?.keep());
            }
            client.select(plan.as_ref().expect("prepared"), None, &args)
        })?;
        let mut rows = Vec::with_capacity(table.len());
        for row in table {
            let kind: String = row.get(4)?.unwrap_or_default();
            rows.push(CatalogRow {
                name: row.get(1)?.unwrap_or_default(),
                schema_ipc: row.get(2)?,
                update_group: row.get(3)?,
                kind: source_kind(&kind),
                load_error: row.get(5)?,
            });
        }
        Ok::<_, pgrx::spi::Error>(rows)
    })
    .unwrap_or_else(|e| pgrx::error!("reading the view set catalog: {e}"))
}

/// A catalog row's kind, as the tables name it.
fn source_kind(kind: &str) -> SourceKind {
    match kind {
        "raw" => SourceKind::Raw,
        "instance_only" => SourceKind::InstanceOnly,
        "defined" => SourceKind::Defined,
        _ => SourceKind::Materialized,
    }
}

/// The stored row of the view being written, with what its validation
/// derived and the hash of what that validation read
/// (`prepare::sources_hash`). Planned once per backend and kept.
const STORED_ROW_QUERY: &str = "
    SELECT d.extract_query, d.count_src_query, d.merge_partitions_query, d.update_group, d.view_options,
           d.sources_hash, d.schema_ipc, d.schema_json, d.schema_hash, d.reads, d.warnings
      FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = $1 AND d.load_status = 'ok' AND d.sources_hash IS NOT NULL";

thread_local! {
    static STORED_ROW_PLAN: RefCell<Option<OwnedPreparedStatement>> = const { RefCell::new(None) };
    /// How many validations this backend planned (a test reads it).
    static PLANNED: Cell<u64> = const { Cell::new(0) };
}

/// What the stored row of `derived`'s view derived, when that row holds
/// the same definition (queries, group, options) and was validated against
/// sources that hash to `sources`: the same validation would derive the
/// same again. Compared here, not by SQL operators: the queries and the
/// hash byte for byte, the options as JSON values (the stored jsonb read
/// back against the ones this write would store).
fn stored_validation(derived: &Derived, sources: &[u8]) -> Option<StoredValidation> {
    if !rows_keep_sources_hash() {
        return None;
    }
    let d = &derived.definition;
    Spi::connect(|client| {
        let args = [d.name.clone().into()];
        let table = STORED_ROW_PLAN.with_borrow_mut(|plan| {
            if plan.is_none() {
                *plan = Some(client.prepare(STORED_ROW_QUERY, &[PgOid::from(pg_sys::TEXTOID)])?.keep());
            }
            client.select(plan.as_ref().expect("prepared"), Some(1), &args)
        })?;
        let Some(row) = table.into_iter().next() else {
            return Ok(None);
        };
        let same = row.get::<String>(1)?.as_deref() == Some(d.extract_query.as_str())
            && row.get::<String>(2)?.as_deref() == Some(d.count_src_query.as_str())
            && row.get::<String>(3)?.as_deref() == Some(d.merge_partitions_query.as_str())
            && row.get::<i32>(4)? == Some(d.update_group)
            && row.get::<JsonB>(5)?.map(|j| j.0) == Some(d.view_options_json())
            && row.get::<Vec<u8>>(6)?.as_deref() == Some(sources);
        if !same {
            return Ok(None);
        }
        Ok::<_, pgrx::spi::Error>(Some(StoredValidation {
            schema_ipc: row.get(7)?.unwrap_or_default(),
            schema_json: row.get::<JsonB>(8)?.map(|j| j.0).unwrap_or_default(),
            schema_hash: row.get(9)?.unwrap_or_default(),
            reads: row.get(10)?.unwrap_or_default(),
            warnings: row.get::<JsonB>(11)?.map(|j| j.0).unwrap_or_default(),
        }))
    })
    .unwrap_or_else(|e| pgrx::error!("reading the stored definition: {e}"))
}

/// Whether the definitions table has its `sources_hash` column (0.1.9):
/// an older version's tables, before or during `ALTER EXTENSION UPDATE`,
/// work with this library too (`src/pg/legacy.rs`), and have none. Asked of
/// the catalog caches at every write: a backend may see the column appear.
fn rows_keep_sources_hash() -> bool {
    // SAFETY: catalog cache look-ups on the backend's own thread, inside a
    // transaction (a trigger's or a function's call).
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"micromegas".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return false;
        }
        let table = pg_sys::get_relname_relid(c"lakehouse_view_set_definitions".as_ptr(), schema);
        table != pg_sys::InvalidOid
            && pg_sys::get_attnum(table, c"sources_hash".as_ptr()) != pg_sys::InvalidAttrNumber as i16
    }
}

/// How many validations this backend has planned so far.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn validations_planned() -> u64 {
    PLANNED.get()
}

/// Forgets the answers this backend remembers (a test's clean slate).
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn forget_validations() {
    MEMO.with_borrow_mut(VecDeque::clear);
    LAST_DERIVED.set(None);
}

/// What validation concluded for a definition against a catalog snapshot.
/// Validation is a pure function of these, so a repeated question within
/// the session (a replace's row is checked by the INSERT trigger that
/// redirects it, then by the UPDATE; a dependent re-checked, then
/// rewritten) gets the same answer without planning again.
struct Memo {
    key: (Derived, Vec<CatalogRow>, usize),
    prepared: Prepared,
    bytes: usize,
}

const MEMO_ENTRIES: usize = 160;
/// What the remembered answers may hold in the backend in all (their texts
/// and schemas): 160 answers about half-megabyte definitions would keep
/// hundreds of megabytes in every connection after its statements ended.
const MEMO_BYTES: usize = 16 * 1024 * 1024;

/// About what an answer holds: its texts and schemas (twice the IPC
/// schema's length stands for its JSON form).
fn memo_bytes(key: &(Derived, Vec<CatalogRow>, usize), prepared: &Prepared) -> usize {
    let d = &key.0;
    let texts = d.statement.as_ref().map_or(0, String::len)
        + d.definition.extract_query.len()
        + d.definition.count_src_query.len()
        + d.definition.merge_partitions_query.len()
        + d.mentioned.iter().map(String::len).sum::<usize>();
    let catalog: usize = key
        .1
        .iter()
        .map(|r| r.name.len() + r.schema_ipc.as_ref().map_or(0, String::len) + 64)
        .sum();
    texts + catalog + prepared.definition_sql.len() + 3 * prepared.schema_ipc.len() + 1024
}

thread_local! {
    static MEMO: RefCell<VecDeque<Memo>> = const { RefCell::new(VecDeque::new()) };
    /// The last row read and what it defines: the UPDATE a replace turns
    /// into carries the same row, and is not parsed again.
    static LAST_DERIVED: RefCell<Option<(RowInput, Derived)>> = const { RefCell::new(None) };
}

/// Whether `row` defines what `last` did: the same statement and columns,
/// and a name that is either not given or the one `last` defined. (The
/// INSERT of `mm_create_view` gives no name; the UPDATE a replace turns
/// into carries the row's. A given name only adds the check that it is the
/// defined one, so both derive the same.)
fn same_row(last: &RowInput, defined: &Derived, row: &RowInput) -> bool {
    let name_fits = |n: &Option<String>| n.as_ref().is_none_or(|n| *n == defined.definition.name);
    // Every field but the name (a field added to RowInput must be listed).
    let RowInput {
        view_set_name,
        definition_sql,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        view_options,
    } = last;
    name_fits(view_set_name)
        && name_fits(&row.view_set_name)
        && *definition_sql == row.definition_sql
        && *extract_query == row.extract_query
        && *count_src_query == row.count_src_query
        && *merge_partitions_query == row.merge_partitions_query
        && *update_group == row.update_group
        && *view_options == row.view_options
}

/// What `row` defines ([`prepare::derive`] in the helper process, or the
/// last answer when the row is the same).
fn derive(row: RowInput) -> micromegas_views_core::Result<Derived> {
    if let Some(derived) = LAST_DERIVED.with_borrow(|last| {
        last.as_ref()
            .filter(|(input, defined)| same_row(input, defined, &row))
            .map(|(_, derived)| derived.clone())
    }) {
        return Ok(derived);
    }
    let input = row.clone();
    let derived = run_isolated(row, prepare::derive)?;
    LAST_DERIVED.set(Some((input, derived.clone())));
    Ok(derived)
}

/// The statement a refusal was found in (its transaction's and its own
/// start) and the limits it was found under.
type Occasion = (i64, i64, std::time::Duration, usize);

fn this_statement() -> Occasion {
    // SAFETY: reads two timestamps of the backend's own transaction state.
    let (transaction, statement) = unsafe {
        (
            pg_sys::GetCurrentTransactionStartTimestamp(),
            pg_sys::GetCurrentStatementStartTimestamp(),
        )
    };
    (
        transaction,
        statement,
        settings::validation_timeout().0,
        settings::validation_memory_bytes(),
    )
}

/// A refusal found by planning ahead (`_mm_plan_ahead`), for the write of
/// the same statement to take instead of planning again: an error about
/// the definition, or a limit it reached (planning it again would reach it
/// again, and the write would take twice its time limit). Only within that
/// statement and under the same limits: a later one, or one with a raised
/// limit, plans anew.
struct Refusal {
    statement: Occasion,
    key: (Derived, Vec<CatalogRow>, usize),
    keep_failed: bool,
    error: micromegas_views_core::Error,
}

thread_local! {
    /// The refusals of the current statement (a write's own, and those of
    /// the dependents it planned ahead), at most `DEPENDENTS_AHEAD + 1`.
    static REFUSALS: RefCell<Vec<Refusal>> = const { RefCell::new(Vec::new()) };
}

fn refused(
    key: &(Derived, Vec<CatalogRow>, usize),
    keep_failed: bool,
) -> Option<micromegas_views_core::Error> {
    let statement = this_statement();
    REFUSALS.with_borrow(|all| {
        all.iter()
            .find(|r| r.statement == statement && &r.key == key && r.keep_failed == keep_failed)
            .map(|r| r.error.clone())
    })
}

fn remember_refusal(
    key: (Derived, Vec<CatalogRow>, usize),
    keep_failed: bool,
    error: &micromegas_views_core::Error,
) {
    let kind = error.kind;
    if kind.is_about_the_definition() || kind == ErrorKind::TimeLimit || kind == ErrorKind::MemoryLimit {
        let statement = this_statement();
        REFUSALS.with_borrow_mut(|all| {
            all.retain(|r| r.statement == statement);
            if all.len() > DEPENDENTS_AHEAD {
                all.remove(0);
            }
            all.push(Refusal {
                statement,
                key,
                keep_failed,
                error: error.clone(),
            });
        });
    }
}

fn remembered(key: &(Derived, Vec<CatalogRow>, usize)) -> Option<Prepared> {
    MEMO.with_borrow(|memo| {
        memo.iter()
            .find(|m| &m.key == key)
            .map(|m| m.prepared.clone())
    })
}

fn remember(key: (Derived, Vec<CatalogRow>, usize), prepared: Prepared) {
    let bytes = memo_bytes(&key, &prepared);
    if bytes > MEMO_BYTES / 4 {
        // Too big to keep: asked again, it is planned again.
        return;
    }
    MEMO.with_borrow_mut(|memo| {
        let mut held: usize = memo.iter().map(|m| m.bytes).sum();
        while !memo.is_empty() && (memo.len() >= MEMO_ENTRIES || held + bytes > MEMO_BYTES) {
            held -= memo.pop_front().map_or(0, |m| m.bytes);
        }
        memo.push_back(Memo { key, prepared, bytes });
    })
}

/// Derives and validates a definitions row against the catalog as stored,
/// except for the view sets in `overrides`, which are taken as given (a
/// read-only dry run's not-yet-written schemas). Remembered per backend;
/// a write of the definition a view already stores, against the sources it
/// was validated with, takes the stored answer (`stored_validation`). Also
/// returns the hash of the sources, which the row stores (none for a dry
/// run's overrides or a row kept as failed).
pub(super) fn prepare_row(
    row: RowInput,
    keep_failed: bool,
    overrides: &[CatalogRow],
) -> (Derived, Prepared, Option<Vec<u8>>) {
    try_prepare_row(row, keep_failed, overrides).or_raise()
}

/// [`prepare_row`], its own errors returned (Postgres' are still raised:
/// an SPI failure, out of memory, a cancel).
fn try_prepare_row(
    row: RowInput,
    keep_failed: bool,
    overrides: &[CatalogRow],
) -> micromegas_views_core::Result<(Derived, Prepared, Option<Vec<u8>>)> {
    // Only a write naming an existing view can find its stored row: a
    // replace, or a row written with its name (a plain CREATE is new).
    let named = row.view_set_name.is_some();
    let derived = derive(row)?;
    let mut rows = catalog_rows(&derived.mentioned, &derived.definition.name);
    for given in overrides {
        if !derived.mentioned.contains(&given.name) || given.name == derived.definition.name {
            continue;
        }
        match rows.iter_mut().find(|r| r.name == given.name) {
            Some(stored) => *stored = given.clone(),
            None => rows.push(given.clone()),
        }
    }
    let max_plan_nodes = settings::max_plan_nodes();
    let sources = overrides
        .is_empty()
        .then(|| prepare::sources_hash(&rows, max_plan_nodes, env!("CARGO_PKG_VERSION")));
    let key = (derived, rows, max_plan_nodes);
    let reusable = |d: &Derived| {
        !keep_failed && d.parse_error.is_none() && (named || d.or_replace)
    };
    let prepared = match remembered(&key) {
        Some(prepared) => prepared,
        None => match sources
            .as_deref()
            .filter(|_| reusable(&key.0))
            .and_then(|sources| stored_validation(&key.0, sources))
        {
            Some(stored) => {
                let prepared = prepare::reuse(&key.0, stored);
                remember(key.clone(), prepared.clone());
                prepared
            }
            None => {
                if let Some(error) = refused(&key, keep_failed) {
                    return Err(error);
                }
                let (derived, rows) = (key.0.clone(), key.1.clone());
                PLANNED.set(PLANNED.get() + 1);
                let prepared = run_isolated(
                    (derived, rows, keep_failed),
                    |(derived, rows, keep_failed)| prepare::prepare(&derived, &rows, keep_failed),
                )
                .inspect_err(|e| remember_refusal(key.clone(), keep_failed, e))?;
                if prepared.load_error.is_none() {
                    remember(key.clone(), prepared.clone());
                }
                prepared
            }
        },
    };
    let sources = sources.filter(|_| prepared.load_error.is_none());
    Ok((key.0, prepared, sources))
}

/// A definitions row as the SQL functions receive it, its columns one by
/// one.
pub(super) fn row_input(
    view_set_name: Option<String>,
    definition_sql: Option<String>,
    extract_query: Option<String>,
    count_src_query: Option<String>,
    merge_partitions_query: Option<String>,
    update_group: Option<i32>,
    view_options: Option<JsonB>,
) -> RowInput {
    RowInput {
        view_set_name,
        definition_sql,
        extract_query,
        count_src_query,
        merge_partitions_query,
        update_group,
        view_options: view_options.map(|j| j.0),
    }
}

/// The columns `_mm_prepare_definition` returns: every derived column of
/// a definitions row, the sources' hash last (0.1.6 to 0.1.8 return all but
/// that one: src/pg/legacy.rs).
pub(super) type DefinitionColumns = (
    String,
    bool,
    String,
    String,
    String,
    String,
    i32,
    JsonB,
    String,
    JsonB,
    Vec<u8>,
    Vec<String>,
    Option<String>,
    JsonB,
    Option<Vec<u8>>,
);

/// `row` derived and validated ([`prepare_row`]), as those columns.
pub(super) fn definition_columns(row: RowInput, keep_failed: bool) -> DefinitionColumns {
    let (derived, prepared, sources) = prepare_row(row, keep_failed, &[]);
    let d = derived.definition;
    (
        d.name,
        derived.or_replace,
        prepared.definition_sql,
        d.extract_query,
        d.count_src_query,
        d.merge_partitions_query,
        d.update_group,
        JsonB(prepared.view_options),
        prepared.schema_ipc,
        JsonB(prepared.schema_json),
        prepared.schema_hash,
        prepared.reads,
        prepared.load_error,
        JsonB(prepared.warnings),
        sources,
    )
}

/// A stored definition's columns, as a row to validate again.
pub(super) fn stored_row(
    view_set_name: String,
    extract_query: String,
    count_src_query: String,
    merge_partitions_query: String,
    update_group: i32,
    view_options: Option<serde_json::Value>,
) -> RowInput {
    RowInput {
        view_set_name: Some(view_set_name),
        definition_sql: None,
        extract_query: Some(extract_query),
        count_src_query: Some(count_src_query),
        merge_partitions_query: Some(merge_partitions_query),
        update_group: Some(update_group),
        view_options,
    }
}

/// The dry run's not-yet-written view sets (four parallel arrays).
pub(super) fn overrides_from(
    names: Vec<String>,
    schemas: Vec<String>,
    groups: Vec<i32>,
    errors: Vec<Option<String>>,
) -> Vec<CatalogRow> {
    let n = names.len();
    if schemas.len() != n || groups.len() != n || errors.len() != n {
        pgrx::error!("micromegas_views: names, schemas, groups and errors differ in length");
    }
    names
        .into_iter()
        .zip(schemas)
        .zip(groups)
        .zip(errors)
        .map(|(((name, schema_ipc), group), load_error)| CatalogRow {
            name,
            schema_ipc: Some(schema_ipc),
            update_group: Some(group),
            kind: SourceKind::Defined,
            load_error,
        })
        .collect()
}

/// A re-check of a stored dependent: its schema as it validates now, or
/// why it does not — an error about the definition itself, by its kind
/// (`ErrorKind::is_about_the_definition`), never by its text. Any other
/// error (the time limit, a cancel, a bug; Postgres' own, raised as they
/// happen) is raised, naming the dependent: it says nothing about the
/// view, so the change fails instead of marking it.
pub(super) fn recheck(row: RowInput, overrides: &[CatalogRow]) -> (Option<String>, Option<String>) {
    let name = row.view_set_name.clone().unwrap_or_default();
    match try_prepare_row(row, false, overrides) {
        Ok((_, prepared, _)) => (Some(prepared.schema_ipc), None),
        Err(e) if e.kind.is_about_the_definition() => (None, Some(e.message)),
        Err(mut e) => {
            let context = format!("While re-checking materialized view \"{name}\".");
            e.detail = Some(match e.detail.take() {
                Some(detail) => format!("{detail}\n{context}"),
                None => context,
            });
            raise(e)
        }
    }
}

/// The stored definitions that read a view set, in the order the re-check
/// visits them (`_mm_recheck`), with what they store now.
const DEPENDENTS_QUERY: &str = "
    SELECT d.view_set_name, d.extract_query, d.count_src_query, d.merge_partitions_query,
           d.update_group, d.view_options, d.schema_ipc, d.load_status = 'ok', d.definition_sql
      FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.reads @> ARRAY[$1]
     ORDER BY d.update_group, d.view_set_name";

/// The stored row of a view set by name: its schema, group and whether it
/// loads (NULL when there is none).
const OWN_ROW_QUERY: &str = "
    SELECT d.schema_ipc, d.update_group, d.load_status = 'ok'
      FROM micromegas.lakehouse_view_set_definitions d
     WHERE d.view_set_name = $1";

/// At most this many validations of dependents are made ahead of one write,
/// so that the write's own answer stays among the ones remembered
/// (`MEMO_ENTRIES`); the re-check plans the rest under the lock.
const DEPENDENTS_AHEAD: usize = 128;

/// A stored dependent as the re-check reads it.
struct Dependent {
    row: RowInput,
    schema_ipc: Option<String>,
    loads: bool,
    definition_sql: Option<String>,
}

fn dependents_of(name: &str) -> Vec<Dependent> {
    Spi::connect(|client| {
        let args = [name.to_owned().into()];
        let mut found = Vec::new();
        for row in client.select(DEPENDENTS_QUERY, None, &args)? {
            found.push(Dependent {
                row: stored_row(
                    row.get(1)?.unwrap_or_default(),
                    row.get(2)?.unwrap_or_default(),
                    row.get(3)?.unwrap_or_default(),
                    row.get(4)?.unwrap_or_default(),
                    row.get(5)?.unwrap_or_default(),
                    row.get::<JsonB>(6)?.map(|j| j.0),
                ),
                schema_ipc: row.get(7)?,
                loads: row.get(8)?.unwrap_or(false),
                definition_sql: row.get(9)?,
            });
        }
        Ok::<_, pgrx::spi::Error>(found)
    })
    .unwrap_or_else(|e| pgrx::error!("reading the view set catalog: {e}"))
}

/// Plans, ahead of the catalog lock, the re-check that writing `derived`
/// (validated as `prepared`) will make of the definitions reading it
/// (`_mm_recheck`), when the write changes what they read: its
/// schema or group, or it loads again.
fn plan_dependents_of_definition_ahead(derived: &Derived, prepared: &Prepared) {
    let name = &derived.definition.name;
    let written = CatalogRow {
        name: name.clone(),
        schema_ipc: Some(prepared.schema_ipc.clone()),
        update_group: Some(derived.definition.update_group),
        kind: SourceKind::Defined,
        load_error: None,
    };
    let stored = Spi::connect(|client| {
        let args = [name.clone().into()];
        let table = client.select(OWN_ROW_QUERY, Some(1), &args)?;
        match table.into_iter().next() {
            Some(row) => Ok::<_, pgrx::spi::Error>(Some((
                row.get::<String>(1)?,
                row.get::<i32>(2)?,
                row.get::<bool>(3)?.unwrap_or(false),
            ))),
            None => Ok(None),
        }
    })
    .unwrap_or_else(|e| pgrx::error!("reading the view set catalog: {e}"));
    let unchanged = |(schema, group, loads): &(Option<String>, Option<i32>, bool)| {
        *loads && schema == &written.schema_ipc && group == &written.update_group
    };
    if !stored.as_ref().is_none_or(unchanged) {
        plan_dependents_ahead(written);
    }
}

/// Plans ahead of the catalog lock the re-check of the definitions reading
/// `written`, the view set as the write will store it. Each dependent is
/// planned against the catalog as it will be once the write is stored (the
/// written view set, and any dependent whose own schema moves, taken as
/// given), so the re-check under the lock finds the answer remembered under
/// exactly the catalog rows it then reads, and a long dependent holds no
/// other writer. A dependent that no longer validates, or reaches a limit,
/// is left for the re-check to decide (and its own dependents with it).
fn plan_dependents_ahead(written: CatalogRow) {
    let _limit = settings::RecheckAhead::begin();
    let name = written.name.clone();
    let mut ahead = Ahead {
        given: vec![written],
        rewritten: HashMap::new(),
        planned: 0,
    };
    ahead.visit(&name);
}

/// The re-check's walk, done ahead: `_mm_recheck` visits the
/// dependents of a changed view set in (update_group, name) order, and the
/// rewrite of one whose schema moved re-checks that one's dependents at
/// once, depth first. A dependent reached twice (a diamond) is planned in
/// each state the walk meets it in, as the re-check under the lock will.
struct Ahead {
    /// The catalog as the walk has changed it so far: the written view set,
    /// then each dependent rewritten (its latest schema).
    given: Vec<CatalogRow>,
    /// Rewritten dependents' latest stored schema (what a later visit's
    /// loop reads as stored).
    rewritten: HashMap<String, Option<String>>,
    planned: usize,
}

impl Ahead {
    fn visit(&mut self, source: &str) {
        // The loop reads its rows when it opens: a dependent rewritten
        // while it runs is compared with what it was then.
        let deps: Vec<(Dependent, Option<String>, bool)> = dependents_of(source)
            .into_iter()
            .map(|d| {
                let name = d.row.view_set_name.clone().unwrap_or_default();
                match self.rewritten.get(&name) {
                    Some(schema) => {
                        let schema = schema.clone();
                        (d, schema, true)
                    }
                    None => {
                        let (schema, loads) = (d.schema_ipc.clone(), d.loads);
                        (d, schema, loads)
                    }
                }
            })
            .collect();
        for (dep, stored_schema, loads) in deps {
            if self.planned >= DEPENDENTS_AHEAD {
                return;
            }
            let dep_name = dep.row.view_set_name.clone().unwrap_or_default();
            self.planned += 1;
            let mut rewrite = dep.row.clone();
            let Ok((dep_derived, dep_prepared, _)) = try_prepare_row(dep.row, false, &self.given) else {
                continue;
            };
            if loads && stored_schema.as_deref() == Some(dep_prepared.schema_ipc.as_str()) {
                continue;
            }
            // Its schema moves, or it loads again: the re-check rewrites
            // its row (validated from its stored text and columns), then
            // re-checks its own dependents (_mm_definitions_after_update).
            rewrite.definition_sql = dep.definition_sql;
            self.planned += 1;
            if self.planned > DEPENDENTS_AHEAD || try_prepare_row(rewrite, false, &self.given).is_err() {
                continue;
            }
            let row = CatalogRow {
                name: dep_name.clone(),
                schema_ipc: Some(dep_prepared.schema_ipc.clone()),
                update_group: Some(dep_derived.definition.update_group),
                kind: SourceKind::Defined,
                load_error: None,
            };
            match self.given.iter_mut().find(|g| g.name == dep_name) {
                Some(g) => *g = row,
                None => self.given.push(row),
            }
            self.rewritten.insert(dep_name.clone(), Some(dep_prepared.schema_ipc));
            self.visit(&dep_name);
        }
    }
}

/// The SQL-callable steps. They are created unqualified, in the extension's
/// schema (`schema = micromegas` in the control file): a `#[pg_schema]`
/// module would emit `CREATE SCHEMA IF NOT EXISTS`, which Postgres refuses
/// for a schema the extension does not own.
mod micromegas {
    use super::*;

    /// Everything a definitions row stores, derived from what was written:
    /// the statement text, the columns, or both (they must agree). Parses,
    /// reads the view sets the queries mention, plans and checks. With
    /// `keep_failed`, a restored row whose queries no longer plan comes back
    /// with `load_error` set instead of an error.
    /// (Its C symbol is new in 0.1.9, `prepare_definition_row_wrapper`, as
    /// it returns one more column: a backend still running an older library
    /// finds no such symbol instead of filling 15 columns from 14. Older
    /// install scripts name `prepare_definition_wrapper`: src/pg/legacy.rs.)
    #[pg_extern(volatile, name = "_mm_prepare_definition")]
    #[allow(clippy::too_many_arguments)]
    fn prepare_definition_row(
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
            name!(sources_hash, Option<Vec<u8>>),
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
        TableIterator::once(definition_columns(row, keep_failed))
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_prepare_definition(text,text,text,text,text,integer,jsonb,boolean) IS
  'Derives and validates a definition row (statement text, columns or both): every derived column, the findings and the sources'' hash, or the error';"#,
        name = "comment_mm_prepare_definition",
        requires = [prepare_definition_row],
    );

    /// Plans a definitions row ahead of its write, before the catalog lock
    /// is taken: the answer is remembered under the catalog rows it read,
    /// so the write's own call under the lock takes it from memory when
    /// those rows have not moved, and plans again when they have. Whether
    /// the row would be refused is the write's to say: this only answers
    /// whether an answer is now remembered.
    ///
    /// If the catalog moved while it planned (another write committed), it
    /// plans again, up to three times, still without the lock: a long
    /// planning whose upstream was replaced meanwhile would otherwise plan
    /// again under the lock, holding every other writer for as long.
    #[pg_extern(volatile, name = "_mm_plan_ahead")]
    #[allow(clippy::too_many_arguments)]
    fn plan_ahead(
        view_set_name: Option<String>,
        definition_sql: Option<String>,
        extract_query: Option<String>,
        count_src_query: Option<String>,
        merge_partitions_query: Option<String>,
        update_group: Option<i32>,
        view_options: Option<JsonB>,
    ) -> bool {
        let row = row_input(
            view_set_name,
            definition_sql,
            extract_query,
            count_src_query,
            merge_partitions_query,
            update_group,
            view_options,
        );
        let version = || {
            pgrx::Spi::get_one::<i64>("SELECT micromegas.mm_catalog_version()")
                .ok()
                .flatten()
        };
        let mut ok = false;
        for _ in 0..3 {
            let before = version();
            ok = match try_prepare_row(row.clone(), false, &[]) {
                Ok((derived, prepared, _)) => {
                    plan_dependents_of_definition_ahead(&derived, &prepared);
                    true
                }
                Err(_) => false,
            };
            if version() == before {
                break;
            }
        }
        ok
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_plan_ahead(text,text,text,text,text,integer,jsonb) IS
  'Plans a definitions row, and the re-check of the definitions reading it, before its write takes the catalog lock; the write takes the answers from memory unless the catalog rows they read moved';"#,
        name = "comment_mm_plan_ahead",
        requires = [plan_ahead],
    );

    /// Plans, before `mm_register_builtin_view_set` takes the catalog lock,
    /// the re-check its write will make of the definitions reading the
    /// built-in, when the write changes its schema, group or kind: under
    /// the lock the re-check takes those answers from memory. Whether the
    /// schema is refused is the write's to say: this answers whether it
    /// parsed.
    #[pg_extern(volatile, name = "_mm_plan_builtin_ahead")]
    fn plan_builtin_ahead(name: String, schema_text: String, update_group: i32, kind: String) -> bool {
        // A name a definition holds is refused by the write: nothing to
        // plan (and no re-check's time limit to give).
        let defined = Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = $1)",
            &[name.clone().into()],
        )
        .unwrap_or_else(|e| pgrx::error!("reading the view set catalog: {e}"));
        if defined == Some(true) {
            return false;
        }
        let parsed = run_isolated(schema_text, |text| {
            let parsed = schema::parse_any(&text)?;
            schema::to_ipc_base64(&parsed)
        });
        let Ok(schema_ipc) = parsed else {
            return false;
        };
        let stored = Spi::get_one_with_args::<bool>(
            "SELECT (SELECT b.schema_ipc = $2 AND b.update_group = $3 AND b.kind = $4
                       FROM micromegas.builtin_view_sets b WHERE b.view_set_name = $1)",
            &[name.clone().into(), schema_ipc.clone().into(), update_group.into(), kind.clone().into()],
        )
        .unwrap_or_else(|e| pgrx::error!("reading the view set catalog: {e}"));
        if stored != Some(true) {
            plan_dependents_ahead(CatalogRow {
                name,
                schema_ipc: Some(schema_ipc),
                update_group: Some(update_group),
                kind: source_kind(&kind),
                load_error: None,
            });
        }
        true
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_plan_builtin_ahead(text,text,integer,text) IS
  'Plans, before a built-in''s registration takes the catalog lock, the re-check of the definitions reading it when the registration changes their input';"#,
        name = "comment_mm_plan_builtin_ahead",
        requires = [plan_builtin_ahead],
    );

    /// A re-check of a stored dependent after a view set it reads changed
    /// (`_mm_recheck`), as if the DDL view sets `names` had the schemas,
    /// groups and load errors (NULL: it loads) given beside them (none in a
    /// write; what a dry run would have written so far, which a hot standby
    /// cannot write to find out): its schema as it validates now, or why it
    /// no longer does — an error about the definition itself, returned as
    /// `problem` (see `ErrorKind::is_about_the_definition`). Any other error
    /// (the time limit, a cancel, Postgres running out of a resource, a
    /// bug) is raised: it says nothing about the dependent, so the change
    /// that caused the re-check fails instead of marking it.
    #[pg_extern(stable, name = "_mm_recheck_definition_with")]
    #[allow(clippy::too_many_arguments)]
    fn recheck_definition_with(
        view_set_name: String,
        extract_query: String,
        count_src_query: String,
        merge_partitions_query: String,
        update_group: i32,
        view_options: JsonB,
        names: Vec<String>,
        schemas: Vec<String>,
        groups: Vec<i32>,
        errors: Vec<Option<String>>,
    ) -> TableIterator<'static, (name!(schema_ipc, Option<String>), name!(problem, Option<String>))>
    {
        let overrides = overrides_from(names, schemas, groups, errors);
        let row = stored_row(
            view_set_name,
            extract_query,
            count_src_query,
            merge_partitions_query,
            update_group,
            Some(view_options.0),
        );
        TableIterator::once(recheck(row, &overrides))
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_recheck_definition_with(text,text,text,text,integer,jsonb,text[],text[],integer[],text[]) IS
  'A re-check of a stored dependent, as if the given DDL views had the given schemas, groups and load errors (a dry run''s so far): its schema as it validates now, or why it does not (an error about the definition itself); any other error is raised';"#,
        name = "comment_mm_recheck_definition_with",
        requires = [recheck_definition_with],
    );

    /// What a statement names: `create` (with OR REPLACE) or `drop` (with IF
    /// EXISTS). A bare view name is a drop of it. The name rule is applied.
    #[pg_extern(immutable, parallel_safe, name = "_mm_statement_target")]
    fn statement_target(
        statement: &str,
    ) -> TableIterator<
        'static,
        (
            name!(kind, String),
            name!(view_set_name, String),
            name!(or_replace, bool),
            name!(if_exists, bool),
        ),
    > {
        let target = run_isolated(statement.to_owned(), |text| {
            if let Some(bare) = ddl::bare_name(&text) {
                check_name(&bare, NameUse::Reference)?;
                return Ok(("drop".to_string(), bare, false, false));
            }
            Ok(match ddl::parse(&text)? {
                Statement::Create(create) => {
                    check_view_name(&create.name)?;
                    ("create".to_string(), create.name, create.or_replace, false)
                }
                Statement::Drop(drop) => {
                    check_name(&drop.name, NameUse::Reference)?;
                    ("drop".to_string(), drop.name, false, drop.if_exists)
                }
            })
        })
        .or_raise();
        TableIterator::once(target)
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_statement_target(text) IS
  'What a statement names: create (or replace) or drop, the view name, and IF EXISTS';"#,
        name = "comment_mm_statement_target",
        requires = [statement_target],
    );

    /// Reads a schema given as JSON or base64 Arrow IPC: its stored forms.
    #[pg_extern(immutable, parallel_safe, name = "_mm_schema_forms")]
    fn schema_forms(
        schema_text: &str,
    ) -> TableIterator<
        'static,
        (
            name!(schema_ipc, String),
            name!(schema_json, JsonB),
            name!(schema_hash, Vec<u8>),
        ),
    > {
        let (ipc, json, hash) = run_isolated(schema_text.to_owned(), |text| {
            let parsed = schema::parse_any(&text)?;
            Ok((
                schema::to_ipc_base64(&parsed)?,
                schema::to_json(&parsed),
                schema::schema_hash_bytes(&parsed).to_vec(),
            ))
        })
        .or_raise();
        TableIterator::once((ipc, JsonB(json), hash))
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_schema_forms(text) IS
  'A schema given as JSON or base64 Arrow IPC: its IPC, JSON and hash';"#,
        name = "comment_mm_schema_forms",
        requires = [schema_forms],
    );

    /// The readable one-field-per-line form of a stored schema.
    #[pg_extern(immutable, parallel_safe, name = "_mm_format_schema")]
    fn format_schema(schema_ipc: &str) -> String {
        run_isolated(schema_ipc.to_owned(), |text| {
            Ok(schema::format(&*schema::from_ipc_base64(&text)?))
        })
        .or_raise()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_format_schema(text) IS
  'A stored base64 Arrow IPC schema, one field per line';"#,
        name = "comment_mm_format_schema",
        requires = [format_schema],
    );

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
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_check_name(text,text) IS
  'Applies the name rule of a use (create, reference or builtin), raising its error';"#,
        name = "comment_mm_check_name",
        requires = [check_name_sql],
    );

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
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_creating_extension() IS
  'True only while this extension''s own CREATE or ALTER EXTENSION script runs';"#,
        name = "comment_mm_creating_extension",
        requires = [creating_extension],
    );

    /// The built-in view sets CREATE EXTENSION seeds.
    #[pg_extern(immutable, parallel_safe, name = "_mm_shipped_builtins")]
    fn shipped_builtins() -> JsonB {
        JsonB(builtins())
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_shipped_builtins() IS
  'The built-in view sets CREATE EXTENSION seeds (JSON)';"#,
        name = "comment_mm_shipped_builtins",
        requires = [shipped_builtins],
    );

    /// The log_stats definition CREATE EXTENSION ships.
    #[pg_extern(immutable, parallel_safe, name = "_mm_shipped_log_stats")]
    fn shipped_log_stats() -> &'static str {
        LOG_STATS_SQL.trim_end()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_shipped_log_stats() IS
  'The log_stats statement CREATE EXTENSION ships';"#,
        name = "comment_mm_shipped_log_stats",
        requires = [shipped_log_stats],
    );
}
