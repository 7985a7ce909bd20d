//! The write path: one bucket of one view, decided and materialized as
//! micromegas' daemon does (its `count_src_query` is the freshness check),
//! written as one Parquet object, proven against the stored schema, then
//! recorded with the extension's swap.

use crate::catalog::{self, Partition, Queries, ViewSet, Written};
use crate::lake::Lake;
use crate::read::{self, CheckedFiles};
use crate::{Error, Result};
use chrono::{DateTime, TimeZone, Utc};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::{cast, max, min};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit, TimestampNanosecondType};
use object_store::buffered::BufWriter;
use object_store::ObjectStoreExt;
use datafusion::parquet::arrow::AsyncArrowWriter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use std::time::Instant;
use tokio_postgres::Client;

/// What was decided for a bucket, and what it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Up to date, or a partition sticks out of the bucket: nothing written.
    Skip(&'static str),
    /// Written from the source (the extract query).
    Create,
    /// Several partitions whose counts match, merged into one.
    Merge,
}

#[derive(Debug, Clone)]
pub struct BucketReport {
    pub view: String,
    pub begin: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub decision: Decision,
    pub source_count: i64,
    pub rows: i64,
    pub bytes: i64,
    pub seconds: f64,
}

impl std::fmt::Display for BucketReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let decision = match &self.decision {
            Decision::Skip(why) => format!("skip ({why})"),
            Decision::Create => "create from source".into(),
            Decision::Merge => "merge".into(),
        };
        write!(
            f,
            "view={} range=[{}, {}) decision={} source_count={} rows={} bytes={} seconds={:.3}",
            self.view,
            self.begin.to_rfc3339(),
            self.end.to_rfc3339(),
            decision,
            self.source_count,
            self.rows,
            self.bytes,
            self.seconds
        )
    }
}

/// Which bucket widths a range is materialized at: the view's source
/// delta, then its merge delta when wider (`Both`), or only one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Widths {
    Both,
    Source,
    Merge,
}

/// Whether a bucket is checked for freshness (materialize, refresh) or
/// written from the source whatever it holds (regenerate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    IfStale,
    Always,
}

/// `{begin}` and `{end}` as micromegas substitutes them: RFC 3339.
pub fn substitute(query: &str, begin: DateTime<Utc>, end: DateTime<Utc>) -> String {
    query
        .replace("{begin}", &begin.to_rfc3339())
        .replace("{end}", &end.to_rfc3339())
}

async fn count(ctx: &SessionContext, view: &str, sql: &str) -> Result<i64> {
    let batches = ctx
        .sql(sql)
        .await
        .map_err(|e| Error::msg(format!("\"{view}\" count_src_query: {e}")))?
        .collect()
        .await
        .map_err(|e| Error::msg(format!("\"{view}\" count_src_query: {e}")))?;
    for batch in batches {
        if batch.num_rows() == 0 {
            continue;
        }
        let column = batch.column_by_name("count").ok_or_else(|| {
            Error::msg(format!("\"{view}\" count_src_query returns no column \"count\""))
        })?;
        let column = cast(column, &DataType::Int64)?;
        let values = column.as_primitive::<Int64Type>();
        return Ok(if values.is_null(0) { 0 } else { values.value(0) });
    }
    Ok(0)
}

/// micromegas' decision over the partitions of the current schema hash
/// that overlap the bucket.
fn decide(existing: &[Partition], begin: DateTime<Utc>, end: DateTime<Utc>, source: i64) -> Decision {
    if existing.is_empty() {
        return Decision::Create;
    }
    if existing.iter().any(|p| p.begin < begin || p.end > end) {
        return Decision::Skip("a partition sticks out of the bucket");
    }
    if existing.iter().any(|p| p.source_count.is_none()) {
        return Decision::Create;
    }
    let sum: i64 = existing.iter().map(|p| p.source_count.unwrap_or(0)).sum();
    if source < sum {
        // Source data only grows: fewer rows than recorded means sources
        // went missing (a wrong lake, a retention), and rewriting would
        // replace good partitions with what is left. Regenerate to insist.
        return Decision::Skip("the source count fell below the recorded one");
    }
    if sum != source {
        return Decision::Create;
    }
    if existing.len() > 1 {
        return Decision::Merge;
    }
    Decision::Skip("up to date")
}

