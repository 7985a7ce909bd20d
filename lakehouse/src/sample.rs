//! A realistic telemetry lake, the same for a seed: processes and their
//! streams (one of logs, one of metrics each); blocks whose `nb_objects`
//! equals the log or measure rows they carry; `insert_time` after the event
//! time with jitter, and a few blocks that arrive hours late; levels 1–6
//! skewed toward info; several targets, exes and audiences; measures with
//! units and values. Written in the catalog's schema of each source, one
//! Parquet file per source and hour of insert time.

use crate::catalog::ViewSet;
use crate::lake::Lake;
use crate::{Error, Result};
use chrono::{DateTime, Duration, TimeZone, Timelike, Utc};
use datafusion::arrow::array::{
    ArrayRef, BinaryArray, Float64Array, Int64Array, ListBuilder, RecordBatch, StringArray,
    StringBuilder, TimestampNanosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use std::collections::BTreeMap;
use std::sync::Arc;

/// splitmix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn id(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            (b >> 48) & 0xfff,
            b & 0xffff_ffff_ffff
        )
    }
}

pub struct SampleOptions {
    pub begin: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub processes: usize,
    /// Log entries (and measures) per stream per minute, on average.
    pub rate: u64,
    pub seed: u64,
}

/// One row of any source, by column name: the values it has.
#[derive(Default, Clone)]
struct Row(BTreeMap<&'static str, Value>);

#[derive(Clone)]
enum Value {
    Text(String),
    Int(i64),
    Float(f64),
    Time(i64),
    Bytes(Vec<u8>),
    List(Vec<String>),
}

impl Row {
    fn set(mut self, k: &'static str, v: Value) -> Row {
        self.0.insert(k, v);
        self
    }
}

fn nanos(t: DateTime<Utc>) -> i64 {
    t.timestamp_nanos_opt().expect("a time in range")
}

/// The rows of every source, generated.
fn generate(o: &SampleOptions) -> BTreeMap<&'static str, Vec<Row>> {
    let mut rng = Rng(o.seed);
    let exes = ["api-server", "ingest-worker", "batch-job", "web-frontend"];
    let audiences = ["public", "team-a", "team-b"];
    let targets = ["http", "db", "cache", "auth", "scheduler", "io"];
    let metrics = [("cpu_usage", "percent"), ("mem_used", "bytes"), ("requests", "count"), ("latency", "ms")];
    let mut out: BTreeMap<&'static str, Vec<Row>> = BTreeMap::new();
    for p in 0..o.processes {
        let process_id = rng.id();
        let exe = exes[p % exes.len()].to_string();
        let computer = format!("host-{}", rng.below(3));
        let username = format!("svc-{}", exe.split('-').next().unwrap_or("x"));
        let audience = audiences[rng.below(audiences.len() as u64) as usize].to_string();
        let start = o.begin - Duration::minutes(rng.below(120) as i64 + 1);
        // Recorded when the day's first blocks arrive.
        let registered = o.begin + Duration::seconds(1 + p as i64);
        let process = Row::default()
            .set("process_id", Value::Text(process_id.clone()))
            .set("exe", Value::Text(exe.clone()))
            .set("username", Value::Text(username.clone()))
            .set("realname", Value::Text(username.clone()))
            .set("computer", Value::Text(computer.clone()))
            .set("distro", Value::Text("Debian 12".into()))
            .set("cpu_brand", Value::Text("Sample CPU".into()))
            .set("tsc_frequency", Value::Int(2_400_000_000))
            .set("start_time", Value::Time(nanos(start)))
            .set("start_ticks", Value::Int(0))
            .set("insert_time", Value::Time(nanos(registered)))
            .set("parent_process_id", Value::Text(String::new()))
            .set("last_update_time", Value::Time(nanos(registered)))
            .set("last_block_end_ticks", Value::Int(0))
            .set("last_block_end_time", Value::Time(nanos(start)));
        out.entry("processes").or_default().push(process);
        for (kind, tag) in [("log", "log"), ("metrics", "metrics")] {
            let stream_id = rng.id();
            out.entry("streams").or_default().push(
                Row::default()
                    .set("stream_id", Value::Text(stream_id.clone()))
                    .set("process_id", Value::Text(process_id.clone()))
                    .set("tags", Value::List(vec![tag.to_string()]))
                    .set("insert_time", Value::Time(nanos(registered)))
                    .set("format", Value::Text(format!("{kind}-v1")))
                    .set("last_update_time", Value::Time(nanos(registered))),
            );
            // One block a minute, each carrying about `rate` objects.
            let mut t = o.begin;
            let mut ticks = 0i64;
            while t < o.end {
                let block_end = (t + Duration::minutes(1)).min(o.end);
                let n = rng.below(2 * o.rate + 1) as i64;
                let late = rng.below(50) == 0;
                let jitter = Duration::milliseconds(500 + rng.below(30_000) as i64);
                let insert = block_end
                    + jitter
                    + if late { Duration::hours(2 + rng.below(5) as i64) } else { Duration::zero() };
                let block_id = rng.id();
                let span = (block_end - t).num_nanoseconds().unwrap_or(60_000_000_000).max(1);
                for _ in 0..n {
                    let time = nanos(t) + (rng.unit() * span as f64) as i64;
                    let common = Row::default()
                        .set("process_id", Value::Text(process_id.clone()))
                        .set("stream_id", Value::Text(stream_id.clone()))
                        .set("block_id", Value::Text(block_id.clone()))
                        .set("insert_time", Value::Time(nanos(insert)))
                        .set("exe", Value::Text(exe.clone()))
                        .set("username", Value::Text(username.clone()))
                        .set("computer", Value::Text(computer.clone()))
                        .set("time", Value::Time(time))
                        .set("target", Value::Text(targets[rng.below(targets.len() as u64) as usize].into()))
                        .set("properties", Value::Bytes(Vec::new()))
                        .set("process_properties", Value::Bytes(Vec::new()))
                        .set("audience", Value::Text(audience.clone()));
                    if kind == "log" {
                        let r = rng.below(100);
                        let level = match r {
                            0 => 1,
                            1..=4 => 2,
                            5..=19 => 3,
                            20..=69 => 4,
                            70..=89 => 5,
                            _ => 6,
                        };
                        let msg = format!("request {} handled in {} ms", rng.below(100_000), rng.below(900));
                        out.entry("log_entries").or_default().push(
                            common.set("level", Value::Int(level)).set("msg", Value::Text(msg)),
                        );
                    } else {
                        let (name, unit) = metrics[rng.below(metrics.len() as u64) as usize];
                        let value = (rng.unit() * 1000.0 * 100.0).round() / 100.0;
                        out.entry("measures").or_default().push(
                            common
                                .set("name", Value::Text(name.into()))
                                .set("unit", Value::Text(unit.into()))
                                .set("value", Value::Float(value)),
                        );
                    }
                }
                ticks += 1000;
                out.entry("blocks").or_default().push(
                    Row::default()
                        .set("block_id", Value::Text(block_id))
                        .set("stream_id", Value::Text(stream_id.clone()))
                        .set("process_id", Value::Text(process_id.clone()))
                        .set("begin_time", Value::Time(nanos(t)))
                        .set("begin_ticks", Value::Int(ticks - 1000))
                        .set("end_time", Value::Time(nanos(block_end)))
                        .set("end_ticks", Value::Int(ticks))
                        .set("nb_objects", Value::Int(n))
                        .set("object_offset", Value::Int(0))
                        .set("payload_size", Value::Int(n * 64))
                        .set("insert_time", Value::Time(nanos(insert)))
                        .set("streams.tags", Value::List(vec![tag.to_string()]))
                        .set("streams.insert_time", Value::Time(nanos(registered)))
                        .set("streams.format", Value::Text(format!("{kind}-v1")))
                        .set("processes.start_time", Value::Time(nanos(start)))
                        .set("processes.tsc_frequency", Value::Int(2_400_000_000))
                        .set("processes.exe", Value::Text(exe.clone()))
                        .set("processes.username", Value::Text(username.clone()))
                        .set("processes.realname", Value::Text(username.clone()))
                        .set("processes.computer", Value::Text(computer.clone()))
                        .set("processes.distro", Value::Text("Debian 12".into()))
                        .set("processes.cpu_brand", Value::Text("Sample CPU".into()))
                        .set("processes.insert_time", Value::Time(nanos(registered)))
                        .set("processes.parent_process_id", Value::Text(String::new())),
                );
                t = block_end;
            }
        }
    }
    out
}

