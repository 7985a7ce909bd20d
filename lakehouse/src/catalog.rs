//! What the lakehouse reads from and writes to the extension: the view
//! sets (DDL definitions and built-ins, with their stored schemas), the
//! partitions, and the swap that records a written one.

use crate::{Error, Result};
use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::SchemaRef;
use tokio_postgres::Client;

/// A view set the lakehouse can read or write.
#[derive(Clone, Debug)]
pub struct ViewSet {
    pub name: String,
    pub update_group: i32,
    /// `None` for a built-in: it is a source, read from `sources/<name>/`.
    pub queries: Option<Queries>,
    pub schema: SchemaRef,
    pub schema_hash: Vec<u8>,
    /// What its three queries read (the catalog's `reads`; empty for a
    /// built-in).
    pub reads: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Queries {
    pub extract: String,
    pub count_src: String,
    pub merge: String,
    pub min_time_column: String,
    pub max_time_column: String,
    pub source_delta_seconds: i64,
    pub merge_delta_seconds: i64,
    pub merge_sort_order: Option<Vec<String>>,
    /// The view's `auto_refresh` option: the daemon's ticks keep it fresh.
    pub auto_refresh: bool,
}

fn decode_schema(name: &str, ipc: &str) -> Result<SchemaRef> {
    micromegas_views_core::schema::from_ipc_base64(ipc)
        .map_err(|e| Error::msg(format!("the stored schema of \"{name}\": {e}")))
}

fn delta(name: &str, options: &serde_json::Value, key: &str) -> Result<i64> {
    let text = options.get(key).and_then(|v| v.as_str()).unwrap_or("1 day");
    micromegas_views_core::options::delta_seconds(text)
        .map(|s| s as i64)
        .ok_or_else(|| Error::msg(format!("\"{name}\": {key} \"{text}\" is not a delta")))
}

/// Every view set of the catalog, in materialization order (update_group,
/// then name): the loadable DDL definitions and the registered built-ins
/// that have a schema.
pub async fn view_sets(client: &Client) -> Result<Vec<ViewSet>> {
    let snapshot = micromegas_views_client::load_snapshot(client).await?;
    let builtins = builtins(client).await?;
    combine(&snapshot.views, builtins)
}

/// The DDL definitions of a snapshot (a Watcher's, say) and the built-ins,
/// in materialization order; a definition shadows a built-in of its name.
pub fn combine(
    definitions: &[micromegas_views_client::ViewDefinition],
    builtins: Vec<ViewSet>,
) -> Result<Vec<ViewSet>> {
    let mut out = Vec::new();
    for v in definitions {
        out.push(from_definition(v)?);
    }
    for b in builtins {
        if !out.iter().any(|v| v.name == b.name) {
            out.push(b);
        }
    }
    out.sort_by(|a, b| (a.update_group, &a.name).cmp(&(b.update_group, &b.name)));
    Ok(out)
}

fn from_definition(v: &micromegas_views_client::ViewDefinition) -> Result<ViewSet> {
    let options = &v.view_options;
    let column = |key: &str| {
        options
            .get(key)
            .and_then(|c| c.as_str())
            .map(str::to_string)
            .ok_or_else(|| Error::msg(format!("\"{}\" has no {key}", v.name)))
    };
    let sort = options
        .get("merge_sort_order")
        .and_then(|s| s.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .filter(|a| !a.is_empty());
    Ok(ViewSet {
        schema: decode_schema(&v.name, &v.schema_ipc)?,
        queries: Some(Queries {
            extract: v.extract_query.clone(),
            count_src: v.count_src_query.clone(),
            merge: v.merge_partitions_query.clone(),
            min_time_column: column("min_time_column")?,
            max_time_column: column("max_time_column")?,
            source_delta_seconds: delta(&v.name, options, "source_partition_delta")?,
            merge_delta_seconds: delta(&v.name, options, "merge_partition_delta")?,
            merge_sort_order: sort,
            auto_refresh: v.auto_refresh,
        }),
        name: v.name.clone(),
        update_group: v.update_group,
        schema_hash: v.schema_hash.clone(),
        reads: v.reads.clone(),
    })
}

/// The registered built-ins that have a schema (the sources), by name.
pub async fn builtins(client: &Client) -> Result<Vec<ViewSet>> {
    let rows = client
        .query(
            "SELECT view_set_name, coalesce(update_group, 0), schema_ipc, schema_hash \
               FROM micromegas.builtin_view_sets WHERE schema_ipc IS NOT NULL AND schema_ipc <> '' \
              ORDER BY view_set_name",
            &[],
        )
        .await?;
    let mut out = Vec::new();
    for row in rows {
        let name: String = row.get(0);
        let ipc: String = row.get(2);
        out.push(ViewSet {
            schema: decode_schema(&name, &ipc)?,
            update_group: row.get(1),
            queries: None,
            schema_hash: row.get::<_, Option<Vec<u8>>>(3).unwrap_or_default(),
            reads: Vec::new(),
            name,
        });
    }
    Ok(out)
}

/// The built-in sources with the schemas the extension ships (what a
/// catalog holds until a service registers its own).
pub fn shipped_sources() -> Result<Vec<ViewSet>> {
    micromegas_views_core::builtins::builtin_rows()
        .into_iter()
        .filter_map(|row| row.schema_ipc.clone().map(|ipc| (row, ipc)))
        .map(|(row, ipc)| {
            let schema = decode_schema(&row.name, &ipc)?;
            Ok(ViewSet {
                schema_hash: micromegas_views_core::schema::schema_hash_bytes(&schema).to_vec(),
                schema,
                update_group: row.update_group.unwrap_or(0),
                queries: None,
                reads: Vec::new(),
                name: row.name,
            })
        })
        .collect()
}

/// A partition row, as far as the lakehouse uses it.
#[derive(Clone, Debug)]
pub struct Partition {
    pub begin: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub file_path: Option<String>,
    pub file_size: i64,
    pub source_count: Option<i64>,
    pub num_rows: i64,
    pub sort_order: Option<Vec<String>>,
}

/// The `global` partitions of `view` with `schema_hash` whose insert range
/// overlaps `[begin, end)` (all of them without a range), by begin.
pub async fn partitions(
    client: &Client,
    view: &str,
    schema_hash: &[u8],
    range: Option<(DateTime<Utc>, DateTime<Utc>)>,
) -> Result<Vec<Partition>> {
    let (begin, end) = range
        .map(|(b, e)| (Some(b), Some(e)))
        .unwrap_or((None, None));
    let rows = client
        .query(
            "SELECT begin_insert_time, end_insert_time, file_path, coalesce(file_size, 0), \
                    source_data_hash, num_rows, sort_order \
               FROM micromegas.lakehouse_partitions \
              WHERE view_set_name = $1 AND view_instance_id = 'global' AND file_schema_hash = $2 \
                AND ($3::timestamptz IS NULL OR end_insert_time > $3) \
                AND ($4::timestamptz IS NULL OR begin_insert_time < $4) \
              ORDER BY begin_insert_time, end_insert_time",
            &[&view, &schema_hash, &begin, &end],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let hash: Option<Vec<u8>> = r.get(4);
            Partition {
                begin: r.get(0),
                end: r.get(1),
                file_path: r.get(2),
                file_size: r.get(3),
                source_count: hash
                    .filter(|h| h.len() == 8)
                    .map(|h| i64::from_le_bytes(h.try_into().expect("8 bytes"))),
                num_rows: r.get(5),
                sort_order: r.get(6),
            }
        })
        .collect())
}

