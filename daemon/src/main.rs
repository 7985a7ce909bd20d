//! micromegas-views-daemon: materializes the view sets the catalog defines
//! into Parquet partitions in a lake (a local directory or S3), proves
//! each partition's schema is the stored one, records it with the
//! extension, and answers SQL over the result.

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use micromegas_views_client::{Job, JobContext, JobOutcome, JobWorker, JobWorkerConfig};
use micromegas_views_lakehouse::catalog;
use micromegas_views_lakehouse::lake::Lake;
use micromegas_views_lakehouse::read::CheckedFiles;
use micromegas_views_lakehouse::write::{self, BucketReport, Mode, Widths};
use micromegas_views_lakehouse::{query, sample, Error, Result};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::Client;

/// The system allocator, each allocation attributed to the bucket it was
/// made for, so that what a bucket's queries hold is bounded as a whole
/// (`micromegas_views_core::meter`).
#[global_allocator]
static ALLOCATOR: micromegas_views_lakehouse::meter::MeteredAllocator = micromegas_views_lakehouse::meter::MeteredAllocator;

#[derive(Parser)]
#[command(name = "micromegas-views-daemon", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Csv,
    Json,
    Arrow,
}

#[derive(Subcommand)]
enum Command {
    /// Writes a sample telemetry lake (the same for a seed) under <lake>/sources/.
    Sample {
        #[arg(long)]
        lake: String,
        /// Take the sources' schemas from this catalog (default: the
        /// schemas the extension ships).
        #[arg(long, env = "MICROMEGAS_VIEWS_DSN")]
        dsn: Option<String>,
        #[arg(long)]
        begin: DateTime<Utc>,
        #[arg(long)]
        end: DateTime<Utc>,
        #[arg(long, default_value_t = 5)]
        processes: usize,
        /// Log entries (and measures) per stream per minute, on average.
        #[arg(long, default_value_t = 10)]
        rate: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Materializes views over an insert-time range now, in ascending
    /// update_group, each group reading what the earlier ones wrote.
    Materialize {
        #[arg(long)]
        lake: String,
        #[arg(long, env = "MICROMEGAS_VIEWS_DSN")]
        dsn: String,
        /// Only these views (default: every DDL view).
        #[arg(long = "view")]
        views: Vec<String>,
        #[arg(long)]
        begin: DateTime<Utc>,
        #[arg(long)]
        end: DateTime<Utc>,
        /// Write every bucket from the source, fresh or not.
        #[arg(long)]
        regenerate: bool,
    },
    /// Runs the queue's jobs (refresh, materialize, regenerate).
    Run {
        #[arg(long)]
        lake: String,
        #[arg(long, env = "MICROMEGAS_VIEWS_DSN")]
        dsn: String,
        /// The name recorded as the jobs' worker.
        #[arg(long, default_value = "micromegas-views-daemon")]
        worker: String,
        /// Run until the queue is empty, then exit.
        #[arg(long)]
        once: bool,
        /// How often a running job's lease is extended; keep it well under
        /// micromegas_views.job_lease (5 minutes by default).
        #[arg(long, default_value_t = 10)]
        heartbeat_seconds: u64,
        /// How often the views with auto_refresh are brought up to date
        /// over their last two whole buckets (0: never; ignored with --once).
        #[arg(long, default_value_t = 60)]
        tick_seconds: u64,
    },
    /// Deletes the expired files the catalog hands out (after its
    /// transaction committed) and the objects under views/ no row names,
    /// past a grace period.
    Gc {
        #[arg(long)]
        lake: String,
        #[arg(long, env = "MICROMEGAS_VIEWS_DSN")]
        dsn: String,
        /// List what would be deleted; hand out and delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// An object younger than this may be a write not yet recorded.
        #[arg(long, default_value_t = 3600)]
        grace_seconds: i64,
    },
    /// Runs SQL over every view (its merge query over its partitions of the
    /// current schema) and every source.
    Query {
        #[arg(long)]
        lake: String,
        #[arg(long, env = "MICROMEGAS_VIEWS_DSN")]
        dsn: String,
        #[arg(long, value_enum, default_value = "csv")]
        format: Format,
        sql: String,
    },
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn connect(dsn: &str) -> Result<Client> {
    micromegas_views_client::connect(dsn)
        .await
        .map_err(|e| Error::msg(format!("cannot connect: {e}")))
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Sample { lake, dsn, begin, end, processes, rate, seed } => {
            let lake = Lake::open(&lake)?;
            let sets = match dsn {
                Some(dsn) => catalog::view_sets(&connect(&dsn).await?).await?,
                None => catalog::shipped_sources()?,
            };
            let options = sample::SampleOptions { begin, end, processes, rate, seed };
            for (source, files, rows) in sample::write_sample(&lake, &sets, &options).await? {
                println!("{source}: {rows} rows in {files} files");
            }
            Ok(())
        }
        Command::Materialize { lake, dsn, views, begin, end, regenerate } => {
            let lake = Lake::open(&lake)?;
            lake.require_sources().await?;
            let client = connect(&dsn).await?;
            let mode = if regenerate { Mode::Always } else { Mode::IfStale };
            let checked = CheckedFiles::default();
            let sets = catalog::view_sets(&client).await?;
            for name in &views {
                if !sets.iter().any(|s| &s.name == name && s.queries.is_some()) {
                    return Err(Error::msg(format!("materialized view \"{name}\" does not exist")));
                }
            }
            let mut failures = 0;
            // One update group at a time, the catalog read again before
            // each: a later group reads what an earlier one wrote.
            let groups: std::collections::BTreeSet<i32> = sets
                .iter()
                .filter(|s| s.queries.is_some())
                .map(|s| s.update_group)
                .collect();
            for group in groups {
                let sets = catalog::view_sets(&client).await?;
                for view in sets.iter().filter(|s| {
                    s.queries.is_some()
                        && s.update_group == group
                        && (views.is_empty() || views.contains(&s.name))
                }) {
                    if let Err(e) = write::materialize_range(
                        &lake, &client, &sets, view, begin, end, mode, &checked, Widths::Both, log_bucket,
                        &|| false,
                    )
                    .await
                    {
                        tracing::error!(view = %view.name, error = %e, "materialization failed");
                        failures += 1;
                    }
                }
            }
            if failures > 0 {
                return Err(Error::msg(format!("{failures} view(s) failed to materialize")));
            }
            Ok(())
        }
        Command::Run { lake, dsn, worker, once, heartbeat_seconds, tick_seconds } => {
            let lake = Lake::open(&lake)?;
            lake.require_sources().await?;
            let heartbeat = Duration::from_secs(heartbeat_seconds.max(1));
            if once || tick_seconds == 0 {
                return run_jobs(lake, dsn, worker, once, heartbeat).await;
            }
            let ticks = tick_loop(lake.clone(), dsn.clone(), Duration::from_secs(tick_seconds));
            tokio::select! {
                r = run_jobs(lake, dsn, worker, false, heartbeat) => r,
                r = ticks => r,
            }
        }
        Command::Gc { lake, dsn, dry_run, grace_seconds } => {
            let lake = Lake::open(&lake)?;
            lake.require_sources().await?;
            let client = connect(&dsn).await?;
            let grace = chrono::Duration::seconds(grace_seconds.max(0));
            let c = micromegas_views_lakehouse::gc::collect(&lake, &client, grace, dry_run).await?;
            let verb = if dry_run { "would delete" } else { "deleted" };
            for path in &c.expired {
                println!("expired {path}");
            }
            for path in &c.orphans {
                println!("orphan {path}");
            }
            println!(
                "{verb}: {} expired file(s), {} orphan(s){}",
                c.expired.len(),
                c.orphans.len(),
                if dry_run { String::new() } else { format!("; {} object(s) removed", c.deleted) }
            );
            Ok(())
        }
        Command::Query { lake, dsn, format, sql } => {
            let lake = Lake::open(&lake)?;
            let client = connect(&dsn).await?;
            let batches = query::run(&lake, &client, &sql).await?;
            let mut out = std::io::stdout().lock();
            match format {
                Format::Csv => query::write_csv(&mut out, &batches),
                Format::Json => query::write_json_lines(&mut out, &batches),
                Format::Arrow => query::write_ipc(&mut out, &batches),
            }
        }
    }
}

fn log_bucket(r: &BucketReport) {
    tracing::info!("{r}");
}

/// The range a job covers: its own; a bound a refresh leaves open is the
/// insert-time extent of the lake's `blocks` on that side (None when the
/// lake has no blocks).
async fn job_range(
    lake: &Lake,
    client: &Client,
    job: &Job,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>> {
    if let (Some(b), Some(e)) = (job.begin_time, job.end_time) {
        return Ok(Some((b.into(), e.into())));
    }
    let Some((lo, hi)) = query::source_extent(lake, client).await? else {
        return Ok(None);
    };
    Ok(Some((
        job.begin_time.map(DateTime::<Utc>::from).unwrap_or(lo),
        job.end_time.map(DateTime::<Utc>::from).unwrap_or(hi),
    )))
}

async fn handle(lake: &Lake, dsn: &str, job: Job, ctx: JobContext) -> JobOutcome {
    let client = match connect(dsn).await {
        Ok(c) => c,
        Err(e) => return JobOutcome::failed("connect", e.to_string(), true),
    };
    let result: Result<Vec<BucketReport>> = async {
        let sets = catalog::view_sets(&client).await?;
        let view = sets
            .iter()
            .find(|s| s.name == job.view_set_name && s.queries.is_some())
            .ok_or_else(|| Error::msg(format!("materialized view \"{}\" does not exist", job.view_set_name)))?;
        let Some((begin, end)) = job_range(lake, &client, &job).await? else {
            return Ok(Vec::new());
        };
        let mode = if job.kind == "regenerate" { Mode::Always } else { Mode::IfStale };
        let checked = CheckedFiles::default();
        let mut reports = Vec::new();
        let q = view.queries.as_ref().expect("a view");
        // A refresh covers whole buckets: its range widened to them (a
        // range inside one bucket would otherwise cover none).
        let (begin, end) = if job.kind == "refresh" {
            widen(begin, end, q.source_delta_seconds.max(q.merge_delta_seconds))
        } else {
            (begin, end)
        };
        if job.kind == "regenerate" || job.kind == "materialize" {
            // One bucket: the job's own range.
            let r = write::materialize_bucket(lake, &client, &sets, view, begin, end, mode, &checked).await?;
            log_bucket(&r);
            reports.push(r);
        } else {
            let stop = || ctx.is_cancelled();
            // After each bucket, how far the job got: shown in its row
            // with the next heartbeat.
            let (mut buckets, mut rows, mut bytes) = (0u64, 0i64, 0i64);
            let each = |r: &BucketReport| {
                log_bucket(r);
                buckets += 1;
                rows += r.rows;
                bytes += r.bytes;
                ctx.report_progress(serde_json::json!({
                    "buckets_done": buckets,
                    "rows_written": rows,
                    "bytes_written": bytes,
                    "last_bucket_end": r.end.to_rfc3339(),
                }));
            };
            reports = write::materialize_range(
                lake, &client, &sets, view, begin, end, mode, &checked, Widths::Both, each, &stop,
            )
            .await?;
        }
        Ok(reports)
    }
    .await;
    match result {
        Ok(reports) => {
            let rows: i64 = reports.iter().map(|r| r.rows).sum();
            tracing::info!(view = %job.view_set_name, kind = %job.kind, buckets = reports.len(), rows, "job done");
            JobOutcome::done()
        }
        Err(e) if e.schema_mismatch => JobOutcome::failed("schema", e.message, false),
        Err(e) => JobOutcome::failed("materialize", e.message, true),
    }
}

/// Every `period`, the views with `auto_refresh` over their last two whole
/// source buckets, then their last whole merge bucket, in ascending
/// update_group with the catalog read again between groups (micromegas'
/// daemon's cron tasks, with each view's own deltas). A failing view is
/// logged; the others still run.
async fn tick_loop(lake: Lake, dsn: String, period: Duration) -> Result<()> {
    let mut ticker = tokio::time::interval(period);
    // A tick that overran is not followed by a burst of catch-up ticks.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let checked = CheckedFiles::default();
    loop {
        ticker.tick().await;
        let client = match connect(&dsn).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "tick: cannot connect; next tick");
                continue;
            }
        };
        if let Err(e) = tick(&lake, &client, &checked).await {
            tracing::warn!(error = %e, "tick failed; next tick");
        }
    }
}

