//! The baseline of the daemon's benchmark: DataFusion running the same
//! extract queries over the same source files, bucket by bucket, and
//! writing the same Parquet files by hand, in one process — no freshness
//! count, no schema proof, no catalog writes.
//!
//! usage: by_hand LAKE_DIR OUT_DIR DSN BEGIN END VIEW...
//! (the definitions are read once from DSN, as the daemon reads them)

use chrono::{DateTime, Utc};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use micromegas_views_lakehouse::catalog;
use micromegas_views_lakehouse::write::{buckets, substitute};
use std::sync::Arc;

/// Every `*.parquet` file under `dir`, at any depth.
fn parquet_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(parquet_files(&path));
        } else if path.extension().is_some_and(|e| e == "parquet") {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (lake, out, dsn) = (&args[1], &args[2], &args[3]);
    let begin: DateTime<Utc> = args[4].parse()?;
    let end: DateTime<Utc> = args[5].parse()?;
    let wanted = &args[6..];
    let client = micromegas_views_client::connect(dsn).await?;
    let sets = catalog::view_sets(&client).await?;
    std::fs::create_dir_all(out)?;
    let mut rows = 0usize;
    for view in sets.iter().filter(|s| wanted.contains(&s.name)) {
        let q = view.queries.as_ref().expect("a view");
        for (b, e) in buckets(begin, end, q.source_delta_seconds) {
            let mut config = SessionConfig::new().with_target_partitions(2);
            config.options_mut().execution.parquet.schema_force_view_types = false;
            let ctx = SessionContext::new_with_config(config);
            for source in sets.iter().filter(|s| s.queries.is_none()) {
                let files = parquet_files(&std::path::PathBuf::from(format!("{lake}/sources/{}", source.name)));
                if files.is_empty() {
                    continue;
                }
                let urls = files
                    .iter()
                    .map(|f| ListingTableUrl::parse(f.to_string_lossy().as_ref()))
                    .collect::<Result<Vec<_>, _>>()?;
                let options = ListingOptions::new(Arc::new(ParquetFormat::default().with_force_view_types(false)))
                    .with_file_extension("");
                let config = ListingTableConfig::new_with_multi_paths(urls)
                    .with_listing_options(options)
                    .with_schema(source.schema.clone());
                let all = format!("__{}__all", source.name);
                ctx.register_table(&all, Arc::new(ListingTable::try_new(config)?))?;
                let df = ctx
                    .sql(&format!(
                        "SELECT * FROM \"{all}\" WHERE insert_time >= arrow_cast('{}', 'Timestamp(Nanosecond, Some(\"+00:00\"))') \
                         AND insert_time < arrow_cast('{}', 'Timestamp(Nanosecond, Some(\"+00:00\"))')",
                        b.format("%Y-%m-%dT%H:%M:%SZ"),
                        e.format("%Y-%m-%dT%H:%M:%SZ")
                    ))
                    .await?;
                ctx.register_table(&source.name, df.into_view())?;
            }
            let mut sql = substitute(&q.extract, b, e);
            if let Some(cols) = &q.merge_sort_order {
                sql = format!("SELECT * FROM ({sql}) ORDER BY {}", cols.join(", "));
            }
            let mut stream = ctx.sql(&sql).await?.execute_stream().await?;
            let path = format!("{out}/{}-{}.parquet", view.name, b.timestamp());
            let mut writer = ArrowWriter::try_new(std::fs::File::create(&path)?, stream.schema(), None)?;
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                rows += batch.num_rows();
                writer.write(&batch)?;
            }
            writer.close()?;
        }
    }
    println!("{rows}");
    Ok(())
}
