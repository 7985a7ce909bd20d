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

/// The memory one session's query may hold (metered), or its operators may
/// use (unmetered), past which sorts and aggregations spill to disk or the
/// query fails: `MICROMEGAS_VIEWS_MEMORY_MB` (default 2048).
pub fn memory_limit() -> usize {
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
    build_context(memory_bytes, memory_bytes, None)
}

/// A session whose query may hold `cap_bytes` in all, counted by `meter`
/// at every allocation ([`crate::meter`]). Its operators' buffers may take
/// half of it in DataFusion's pool, past which sorts and aggregations
/// spill or fail: the other half is room for what the pool does not count
/// (the batches between operators, what expressions compute, what a spill
/// needs to merge), so that a query spills before the meter refuses it.
pub fn new_metered_context(cap_bytes: usize, meter: Arc<crate::meter::Meter>) -> SessionContext {
    build_context(cap_bytes / 2, cap_bytes, Some(meter))
}

/// DataFusion's caches of Parquet footers and of file statistics, shared by
/// every session of the process. A session is made per bucket (the daemon)
/// or per statement (the FlightSQL service), each with its own memory pool;
/// with a cache of its own, each would read and decode again the footer of
/// every file it plans over (a day of hourly buckets reads each source
/// file's footer once per bucket, twice with the freshness count). An entry
/// is keyed by the object's path and valid only for its size and time (an
/// object is immutable once written); the caches are bounded by DataFusion's
/// defaults (50 MiB of footers, 20 MiB of statistics).
fn shared_caches() -> datafusion::execution::cache::cache_manager::CacheManagerConfig {
    use datafusion::execution::cache::cache_manager::{CacheManagerConfig, FileMetadataCache, FileStatisticsCache};
    static CACHES: std::sync::OnceLock<(Arc<FileMetadataCache>, Option<Arc<FileStatisticsCache>>)> = std::sync::OnceLock::new();
    let (metadata, statistics) = CACHES.get_or_init(|| {
        let made = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .build()
            .expect("a runtime environment");
        (made.cache_manager.get_file_metadata_cache(), made.cache_manager.get_file_statistic_cache())
    });
    CacheManagerConfig::default()
        .with_file_metadata_cache(Some(metadata.clone()))
        .with_file_statistics_cache(statistics.clone())
}

fn build_context(pool_bytes: usize, call_bytes: usize, meter: Option<Arc<crate::meter::Meter>>) -> SessionContext {
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_limit(pool_bytes, 1.0)
        .with_cache_manager(shared_caches())
        .build_arc()
        .expect("a runtime environment");
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_target_partitions(2);
    // The catalog's types are what a file is read as (Utf8, not Utf8View).
    config.options_mut().execution.parquet.schema_force_view_types = false;
    context_with(config, runtime, call_bytes, meter)
}

/// A session with `config` and `runtime` as every session of the services
/// is made: the amplifying functions bounded to `memory_bytes` per call,
/// every operator's output a yield point, and, with a `meter`, every
/// operator's work counted against the query's cap.
pub fn context_with(
    config: SessionConfig,
    runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    memory_bytes: usize,
    meter: Option<Arc<crate::meter::Meter>>,
) -> SessionContext {
    let mut state = datafusion::execution::SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(YieldEveryBatch));
    if let Some(meter) = meter {
        state = state.with_physical_optimizer_rule(Arc::new(crate::meter::MeterEveryOperator(meter)));
    }
    let state = state.build();
    let ctx = SessionContext::new_with_state(state);
    bound_amplifying_functions(&ctx, memory_bytes);
    check_aggregates(&ctx);
    ctx.add_optimizer_rule(Arc::new(micromegas_views_core::bounded::BoundConcatOperator::new(memory_bytes)));
    ctx
}

/// Replaces, in `ctx`, the functions whose output can be many times their
/// input (`repeat`, `lpad`, `range`, …) with versions that refuse a call
/// whose output would pass `memory_bytes`: the memory pool does not count
/// what an expression allocates (micromegas_views_core::bounded).
fn bound_amplifying_functions(ctx: &SessionContext, memory_bytes: usize) {
    let bounded = micromegas_views_core::bounded::AMPLIFYING_FUNCTIONS.iter();
    for name in bounded.chain(micromegas_views_core::bounded::COSTLY_FUNCTIONS) {
        if let Ok(udf) = datafusion::execution::FunctionRegistry::udf(ctx, name) {
            if let Some(bounded) = micromegas_views_core::bounded::bounded(&udf, memory_bytes) {
                ctx.register_udf(bounded);
            }
        }
    }
}

