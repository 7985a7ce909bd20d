//! Prints the materialization order every time it changes.
//!   cargo run -p micromegas_views_client --example watch_order -- "host=/tmp dbname=postgres"
use micromegas_views_client::{Config, Watcher};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("MMV_DSN").ok())
        .unwrap_or_else(|| "host=/var/run/postgresql dbname=postgres".into());
    let watcher = Watcher::spawn(Config::new(dsn));
    let mut updates = watcher.subscribe();
    loop {
        let snapshot = updates.borrow_and_update().clone();
        println!("catalog version {}:", snapshot.version);
        for (position, (name, group)) in snapshot.materialization_order().iter().enumerate() {
            println!("  {:>3}. {name} (update_group {group})", position + 1);
        }
        if updates.changed().await.is_err() {
            return;
        }
    }
}
