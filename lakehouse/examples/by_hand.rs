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
                let dir = format!("{lake}/sources/{}/", source.name);
                if !std::path::Path::new(&dir).exists() {
                    continue;
                }
                let options = ListingOptions::new(Arc::new(ParquetFormat::default().with_force_view_types(false)))
                    .with_file_extension("");
                let config = ListingTableConfig::new(ListingTableUrl::parse(&dir)?)
                    .with_listing_options(options)
                    .with_schema(source.schema.clone());
                let all = format!("__{}__all", source.name);
                ctx.register_table(&all, Arc::new(ListingTable::try_new(config)?))?;
                let df = ctx
                    .sql(&format!(
                        "SELECT * FROM \"{all}\" WHERE insert_time >= TIMESTAMP '{}' AND insert_time < TIMESTAMP '{}'",
                        b.format("%Y-%m-%dT%H:%M:%S"),
                        e.format("%Y-%m-%dT%H:%M:%S")
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
