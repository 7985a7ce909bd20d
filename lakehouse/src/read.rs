//! The read path: a DataFusion session in which every source is a table
//! over its Parquet files and every view is its merge query over its
//! partitions of the current schema hash, as micromegas registers a
//! `SqlBatchView` (`__<view>__partitions`, then `<view>` as the merge query
//! over it). A partition of another schema hash is never read.

use crate::catalog::{self, ViewSet};
use crate::lake::Lake;
use crate::{Error, Result};
use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::FileFormat;
use object_store::ObjectMeta;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio_postgres::Client;

/// Source files already checked against the catalog's schema, by path and
/// size (an object is immutable once written).
#[derive(Default, Clone)]
pub struct CheckedFiles(Arc<Mutex<HashSet<FileKey>>>);

/// A source file: its path, its size and the source it was checked for.
type FileKey = (String, u64, String);

/// The memory one session may use for its operators, past which sorts and
/// aggregations spill to disk or the query fails:
/// `MICROMEGAS_VIEWS_MEMORY_MB` (default 2048).
fn memory_limit() -> usize {
    std::env::var("MICROMEGAS_VIEWS_MEMORY_MB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(2048)
        << 20
}

pub fn new_context() -> SessionContext {
    new_context_with(memory_limit())
}

/// A session whose operators may use `memory_bytes` in all, past which
/// sorts and aggregations spill or the query fails.
pub fn new_context_with(memory_bytes: usize) -> SessionContext {
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_limit(memory_bytes, 1.0)
        .build_arc()
        .expect("a runtime environment");
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_target_partitions(2);
    // The catalog's types are what a file is read as (Utf8, not Utf8View).
    config.options_mut().execution.parquet.schema_force_view_types = false;
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    bound_amplifying_functions(&ctx, memory_bytes);
    ctx
}

/// Replaces, in `ctx`, the functions whose output can be many times their
/// input (`repeat`, `lpad`, `range`, …) with versions that refuse a call
/// whose output would pass `memory_bytes`: the memory pool does not count
/// what an expression allocates (micromegas_views_core::bounded).
pub fn bound_amplifying_functions(ctx: &SessionContext, memory_bytes: usize) {
    for name in micromegas_views_core::bounded::AMPLIFYING_FUNCTIONS {
        if let Ok(udf) = datafusion::execution::FunctionRegistry::udf(ctx, name) {
            if let Some(bounded) = micromegas_views_core::bounded::bounded(&udf, memory_bytes) {
                ctx.register_udf(bounded);
            }
        }
    }
}

/// The insert-time range a session is restricted to: a bucket's
/// `[begin, end)` when the daemon materializes it, none for a query.
pub type InsertRange = Option<(DateTime<Utc>, DateTime<Utc>)>;

/// A UTC instant as a SQL literal (a zone-aware timestamp, so a column in
/// any zone compares by instant).
fn literal(t: DateTime<Utc>) -> String {
    format!("arrow_cast('{}', 'Timestamp(Nanosecond, Some(\"+00:00\"))')", t.format("%Y-%m-%dT%H:%M:%S%.9fZ"))
}

/// A session over the lake with every view set of `sets` registered (the
/// view `skip`, being written, is left out). With a range, sources show
/// only the rows inserted in it and views only their partitions
/// overlapping it, as micromegas' daemon filters what a bucket reads.
pub async fn session(
    lake: &Lake,
    client: &Client,
    sets: &[ViewSet],
    range: InsertRange,
    skip: Option<&str>,
    checked: &CheckedFiles,
) -> Result<SessionContext> {
    let ctx = new_context();
    lake.register(&ctx);
    for set in sets {
        if Some(set.name.as_str()) == skip {
            continue;
        }
        register_set(&ctx, lake, client, set, range, checked).await?;
    }
    Ok(ctx)
}

/// Registers one view set in `ctx` under its name: a source over its
/// files, a view as its merge query over its partitions of the current
/// schema hash (registered as `__<view>__partitions`).
pub async fn register_set(
    ctx: &SessionContext,
    lake: &Lake,
    client: &Client,
    set: &ViewSet,
    range: InsertRange,
    checked: &CheckedFiles,
) -> Result<()> {
    match &set.queries {
        None => register_source(ctx, lake, set, range, checked).await,
        Some(q) => {
            let parts = catalog::partitions(client, &set.name, &set.schema_hash, range).await?;
            let files: Vec<String> = parts
                .iter()
                .filter(|p| p.num_rows > 0)
                .filter_map(|p| p.file_path.clone())
                .collect();
            let table = format!("__{}__partitions", set.name);
            register_files(ctx, lake, &table, set.schema.clone(), &files)?;
            let merge = q.merge.replace("{source}", &format!("\"{table}\""));
            register_view(ctx, &set.name, &merge).await
        }
    }
}

/// Registers `name` as the result of `sql` in `ctx`.
pub async fn register_view(ctx: &SessionContext, name: &str, sql: &str) -> Result<()> {
    let df = ctx
        .sql(sql)
        .await
        .map_err(|e| Error::msg(format!("\"{name}\": {e}")))?;
    ctx.register_table(name, df.into_view())
        .map_err(|e| Error::msg(format!("\"{name}\": {e}")))?;
    Ok(())
}

/// A table over the given lake-relative Parquet files (empty: no rows).
pub fn register_files(
    ctx: &SessionContext,
    lake: &Lake,
    table: &str,
    schema: SchemaRef,
    files: &[String],
) -> Result<()> {
    if files.is_empty() {
        let empty = MemTable::try_new(schema, vec![vec![]])?;
        ctx.register_table(table, Arc::new(empty))?;
        return Ok(());
    }
    let urls = files
        .iter()
        .map(|f| ListingTableUrl::parse(lake.object_url(&lake.path(f))))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let format = ParquetFormat::default().with_force_view_types(false);
    let options = ListingOptions::new(Arc::new(format)).with_file_extension("");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    ctx.register_table(table, Arc::new(ListingTable::try_new(config)?))?;
    Ok(())
}

/// A built-in source: its Parquet files under `sources/<name>/`, each
/// checked against the catalog's schema for it (by column name: a missing
/// column or another type is an error naming the file and the column).
async fn register_source(
    ctx: &SessionContext,
    lake: &Lake,
    set: &ViewSet,
    range: InsertRange,
    checked: &CheckedFiles,
) -> Result<()> {
    let objects: Vec<ObjectMeta> = lake
        .list(&Lake::source_dir(&set.name))
        .await?
        .into_iter()
        .filter(|o| o.size > 0 && crate::lake::is_data_file(&o.location))
        .collect();
    let files: Vec<String> = objects.iter().map(|o| lake.relative(&o.location)).collect();
    for object in &objects {
        let key = (object.location.to_string(), object.size, set.name.clone());
        if checked.0.lock().expect("lock").contains(&key) {
            continue;
        }
        check_source_file(ctx, lake, &set.name, &set.schema, object).await?;
        checked.0.lock().expect("lock").insert(key);
    }
    let all = format!("__{}__all", set.name);
    register_files(ctx, lake, &all, set.schema.clone(), &files)?;
    let filtered = match range {
        Some((begin, end)) if set.schema.field_with_name("insert_time").is_ok() => format!(
            "SELECT * FROM \"{all}\" WHERE insert_time >= {} AND insert_time < {}",
            literal(begin),
            literal(end)
        ),
        _ => format!("SELECT * FROM \"{all}\""),
    };
    register_view(ctx, &set.name, &filtered).await
}

async fn check_source_file(
    ctx: &SessionContext,
    lake: &Lake,
    source: &str,
    schema: &SchemaRef,
    object: &ObjectMeta,
) -> Result<()> {
    let path = lake.object_url(&object.location);
    let found = ParquetFormat::default()
        .with_force_view_types(false)
        .infer_schema(&ctx.state(), &lake.store(), std::slice::from_ref(object))
        .await
        .map_err(|e| match e {
            // Reaching the store may work next time; a file that is not
            // Parquet will not.
            datafusion::error::DataFusionError::ObjectStore(_)
            | datafusion::error::DataFusionError::IoError(_) => {
                Error::msg(format!("source file {path}: {e}"))
            }
            e => Error::schema(format!("source file {path}: not a Parquet file: {e}")),
        })?;
    for field in schema.fields() {
        match found.field_with_name(field.name()) {
            Err(_) => {
                return Err(Error::schema(format!(
                    "source file {path} of \"{source}\" has no column \"{}\" ({} in the catalog)",
                    field.name(),
                    field.data_type()
                )))
            }
            Ok(f) if !same_type(f.data_type(), field.data_type()) => {
                return Err(Error::schema(format!(
                    "source file {path} of \"{source}\": column \"{}\" is {}, the catalog's type is {}",
                    field.name(),
                    f.data_type(),
                    field.data_type()
                )))
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Types equal, a timestamp's zone spelled `+00:00` or `UTC` alike, nested
/// fields' names aside (Parquet writers name a list's item `element` or
/// `item`), and a dictionary the same as its values (a writer that does not
/// store the Arrow schema, DuckDB or Spark, writes a dictionary column as
/// its values; reading casts it).
fn same_type(found: &DataType, catalog: &DataType) -> bool {
    match (found, catalog) {
        (DataType::Timestamp(u1, z1), DataType::Timestamp(u2, z2)) => {
            let utc = |z: &Option<Arc<str>>| {
                z.as_deref()
                    .map(|z| if z == "UTC" { "+00:00" } else { z })
                    .map(str::to_string)
            };
            u1 == u2 && utc(z1) == utc(z2)
        }
        (f, DataType::Dictionary(_, values)) if !matches!(f, DataType::Dictionary(_, _)) => {
            same_type(f, values)
        }
        _ => found.equals_datatype(catalog),
    }
}

/// `names` and, through the views among them, everything they read in
/// turn: what a session must register for a view's queries.
pub fn closure(sets: &[ViewSet], names: &[String]) -> Vec<ViewSet> {
    let mut wanted: HashSet<String> = names.iter().cloned().collect();
    loop {
        let more: Vec<String> = sets
            .iter()
            .filter(|s| wanted.contains(&s.name))
            .flat_map(|s| s.reads.iter().cloned())
            .filter(|r| !wanted.contains(r))
            .collect();
        if more.is_empty() {
            break;
        }
        wanted.extend(more);
    }
    sets.iter().filter(|s| wanted.contains(&s.name)).cloned().collect()
}