/// A partition written to the lake, to be recorded.
#[derive(Clone, Debug)]
pub struct Written {
    pub file_path: Option<String>,
    pub file_size: i64,
    pub min_event_time: Option<DateTime<Utc>>,
    pub max_event_time: Option<DateTime<Utc>>,
    pub num_rows: i64,
    pub sort_order: Option<Vec<String>>,
}

/// Records `written` as the partition of `[begin, end)` and retires what
/// that range contains, in one transaction (`mm_replace_partitions`): the
/// extension queues the files no partition references any more.
#[allow(clippy::too_many_arguments)]
pub async fn record(
    client: &Client,
    view: &str,
    begin: DateTime<Utc>,
    end: DateTime<Utc>,
    schema_hash: &[u8],
    source_count: i64,
    written: &Written,
) -> Result<()> {
    client
        .query(
            "SELECT * FROM micromegas.mm_replace_partitions($1::text, 'global', $2::timestamptz, \
               $3::timestamptz, ARRAY[ROW( \
               $1::text, 'global', $2::timestamptz, $3::timestamptz, $4::timestamptz, $5::timestamptz, \
               now(), $6::text, $7::bigint, $8::bytea, $9::bytea, $10::bigint, 1, $11::text[], NULL \
             )::micromegas.lakehouse_partitions])",
            &[
                &view,
                &begin,
                &end,
                &written.min_event_time,
                &written.max_event_time,
                &written.file_path,
                &written.file_size,
                &schema_hash,
                &source_count.to_le_bytes().to_vec(),
                &written.num_rows,
                &written.sort_order,
            ],
        )
        .await?;
    Ok(())
}
