//! micromegas-views-flight: the FlightSQL service.
//!   micromegas-views-flight --dsn "host=… dbname=…" --lake file:///lake --keys keys.json

use arrow_flight::flight_service_server::FlightServiceServer;
use clap::Parser;
use micromegas_views_client::keys::KeyFile;
use micromegas_views_flight::processes::QueryProcesses;
use micromegas_views_flight::service::FlightSql;
use micromegas_views_flight::state::{Settings, State};
use micromegas_views_lakehouse::lake::Lake;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The system allocator, each allocation attributed to the query it was
/// made for, so that what a query holds is bounded as a whole
/// (`micromegas_views_core::meter`).
#[global_allocator]
static ALLOCATOR: micromegas_views_lakehouse::meter::MeteredAllocator = micromegas_views_lakehouse::meter::MeteredAllocator;

#[derive(Parser)]
#[command(name = "micromegas-views-flight", version, about = "Arrow FlightSQL over the micromegas_views lake")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: String,
    /// The primary (libpq style; unset parts from PGHOST, PGPORT, …): DDL,
    /// admin functions and deny hits go there. The login role must be a
    /// member of micromegas_service and able to SET ROLE to every key's role.
    #[arg(long, default_value = "")]
    dsn: String,
    /// Where the catalog is read from (a hot standby, say); default: --dsn.
    #[arg(long)]
    catalog_dsn: Option<String>,
    /// The lake: file:///path or s3://bucket/prefix.
    #[arg(long, env = "MICROMEGAS_VIEWS_LAKE")]
    lake: String,
    /// JSON key file: {"keys": [{"name", "key", "role", "claims": {"user_id", "email", "groups", "admin"}}]}.
    #[arg(long, env = "MICROMEGAS_VIEWS_FLIGHT_KEYS")]
    keys: PathBuf,
    /// Memory one query may hold in all, in MiB, counted at every allocation (its operators' pool: half of it, past which they spill).
    #[arg(long, default_value_t = 1024)]
    query_memory_mb: usize,
    /// A query is stopped past this many seconds.
    #[arg(long, default_value_t = 300)]
    query_timeout_seconds: u64,
    /// Queries planned or running at once (the others wait their turn).
    #[arg(long, default_value_t = 4)]
    max_concurrent_queries: usize,
    /// Statement timeout of each Postgres transaction, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    statement_timeout_ms: u64,
    /// Connections in each pool.
    #[arg(long, default_value_t = 8)]
    pool_size: usize,
    /// Threads of the runtime queries run on.
    #[arg(long, default_value_t = 2)]
    query_threads: usize,
    /// The longest statement taken, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_statement_bytes: usize,
    /// The most tables a statement may read (every FROM and JOIN item, in
    /// every subquery and UNION member, each CTE counted where it is read):
    /// planning cannot be stopped part way, and grows faster than linearly
    /// with them.
    #[arg(long, default_value_t = 64)]
    max_query_tables: usize,
    /// The most SELECT and VALUES blocks a statement may hold (UNION
    /// members, CTEs, subqueries), for the same reason.
    #[arg(long, default_value_t = 256)]
    max_query_selects: usize,
    /// The most expressions a statement may hold, each CTE counted where it
    /// is read, for the same reason.
    #[arg(long, default_value_t = 20_000)]
    max_query_expressions: usize,
    /// Memory, in MiB, past which a query's process is ended (each query
    /// runs in a process of its own, one of --max-concurrent-queries):
    /// what --query-memory-mb's checks cannot stop in time, an operator
    /// copying a value to a whole batch of rows, ends that query only.
    /// Default: twice --query-memory-mb, plus 256.
    #[arg(long)]
    query_process_mb: Option<usize>,
    /// Serve as one of a service's query processes on this Unix socket (the
    /// service starts them itself).
    #[arg(long, hide = true)]
    query_process: Option<PathBuf>,
}