/// The queries of a DDL view; a built-in is a source, not materialized.
fn queries(view: &ViewSet) -> Result<&Queries> {
    view.queries
        .as_ref()
        .ok_or_else(|| Error::msg(format!("\"{}\" is a built-in source, not a view to materialize", view.name)))
}

/// Materializes one bucket of `view` (a DDL view set); `sets` is the
/// catalog, read again by the caller between update groups.
#[allow(clippy::too_many_arguments)]
pub async fn materialize_bucket(
    lake: &Lake,
    client: &Client,
    sets: &[ViewSet],
    view: &ViewSet,
    begin: DateTime<Utc>,
    end: DateTime<Utc>,
    mode: Mode,
    checked: &CheckedFiles,
) -> Result<BucketReport> {
    let (prior, computed) = compute_bucket(lake, client, sets, view, begin, end, mode, checked, None).await;
    prior?;
    match computed? {
        Computed::Done(report) => Ok(report),
        Computed::Written(written) => written.record(client, view).await,
    }
}

/// A bucket whose object is written and not yet recorded.
struct Unrecorded {
    report: BucketReport,
    source_count: i64,
    written: Written,
}

impl Unrecorded {
    /// Records the partition with the extension's swap (one statement, one
    /// transaction): what it supersedes is retired.
    async fn record(self, client: &Client, view: &ViewSet) -> Result<BucketReport> {
        let r = &self.report;
        catalog::record(client, &view.name, r.begin, r.end, &view.schema_hash, self.source_count, &self.written)
            .await
            .map_err(|e| Error {
                message: format!(
                    "\"{}\" [{}, {}): the partition was not recorded{}: {}",
                    view.name,
                    r.begin.to_rfc3339(),
                    r.end.to_rfc3339(),
                    if self.written.file_path.is_some() { " (its object is an orphan, for gc)" } else { "" },
                    e.message
                ),
                ..e
            })?;
        Ok(self.report)
    }
}

/// What a bucket came to: nothing to record (skipped), or an object
/// written that its partition row must now name.
enum Computed {
    Done(BucketReport),
    Written(Unrecorded),
}

/// Decides and writes one bucket, and records `prior` (the previous
/// bucket of the range, written and not yet recorded) meanwhile: its
/// statement runs while this bucket's session is made and its source
/// counted, and ends before this bucket reads the catalog's partitions,
/// so that every decision sees every partition recorded before it. Answers
/// the prior's outcome (its report once recorded) and this bucket's.
#[allow(clippy::too_many_arguments)]
async fn compute_bucket(
    lake: &Lake,
    client: &Client,
    sets: &[ViewSet],
    view: &ViewSet,
    begin: DateTime<Utc>,
    end: DateTime<Utc>,
    mode: Mode,
    checked: &CheckedFiles,
    prior: Option<Unrecorded>,
) -> (Result<Option<BucketReport>>, Result<Computed>) {
    // What the bucket's queries hold is bounded as a whole
    // (MICROMEGAS_VIEWS_MEMORY_MB; crate::meter).
    let meter = crate::meter::Meter::new(read::memory_limit() as u64);
    let mut recorded: Result<Option<BucketReport>> = Ok(None);
    let computed = crate::meter::run(meter.clone(), async {
        let started = Instant::now();
        let recording = async {
            match prior {
                Some(p) => p.record(client, view).await.map(Some),
                None => Ok(None),
            }
        };
        let reading = async {
            let q = queries(view)?;
            // Only what the view's queries read is registered (the
            // catalog's `reads`: every relation their planning resolved).
            let read = read::closure(sets, &view.reads);
            let ctx = read::session(lake, client, &read, Some((begin, end)), Some(&view.name), checked, Some(meter.clone())).await?;
            let source_count = count(&ctx, &view.name, &substitute(&q.count_src, begin, end)).await?;
            Ok::<_, Error>((q, ctx, source_count))
        };
        let (prior_outcome, read) = tokio::join!(recording, reading);
        let prior_failed = prior_outcome.is_err();
        recorded = prior_outcome;
        if prior_failed {
            return Err(Error::msg("not written: the previous bucket could not be recorded"));
        }
        let (q, ctx, source_count) = read?;
        // A regeneration writes the bucket whatever it holds (the swap
        // retires it): only a freshness check reads what exists.
        let existing = match mode {
            Mode::Always => Vec::new(),
            Mode::IfStale => catalog::partitions(client, &view.name, &view.schema_hash, Some((begin, end))).await?,
        };
        let decision = match mode {
            Mode::Always => Decision::Create,
            Mode::IfStale => decide(&existing, begin, end, source_count),
        };
        let report = |rows, bytes| BucketReport {
            view: view.name.clone(),
            begin,
            end,
            decision: decision.clone(),
            source_count,
            rows,
            bytes,
            seconds: started.elapsed().as_secs_f64(),
        };
        let sql = match decision {
            Decision::Skip(_) => return Ok(Computed::Done(report(0, 0))),
            Decision::Create => substitute(&q.extract, begin, end),
            Decision::Merge => {
                let files: Vec<String> = existing
                    .iter()
                    .filter(|p| p.num_rows > 0)
                    .filter_map(|p| p.file_path.clone())
                    .collect();
                let table = format!("__{}__merged", view.name);
                read::register_files(&ctx, lake, &table, view.schema.clone(), &files)?;
                q.merge.replace("{source}", &format!("\"{table}\""))
            }
        };
        let written = write(lake, &ctx, view, q, &sql, begin, end).await?;
        Ok(Computed::Written(Unrecorded {
            report: report(written.num_rows, written.file_size),
            source_count,
            written,
        }))
    })
    .await;
    (recorded, computed)
}