/// A column of `rows` in the type `data_type`: built from the values in
/// their natural Arrow type, then cast (dictionaries, zones). A column no
/// row has gets its type's empty value.
fn column(rows: &[Row], name: &str, data_type: &DataType) -> Result<ArrayRef> {
    let base: ArrayRef = match data_type {
        DataType::Timestamp(_, _) => Arc::new(TimestampNanosecondArray::from_iter_values(
            rows.iter().map(|r| match r.0.get(name) {
                Some(Value::Time(t)) => *t,
                _ => 0,
            }),
        )),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
        | DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| match r.0.get(name) {
                Some(Value::Int(v)) => *v,
                _ => 0,
            })))
        }
        DataType::Float32 | DataType::Float64 => {
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| match r.0.get(name) {
                Some(Value::Float(v)) => *v,
                _ => 0.0,
            })))
        }
        DataType::Binary | DataType::LargeBinary | DataType::Dictionary(_, _)
            if matches!(data_type, DataType::Binary | DataType::LargeBinary)
                || matches!(data_type, DataType::Dictionary(_, v) if matches!(**v, DataType::Binary | DataType::LargeBinary)) =>
        {
            Arc::new(BinaryArray::from_iter_values(rows.iter().map(|r| match r.0.get(name) {
                Some(Value::Bytes(b)) => b.clone(),
                _ => Vec::new(),
            })))
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for r in rows {
                if let Some(Value::List(items)) = r.0.get(name) {
                    for i in items {
                        b.values().append_value(i);
                    }
                }
                b.append(true);
            }
            Arc::new(b.finish())
        }
        _ => Arc::new(StringArray::from_iter_values(rows.iter().map(|r| match r.0.get(name) {
            Some(Value::Text(s)) => s.clone(),
            _ => String::new(),
        }))),
    };
    Ok(if base.data_type() == data_type { base } else { cast(&base, data_type)? })
}