fn pool(dsn: &str, size: usize, what: &str) -> Result<deadpool_postgres::Pool, String> {
    let (config, tls) = micromegas_views_client::connection(dsn).map_err(|e| format!("invalid {what}: {e}"))?;
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    deadpool_postgres::Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| format!("cannot build the connection pool: {e}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let fail = |message: String| {
        eprintln!("micromegas-views-flight: {message}");
        ExitCode::from(2)
    };
    let query_runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.query_threads.max(1))
        .thread_name("query")
        // Planning recurses once per level of a statement's nesting (up to
        // the parse check's limit): room for it, only touched pages resident.
        .thread_stack_size(256 << 20)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the query runtime: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(64 << 20)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    let result = runtime.block_on(async {
        // A query process takes its front's keys, on its standard input.
        let keys = match &args.query_process {
            None => KeyFile::load(&args.keys)?,
            Some(_) => {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .map_err(|e| format!("cannot read the keys on standard input: {e}"))?;
                KeyFile::parse(&text, "the keys on standard input")?
            }
        };
        let lake = Lake::open(&args.lake).map_err(|e| e.to_string())?;
        let catalog_dsn = args.catalog_dsn.clone().unwrap_or_else(|| args.dsn.clone());
        let settings = Settings {
            lake,
            primary: pool(&args.dsn, args.pool_size, "--dsn")?,
            catalog: pool(&catalog_dsn, args.pool_size, "--catalog-dsn")?,
            catalog_dsn,
            keys,
            query_memory_bytes: args.query_memory_mb << 20,
            query_timeout: Duration::from_secs(args.query_timeout_seconds),
            statement_timeout: Duration::from_millis(args.statement_timeout_ms),
            max_concurrent_queries: args.max_concurrent_queries,
            max_statement_bytes: args.max_statement_bytes,
            max_query_shape: micromegas_views_core::planner::QueryShape {
                tables: args.max_query_tables,
                selects: args.max_query_selects,
                expressions: args.max_query_expressions,
            },
            watch: args.query_process.is_none(),
        };
        let process_mb = args
            .query_process_mb
            .unwrap_or(2 * args.query_memory_mb + 256)
            .max(args.query_memory_mb);
        if let Some(socket) = &args.query_process {
            return serve_queries(settings, query_runtime.handle().clone(), socket, process_mb).await;
        }
        let keys = settings.keys.clone();
        let state = Arc::new(State::start(settings, query_runtime.handle().clone()).await?);
        let queries = QueryProcesses::start(
            std::env::args_os().skip(1).collect(),
            &keys,
            args.max_concurrent_queries,
            process_mb,
            Duration::from_secs(args.query_timeout_seconds),
        )
        .await?;
        let address = args
            .listen
            .parse()
            .map_err(|e| format!("--listen {}: {e}", args.listen))?;
        let listener = tokio::net::TcpListener::bind::<std::net::SocketAddr>(address)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        // The line a supervisor (or a test) waits for.
        println!("micromegas-views-flight: listening on {bound}");
        let service = FlightServiceServer::new(FlightSql {
            state,
            queries: Some(queries),
            forwarded: false,
        })
            .max_decoding_message_size(16 << 20)
            .max_encoding_message_size(micromegas_views_flight::processes::MAX_MESSAGE_BYTES);
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tokio_stream_listener(listener),
                stopping(),
            )
            .await
            .map_err(|e| format!("the server stopped: {e}"))
    });
    query_runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// A query process: the service's own state, one query at a time, its
/// FlightSQL on `socket` for the front that started it, ended by the
/// allocator past `process_mb`
/// ([`micromegas_views_flight::processes`]).
async fn serve_queries(
    mut settings: Settings,
    query_runtime: tokio::runtime::Handle,
    socket: &std::path::Path,
    process_mb: usize,
) -> Result<(), String> {
    settings.max_concurrent_queries = 1;
    micromegas_views_lakehouse::meter::end_process_past((process_mb as u64) << 20);
    let state = Arc::new(State::start(settings, query_runtime).await?);
    let listener = tokio::net::UnixListener::bind(socket)
        .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    println!("{}", micromegas_views_flight::processes::READY_LINE);
    let service = FlightServiceServer::new(FlightSql {
        state,
        queries: None,
        forwarded: true,
    })
    .max_decoding_message_size(16 << 20)
    .max_encoding_message_size(micromegas_views_flight::processes::MAX_MESSAGE_BYTES);
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(stream, _)| stream);
        Some((next, listener))
    });
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stopping())
        .await
        .map_err(|e| format!("the query process stopped: {e}"))
}

/// Resolves when the service is asked to stop: SIGINT or SIGTERM. It then
/// finishes the calls in flight, and its query processes are killed with it.
async fn stopping() {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            tokio::signal::ctrl_c().await.ok();
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

fn tokio_stream_listener(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(stream, _)| {
            stream.set_nodelay(true).ok();
            stream
        });
        Some((next, listener))
    })
}