/// Runs `sql` and streams its rows into one new Parquet object, checking
/// the stored schema first (names, types, order) and every batch for a null
/// in a column stored non-null. On any failure the upload is abandoned:
/// nothing is left to record.
async fn write(
    lake: &Lake,
    ctx: &SessionContext,
    view: &ViewSet,
    q: &Queries,
    sql: &str,
    begin: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Written> {
    let mut df = ctx
        .sql(sql)
        .await
        .map_err(|e| Error::msg(format!("\"{}\": {e}", view.name)))?;
    if let Some(columns) = &q.merge_sort_order {
        // The file's order, which its partition records as sort_order.
        df = df
            .sort(columns.iter().map(|c| datafusion::prelude::ident(c).sort(true, false)).collect())
            .map_err(|e| Error::msg(format!("\"{}\": merge_sort_order: {e}", view.name)))?;
    }
    let mut stream = df
        .execute_stream()
        .await
        .map_err(|e| Error::msg(format!("\"{}\": {e}", view.name)))?;
    let stored = view.schema.clone();
    prove_schema(&view.name, &stored, &stream.schema())?;
    let relative = Lake::partition_path(&view.name, &view.schema_hash, begin, end);
    let mut writer: Option<AsyncArrowWriter<BufWriter>> = None;
    let mut rows = 0i64;
    let (mut lo, mut hi): (Option<i64>, Option<i64>) = (None, None);
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| Error::msg(format!("\"{}\": {e}", view.name)))?;
        if batch.num_rows() == 0 {
            continue;
        }
        prove_non_null(&view.name, &stored, &batch)?;
        // The produced batch in the stored schema (equal but for the
        // nullability the planner claimed).
        let batch = RecordBatch::try_new(stored.clone(), batch.columns().to_vec())?;
        if let Some(t) = time_bound(&batch, &q.min_time_column, true)? {
            lo = Some(lo.map_or(t, |l| l.min(t)));
        }
        if let Some(t) = time_bound(&batch, &q.max_time_column, false)? {
            hi = Some(hi.map_or(t, |h| h.max(t)));
        }
        rows += batch.num_rows() as i64;
        if writer.is_none() {
            let object = BufWriter::new(lake.store(), lake.path(&relative));
            writer = Some(AsyncArrowWriter::try_new(object, stored.clone(), None)?);
        }
        writer.as_mut().expect("a writer").write(&batch).await?;
    }
    let Some(writer) = writer else {
        // An empty result: a partition without a file.
        return Ok(Written {
            file_path: None,
            file_size: 0,
            min_event_time: None,
            max_event_time: None,
            num_rows: 0,
            sort_order: None,
        });
    };
    let metadata = writer.close().await?;
    let _ = metadata;
    let size = lake
        .store()
        .head(&lake.path(&relative))
        .await
        .map_err(|e| Error::msg(format!("{relative}: {e}")))?
        .size as i64;
    let nanos = |n: i64| Utc.timestamp_nanos(n);
    Ok(Written {
        file_path: Some(relative),
        file_size: size,
        min_event_time: lo.map(nanos),
        max_event_time: hi.map(nanos),
        num_rows: rows,
        sort_order: q.merge_sort_order.clone(),
    })
}