async fn tick(lake: &Lake, client: &Client, checked: &CheckedFiles) -> Result<()> {
    let groups: std::collections::BTreeSet<i32> = catalog::view_sets(client)
        .await?
        .iter()
        .filter(|s| s.queries.as_ref().is_some_and(|q| q.auto_refresh))
        .map(|s| s.update_group)
        .collect();
    let now = Utc::now();
    for group in groups {
        let sets = catalog::view_sets(client).await?;
        for view in sets.iter().filter(|s| s.update_group == group) {
            let Some(q) = view.queries.as_ref().filter(|q| q.auto_refresh) else {
                continue;
            };
            // The last two whole source buckets, then the last whole merge
            // bucket (which merges what the source buckets wrote).
            let last = |delta: i64, n: i64| {
                let end = DateTime::from_timestamp(now.timestamp().div_euclid(delta) * delta, 0);
                end.map(|end| (end - chrono::Duration::seconds(n * delta), end))
            };
            let mut result = Ok(Vec::new());
            for (widths, range) in [
                (Widths::Source, last(q.source_delta_seconds, 2)),
                (Widths::Merge, last(q.merge_delta_seconds, 1)),
            ] {
                let Some((begin, end)) = range else { continue };
                result = write::materialize_range(
                    lake, client, &sets, view, begin, end, Mode::IfStale, checked, widths, log_bucket, &|| false,
                )
                .await;
                if result.is_err() {
                    break;
                }
            }
            if let Err(e) = result
            {
                tracing::error!(view = %view.name, error = %e, "tick: materialization failed");
            }
        }
    }
    Ok(())
}