/// Replaces, in `ctx`, every aggregate and window function with one whose
/// accumulators and evaluators check the query's meter at each step
/// (micromegas_views_core::bounded): a window aggregate over a frame that
/// grows with each row would otherwise make all of one batch's output,
/// growing with the square of its rows, before any check.
fn check_aggregates(ctx: &SessionContext) {
    let mut seen = HashSet::new();
    let checked: Vec<_> = ctx
        .state_ref()
        .read()
        .aggregate_functions()
        .values()
        .filter(|udaf| seen.insert(udaf.name().to_string()))
        .map(|udaf| micromegas_views_core::bounded::checked_aggregate(udaf))
        .collect();
    for udaf in checked {
        ctx.register_udaf(udaf);
    }
    let mut seen = HashSet::new();
    let checked: Vec<_> = ctx
        .state_ref()
        .read()
        .window_functions()
        .values()
        .filter(|udwf| seen.insert(udwf.name().to_string()))
        .map(|udwf| micromegas_views_core::bounded::checked_window(udwf))
        .collect();
    for udwf in checked {
        ctx.register_udwf(udwf);
    }
}

/// The last physical rule of every session: each operator that is not a
/// yield point already gets one above it ([`CooperativeExec`]), so every
/// batch any operator produces spends the task's scheduling budget.
/// DataFusion makes only the scans cooperative: a join that produces many
/// batches from one input batch (a cross join, say), read by a TopK or an
/// aggregation that never waits, would otherwise run without yielding, and
/// a query aborted at its deadline (or by its client going away, or a
/// daemon's job being given back) would go on until it ends.
///
/// [`CooperativeExec`]: datafusion::physical_plan::coop::CooperativeExec
#[derive(Debug)]
struct YieldEveryBatch;

impl datafusion::physical_optimizer::PhysicalOptimizerRule for YieldEveryBatch {
    fn optimize(
        &self,
        plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        _config: &datafusion::config::ConfigOptions,
    ) -> datafusion::error::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        use datafusion::physical_plan::coop::CooperativeExec;
        use datafusion::physical_plan::execution_plan::SchedulingType;
        plan.transform_up(|node| {
            // A CooperativeExec is itself cooperative.
            let yields = node.properties().scheduling_type == SchedulingType::Cooperative;
            Ok(if yields {
                Transformed::no(node)
            } else {
                Transformed::yes(Arc::new(CooperativeExec::new(node)) as _)
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "YieldEveryBatch"
    }

    fn schema_check(&self) -> bool {
        true
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
    meter: Option<Arc<crate::meter::Meter>>,
) -> Result<SessionContext> {
    let ctx = match meter {
        Some(meter) => new_metered_context(memory_limit(), meter),
        None => new_context(),
    };
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
    // The file statistics cache of the session's runtime (shared:
    // `shared_caches`), not one of the table's own.
    let statistics = ctx.runtime_env().cache_manager.get_file_statistic_cache();
    ctx.register_table(table, Arc::new(ListingTable::try_new(config)?.with_cache(statistics)))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{Field, Schema};
    use futures::StreamExt;
    use std::time::{Duration, Instant};

    fn numbers(ctx: &SessionContext, name: &str, rows: i64) {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(0..rows))]).unwrap();
        let table = MemTable::try_new(schema, vec![vec![batch]]).unwrap();
        ctx.register_table(name, Arc::new(table)).unwrap();
    }

    /// A cross join read by a TopK makes millions of rows from two small
    /// inputs without waiting on anything. Aborted, every task it started
    /// stops within moments (each operator's batches spend the task's
    /// budget): the runtime it ran on shuts down at once, where without a
    /// yield point above the join its partitions' tasks ran on for as long
    /// as the whole join takes (80 s here).
    #[test]
    fn an_aborted_cross_join_into_a_topk_stops_at_once() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let ctx = new_context_with(256 << 20);
        numbers(&ctx, "a", 20_000);
        numbers(&ctx, "b", 20_000);
        let sql = "SELECT a.n, b.n FROM a CROSS JOIN b ORDER BY (a.n * 7919 + b.n * 104729) % 1000003 DESC LIMIT 1";
        let plan = runtime.block_on(async { ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap() });
        let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
        let lines: Vec<&str> = shown.lines().map(str::trim_start).collect();
        let join = lines.iter().position(|l| l.starts_with("CrossJoinExec")).expect("a cross join");
        assert!(join > 0 && lines[join - 1] == "CooperativeExec", "{shown}");

        let task_ctx = ctx.task_ctx();
        let task = runtime.spawn(async move {
            let mut stream = datafusion::physical_plan::execute_stream(plan, task_ctx).unwrap();
            while let Some(batch) = stream.next().await {
                batch.unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        let aborted = Instant::now();
        task.abort();
        // Dropping a runtime waits for each of its tasks to reach a yield
        // point (where an aborted task ends).
        drop(runtime);
        let took = aborted.elapsed();
        // Typically under 100 ms; the bound leaves room for a loaded
        // two-core host (other tests run beside this one) and stays far
        // below the 80 s the join runs on without the yield point.
        assert!(took < Duration::from_secs(3), "the aborted query's tasks ran on for {took:?}");
    }
}