/// The produced schema is the stored one: the same column names, types and
/// order. A mismatch names the view, the column, both types.
pub fn prove_schema(view: &str, stored: &SchemaRef, produced: &SchemaRef) -> Result<()> {
    for (i, field) in stored.fields().iter().enumerate() {
        let Some(got) = produced.fields().get(i) else {
            return Err(Error::schema(format!(
                "\"{view}\": the stored schema has column \"{}\" ({}) at position {}, the query produced only {} columns",
                field.name(),
                field.data_type(),
                i + 1,
                produced.fields().len()
            )));
        };
        if got.name() != field.name() {
            return Err(Error::schema(format!(
                "\"{view}\": column {} is \"{}\" in the stored schema, the query produced \"{}\"",
                i + 1,
                field.name(),
                got.name()
            )));
        }
        if got.data_type() != field.data_type() {
            return Err(Error::schema(format!(
                "\"{view}\": column \"{}\" is stored as {}, the query produced {}",
                field.name(),
                field.data_type(),
                got.data_type()
            )));
        }
    }
    if produced.fields().len() > stored.fields().len() {
        let extra = &produced.fields()[stored.fields().len()];
        return Err(Error::schema(format!(
            "\"{view}\": the query produced column \"{}\" ({}), which the stored schema does not have",
            extra.name(),
            extra.data_type()
        )));
    }
    Ok(())
}

fn prove_non_null(view: &str, stored: &SchemaRef, batch: &RecordBatch) -> Result<()> {
    for (field, column) in stored.fields().iter().zip(batch.columns()) {
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(Error::schema(format!(
                "\"{view}\": column \"{}\" is stored NOT NULL ({}), the query produced {} null(s)",
                field.name(),
                field.data_type(),
                column.null_count()
            )));
        }
    }
    Ok(())
}

/// The least (or greatest) value of a time column of `batch`, in
/// nanoseconds since the epoch.
fn time_bound(batch: &RecordBatch, column: &str, least: bool) -> Result<Option<i64>> {
    let Some(array) = batch.column_by_name(column) else {
        return Ok(None);
    };
    let as_nanos = cast(array, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
    let values = as_nanos.as_primitive::<TimestampNanosecondType>();
    Ok(if least { min(values) } else { max(values) })
}

/// The buckets of width `delta` seconds that tile `[begin, end)`, aligned
/// to multiples of the delta since the epoch (a partial bucket at either
/// end is left out).
pub fn buckets(begin: DateTime<Utc>, end: DateTime<Utc>, delta: i64) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let mut out = Vec::new();
    let first = begin.timestamp().div_euclid(delta) * delta
        + if begin.timestamp().rem_euclid(delta) == 0 && begin.timestamp_subsec_nanos() == 0 { 0 } else { delta };
    let mut t = first;
    while t + delta <= end.timestamp() {
        out.push((
            Utc.timestamp_opt(t, 0).single().expect("a time"),
            Utc.timestamp_opt(t + delta, 0).single().expect("a time"),
        ));
        t += delta;
    }
    out
}