/// `[begin, end)` widened to whole buckets of `delta` seconds.
fn widen(begin: DateTime<Utc>, end: DateTime<Utc>, delta: i64) -> (DateTime<Utc>, DateTime<Utc>) {
    let b = begin.timestamp().div_euclid(delta) * delta;
    let e = (end.timestamp() + delta - 1).div_euclid(delta) * delta;
    (
        DateTime::from_timestamp(b, 0).expect("a time"),
        DateTime::from_timestamp(e, 0).expect("a time"),
    )
}

async fn run_jobs(lake: Lake, dsn: String, worker: String, once: bool, heartbeat: Duration) -> Result<()> {
    let mut config = JobWorkerConfig::new(dsn.clone(), worker);
    config.poll_interval = Duration::from_secs(5);
    config.heartbeat_interval = heartbeat;
    let jobs = JobWorker::new(config);
    let lake = Arc::new(lake);
    let shared_dsn = Arc::new(dsn.clone());
    let handler = move |job: Job, ctx: JobContext| {
        let lake = lake.clone();
        let dsn = shared_dsn.clone();
        async move { handle(&lake, &dsn, job, ctx).await }
    };
    if once {
        let client = connect(&dsn).await?;
        while jobs.run_once(&client, &handler).await?.is_some() {}
        return Ok(());
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("stopping after the current job");
    };
    jobs.run(handler, shutdown).await?;
    Ok(())
}