fn batch(rows: &[Row], schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| column(rows, f.name(), f.data_type()))
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn insert_time(r: &Row) -> i64 {
    match r.0.get("insert_time") {
        Some(Value::Time(t)) => *t,
        _ => 0,
    }
}

/// Writes the sample into `lake` for the sources `sets` has schemas for;
/// returns (source, files, rows) per source.
pub async fn write_sample(lake: &Lake, sets: &[ViewSet], o: &SampleOptions) -> Result<Vec<(String, usize, usize)>> {
    if o.end <= o.begin {
        return Err(Error::msg("--end must be after --begin"));
    }
    if let Some(dir) = lake.url.strip_prefix("file://") {
        std::fs::create_dir_all(dir).map_err(|e| Error::msg(format!("{}: {e}", lake.url)))?;
    }
    let rows = generate(o);
    let mut report = Vec::new();
    for (source, rows) in rows {
        let Some(set) = sets.iter().find(|s| s.name == source && s.queries.is_none()) else {
            continue;
        };
        let mut by_hour: BTreeMap<i64, Vec<Row>> = BTreeMap::new();
        for r in rows.iter() {
            let hour = insert_time(r).div_euclid(3_600_000_000_000);
            by_hour.entry(hour).or_default().push(r.clone());
        }
        for (hour, rows) in &by_hour {
            let t = Utc.timestamp_nanos(hour * 3_600_000_000_000);
            let b = batch(rows, &set.schema)?;
            let mut buf = Vec::new();
            let mut w = ArrowWriter::try_new(&mut buf, set.schema.clone(), None)?;
            w.write(&b)?;
            w.close()?;
            let path = format!(
                "{}/{}/{source}-{:02}-{}.parquet",
                Lake::source_dir(&source),
                t.format("%Y-%m-%d"),
                t.hour(),
                o.seed
            );
            lake.put(&path, buf).await?;
        }
        report.push((source.to_string(), by_hour.len(), rows.len()));
    }
    Ok(report)
}
