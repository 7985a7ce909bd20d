//! micromegas-views-server: the Lance Namespace materialized-view REST
//! operations over the micromegas_views extension.
//!   micromegas-views-server --dsn "host=… dbname=…" --keys keys.json --listen 127.0.0.1:2333

use clap::Parser;
use micromegas_views_server::{app, pool, Config, KeyFile};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "micromegas-views-server",
    version,
    about = "Lance Namespace materialized-view REST endpoint over micromegas_views"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:2333")]
    listen: String,
    /// Connection string (libpq style); unset parts come from PGHOST, PGPORT,
    /// PGUSER, PGDATABASE, PGPASSWORD. The user must be able to SET ROLE to
    /// every key's role.
    #[arg(long, default_value = "")]
    dsn: String,
    /// JSON key file: {"keys": [{"name": …, "key": …, "role": …}]}. Each key's
    /// requests run as its role, with its name as micromegas_views.actor.
    #[arg(long, env = "MICROMEGAS_VIEWS_SERVER_KEYS")]
    keys: Option<PathBuf>,
    /// Serve without authentication (every request runs as the connecting user).
    #[arg(long)]
    insecure_no_auth: bool,
    /// The namespace view identifiers may name (`<namespace>$<view>`).
    #[arg(long, default_value = "micromegas")]
    namespace: String,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    body_limit: usize,
    /// Statement timeout of each request's transaction, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    statement_timeout_ms: u64,
    /// Time to answer a request, in milliseconds (408 past it).
    #[arg(long, default_value_t = 30_000)]
    request_timeout_ms: u64,
    /// Connections in the pool.
    #[arg(long, default_value_t = 8)]
    pool_size: usize,
    /// Logs as JSON lines.
    #[arg(long)]
    json_logs: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.json_logs {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let keys = match (&args.keys, args.insecure_no_auth) {
        (Some(path), _) => match KeyFile::load(path) {
            Ok(keys) => Some(keys),
            Err(e) => {
                eprintln!("micromegas-views-server: {e}");
                return ExitCode::FAILURE;
            }
        },
        (None, true) => {
            tracing::warn!("serving without authentication (--insecure-no-auth)");
            None
        }
        (None, false) => {
            eprintln!(
                "micromegas-views-server: no key file (--keys); refusing to serve without authentication \
                 unless --insecure-no-auth is given"
            );
            return ExitCode::FAILURE;
        }
    };
    let pool = match pool(&args.dsn, args.pool_size) {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("micromegas-views-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let router = app(
        pool,
        Config {
            namespace: args.namespace.split('$').map(str::to_string).collect(),
            keys,
            statement_timeout: Duration::from_millis(args.statement_timeout_ms),
            request_timeout: Duration::from_millis(args.request_timeout_ms),
            body_limit: args.body_limit,
        },
    );
    let listener = match tokio::net::TcpListener::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "micromegas-views-server: cannot listen on {}: {e}",
                args.listen
            );
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(listen = %args.listen, "micromegas-views-server: serving");
    let shutdown = async {
        let ctrl_c = tokio::signal::ctrl_c();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down: finishing the requests in flight");
    };
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        eprintln!("micromegas-views-server: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
