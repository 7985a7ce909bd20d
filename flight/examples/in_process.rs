//! The baseline of the FlightSQL benchmark: DataFusion in process over the
//! same partition files, the view registered as its merge query over them
//! once — no network, no encoding, no catalog read per query, no access
//! rules.
//!
//! usage: in_process LAKE_URL DSN VIEW, then one SQL statement per line on
//! stdin; prints, per statement, its milliseconds and its row count.

use micromegas_views_lakehouse::lake::Lake;
use micromegas_views_lakehouse::read::{self, CheckedFiles};
use micromegas_views_lakehouse::catalog;
use std::io::BufRead;
use std::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (lake_url, dsn, view) = (&args[1], &args[2], &args[3]);
    let lake = Lake::open(lake_url)?;
    let client = micromegas_views_client::connect(dsn).await?;
    let sets = catalog::view_sets(&client).await?;
    let set = sets.iter().find(|s| &s.name == view).ok_or("no such view")?;
    let ctx = read::new_context();
    lake.register(&ctx);
    read::register_set(&ctx, &lake, &client, set, None, &CheckedFiles::default()).await?;
    for line in std::io::stdin().lock().lines() {
        let sql = line?;
        let started = Instant::now();
        let batches = ctx.sql(&sql).await?.collect().await?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        println!("{:.3} {rows}", started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(())
}
