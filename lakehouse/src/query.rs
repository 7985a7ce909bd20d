//! SQL over the lake: every view as its merge query over its partitions of
//! the current schema hash, every source over its files. A library
//! function so that a query service reuses the same registration.

use crate::catalog;
use crate::lake::Lake;
use crate::read::{self, CheckedFiles};
use crate::{Error, Result};
use chrono::{DateTime, TimeZone, Utc};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampNanosecondType};
use tokio_postgres::Client;

/// Runs `sql` over the whole lake.
pub async fn run(lake: &Lake, client: &Client, sql: &str) -> Result<Vec<RecordBatch>> {
    let sets = catalog::view_sets(client).await?;
    let ctx = read::session(lake, client, &sets, None, None, &CheckedFiles::default(), None).await?;
    let df = ctx.sql(sql).await.map_err(|e| Error::msg(e.to_string()))?;
    Ok(df.collect().await?)
}

/// The insert-time extent of the lake's `blocks` (None when it has none).
pub async fn source_extent(lake: &Lake, client: &Client) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>> {
    let batches = run(lake, client, "SELECT min(insert_time) AS lo, max(insert_time) AS hi FROM blocks").await?;
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else {
        return Ok(None);
    };
    let get = |i: usize| -> Result<Option<DateTime<Utc>>> {
        let c = cast(batch.column(i), &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
        let v = c.as_primitive::<TimestampNanosecondType>();
        Ok((!v.is_null(0)).then(|| Utc.timestamp_nanos(v.value(0))))
    };
    Ok(match (get(0)?, get(1)?) {
        (Some(lo), Some(hi)) => Some((lo, hi)),
        _ => None,
    })
}

pub fn write_csv(out: &mut impl std::io::Write, batches: &[RecordBatch]) -> Result<()> {
    let mut w = datafusion::arrow::csv::WriterBuilder::new().with_header(true).build(out);
    for b in batches {
        w.write(b)?;
    }
    Ok(())
}

pub fn write_json_lines(out: &mut impl std::io::Write, batches: &[RecordBatch]) -> Result<()> {
    let mut w = datafusion::arrow::json::LineDelimitedWriter::new(out);
    for b in batches {
        w.write(b)?;
    }
    w.finish()?;
    Ok(())
}

pub fn write_ipc(out: &mut impl std::io::Write, batches: &[RecordBatch]) -> Result<()> {
    let Some(first) = batches.first() else {
        return Ok(());
    };
    let mut w = datafusion::arrow::ipc::writer::StreamWriter::try_new(out, &first.schema())?;
    for b in batches {
        w.write(b)?;
    }
    w.finish()?;
    Ok(())
}