/// Materializes `view` over `[begin, end)`: its source-delta buckets, then,
/// when its merge delta is wider, the merge-delta buckets (which merge the
/// source partitions whose counts still match); `widths` may keep one of
/// the two. A regeneration writes the wider buckets from the source. `stop`
/// is asked before each bucket (a job's cancellation): what is done stays
/// done.
pub async fn materialize_range(
    lake: &Lake,
    client: &Client,
    sets: &[ViewSet],
    view: &ViewSet,
    begin: DateTime<Utc>,
    end: DateTime<Utc>,
    mode: Mode,
    checked: &CheckedFiles,
    widths: Widths,
    mut each: impl FnMut(&BucketReport),
    stop: &dyn Fn() -> bool,
) -> Result<Vec<BucketReport>> {
    let q = queries(view)?;
    let mut reports = Vec::new();
    let wider = q.merge_delta_seconds > q.source_delta_seconds;
    let deltas = match (mode, widths) {
        // A regeneration writes each bucket of the wider delta from the
        // source: it contains whatever partitions exist (merged ones too),
        // which the swap retires.
        (Mode::Always, _) => vec![q.source_delta_seconds.max(q.merge_delta_seconds)],
        (Mode::IfStale, Widths::Both) if wider => vec![q.source_delta_seconds, q.merge_delta_seconds],
        (Mode::IfStale, Widths::Merge) if wider => vec![q.merge_delta_seconds],
        (Mode::IfStale, Widths::Merge) => vec![],
        (Mode::IfStale, _) => vec![q.source_delta_seconds],
    };
    // Each bucket's partition is recorded while the next bucket is counted
    // (compute_bucket): the range's buckets do not wait for the catalog's
    // commits in turn. An object whose record fails is an orphan, as after
    // a crash between the two (`gc`).
    let mut pending: Option<Unrecorded> = None;
    for delta in deltas {
        for (b, e) in buckets(begin, end, delta) {
            if stop() {
                break;
            }
            let (prior, computed) = compute_bucket(lake, client, sets, view, b, e, mode, checked, pending.take()).await;
            if let Some(r) = prior? {
                each(&r);
                reports.push(r);
            }
            match computed? {
                Computed::Done(r) => {
                    each(&r);
                    reports.push(r);
                }
                Computed::Written(w) => pending = Some(w),
            }
        }
    }
    if let Some(w) = pending {
        let r = w.record(client, view).await?;
        each(&r);
        reports.push(r);
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, 0, 0).unwrap()
    }

    fn part(b: u32, e: u32, count: Option<i64>) -> Partition {
        Partition {
            begin: t(b),
            end: t(e),
            file_path: Some("x".into()),
            file_size: 1,
            source_count: count,
            num_rows: 1,
            sort_order: None,
        }
    }

    #[test]
    fn buckets_tile_the_range_on_multiples_of_the_delta() {
        let b = buckets(t(0), t(3), 3600);
        assert_eq!(b, vec![(t(0), t(1)), (t(1), t(2)), (t(2), t(3))]);
        // A range that starts mid-bucket skips the partial bucket.
        let b = buckets(t(0) + chrono::Duration::minutes(30), t(3), 3600);
        assert_eq!(b, vec![(t(1), t(2)), (t(2), t(3))]);
        assert!(buckets(t(0), t(0) + chrono::Duration::minutes(59), 3600).is_empty());
        assert_eq!(buckets(t(0), Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0).unwrap(), 86400).len(), 1);
    }

    #[test]
    fn the_decision_is_micromegas_daemons() {
        assert_eq!(decide(&[], t(0), t(1), 5), Decision::Create);
        assert_eq!(decide(&[part(0, 2, Some(5))], t(0), t(1), 5), Decision::Skip("a partition sticks out of the bucket"));
        assert_eq!(decide(&[part(0, 1, None)], t(0), t(1), 5), Decision::Create);
        assert_eq!(decide(&[part(0, 1, Some(4))], t(0), t(1), 5), Decision::Create);
        assert_eq!(decide(&[part(0, 1, Some(5))], t(0), t(1), 5), Decision::Skip("up to date"));
        assert_eq!(decide(&[part(0, 1, Some(2)), part(1, 2, Some(3))], t(0), t(2), 5), Decision::Merge);
        assert_eq!(decide(&[part(0, 1, Some(2)), part(1, 2, Some(2))], t(0), t(2), 5), Decision::Create);
    }

    #[test]
    fn a_produced_schema_other_than_the_stored_one_is_named() {
        let stored = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("k", DataType::Utf8, true),
        ]));
        let e = prove_schema("v", &stored, &Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int32, false),
            Field::new("k", DataType::Utf8, true),
        ])))
        .unwrap_err();
        assert!(e.schema_mismatch);
        assert_eq!(e.message, "\"v\": column \"n\" is stored as Int64, the query produced Int32");
        let e = prove_schema("v", &stored, &Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ])))
        .unwrap_err();
        assert_eq!(e.message, "\"v\": column 1 is \"n\" in the stored schema, the query produced \"k\"");
        let e = prove_schema("v", &stored, &Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)])))
            .unwrap_err();
        assert!(e.message.contains("column \"k\""), "{}", e.message);
        // Nullability as planned is not compared; a null in a NOT NULL
        // column is, value by value.
        let produced = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("k", DataType::Utf8, true),
        ]));
        prove_schema("v", &stored, &produced).unwrap();
        let batch = RecordBatch::try_new(
            produced,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(datafusion::arrow::array::StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        let e = prove_non_null("v", &stored, &batch).unwrap_err();
        assert_eq!(e.message, "\"v\": column \"n\" is stored NOT NULL (Int64), the query produced 1 null(s)");
    }
}
