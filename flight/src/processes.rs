//! Query processes: every query's DataFusion work runs in a process of its
//! own, one query at a time, so that a query past its memory ends that
//! process and not the service.
//!
//! A query's meter refuses it where an error can be returned (after an
//! operator's batch, before a call that can grow its input, at every step
//! of an aggregate). Between two checks an operator can still copy one
//! value to a whole batch of rows in one allocation — a cross join, a
//! scalar subquery's value broadcast, `unnest` — and an allocation that
//! fails aborts the process it is made in. So the service (the *front*)
//! authenticates calls, answers metadata and DDL and plans `GetFlightInfo`
//! itself, and hands each statement's `DoGet` to a query process: the same
//! binary started with `--query-process <socket>`, serving FlightSQL on a
//! Unix socket in a directory only the service's user can open. There the
//! allocator ends the process (exit status
//! [`micromegas_views_core::meter::EXIT_MEMORY`]) as soon as the query
//! holds more than `--query-process-mb`, or is about to allocate past it
//! ([`micromegas_views_core::meter::end_process_past`]); the front answers
//! RESOURCE_EXHAUSTED and starts another process for the next query.
//!
//! A query process runs the front's own program (`/proc/self/exe`, even
//! once the file on disk is replaced) and reads the front's keys from its
//! standard input, never from the key file again: front and query
//! processes authenticate with the same keys for as long as the front
//! runs. The front admits a statement (its size, the deny list, the parse
//! checks) before it takes a process for it. The forwarded call carries the
//! caller's own headers (the query process authenticates it again and
//! checks the deny list itself), the caller's address (the front's only: a
//! caller's own value is dropped), the time left before the query's
//! deadline (the wait for a process counts against it), and the versions
//! of the catalog, deny list and grants the front holds, which the query
//! process waits for: what the caller's DDL just changed is what its next
//! query sees.

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightData, FlightDescriptor, FlightInfo, Ticket};
use futures::{stream, Stream, StreamExt};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

/// The header a query process reads the caller's address from.
pub const PEER_HEADER: &str = "x-micromegas-views-peer";
/// The header a query process reads the versions it must have reached
/// from (definitions, deny list, grants).
pub const VERSIONS_HEADER: &str = "x-micromegas-views-versions";
/// The header a query process reads the milliseconds left before the
/// query's deadline from.
pub const DEADLINE_HEADER: &str = "x-micromegas-views-deadline-ms";
/// The line a query process prints once it serves.
pub const READY_LINE: &str = "micromegas-views-flight: query process ready";

type DoGetStream = Pin<Box<dyn Stream<Item = Result<FlightData, Status>> + Send>>;

/// A started query process and its channel.
struct QueryProcess {
    child: tokio::process::Child,
    client: FlightServiceClient<Channel>,
    socket: PathBuf,
}

impl QueryProcess {
    /// Whether it still runs (an ended one is reaped).
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for QueryProcess {
    fn drop(&mut self) {
        // Killed if it still runs (kill_on_drop), and its socket removed.
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The query processes of a service: at most `permits` at work at once,
/// kept between queries, a new one started for each that ended.
pub struct QueryProcesses {
    exe: PathBuf,
    args: Vec<OsString>,
    /// The front's keys, as a query process reads them.
    keys: String,
    dir: PathBuf,
    idle: Mutex<Vec<QueryProcess>>,
    permits: Arc<Semaphore>,
    next: AtomicU64,
    /// What one query may hold before its process ends, in MiB.
    limit_mb: usize,
    /// How long a process may take to start.
    start_timeout: Duration,
    /// The service's query timeout, which its query processes keep.
    query_timeout: Duration,
}

/// The largest answer message a server of the service sends, the front's
/// and a query process's alike: the front holds a few of them per query
/// in flight.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// How long past a query's deadline a query process may still answer
/// before it is taken for unresponsive.
const UNRESPONSIVE_GRACE: Duration = Duration::from_secs(5);

impl QueryProcesses {
    /// `count` processes of this program started with `args` and
    /// `--query-process <socket>`, their sockets in a new directory only
    /// this user can open, `keys` on their standard input.
    pub async fn start(
        args: Vec<OsString>,
        keys: &micromegas_views_client::keys::KeyFile,
        count: usize,
        limit_mb: usize,
        query_timeout: Duration,
    ) -> Result<Arc<Self>, String> {
        let dir = std::env::temp_dir().join(format!(
            "micromegas-views-flight-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let keys = serde_json::to_string(keys).map_err(|e| format!("cannot pass the keys on: {e}"))?;
        // This program as it was started, even once its file is replaced.
        let exe = if cfg!(target_os = "linux") {
            PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?
        };
        let pool = Arc::new(QueryProcesses {
            exe,
            args,
            keys,
            dir,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(count.max(1))),
            next: AtomicU64::new(0),
            limit_mb,
            start_timeout: Duration::from_secs(60),
            query_timeout,
        });
        let started = futures::future::join_all((0..count.max(1)).map(|_| pool.spawn())).await;
        for process in started {
            let process = process.map_err(|s| s.message().to_string())?;
            pool.idle.lock().expect("idle lock").push(process);
        }
        Ok(pool)
    }

    async fn spawn(&self) -> Result<QueryProcess, Status> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let socket = self.dir.join(format!("q{n}.sock"));
        let _ = std::fs::remove_file(&socket);
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .args(&self.args)
            .arg("--query-process")
            .arg(&socket)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: between fork and exec only prctl, which is
        // async-signal-safe: the process dies with the service.
        unsafe {
            command.pre_exec(|| {
                #[cfg(target_os = "linux")]
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| Status::unavailable(format!("cannot start a query process: {e}")))?;
        {
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().expect("piped stdin");
            // Dropped once written: the process reads to its end.
            stdin
                .write_all(self.keys.as_bytes())
                .await
                .map_err(|e| Status::unavailable(format!("cannot start a query process: {e}")))?;
        }
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(self.start_timeout, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == READY_LINE {
                    return true;
                }
            }
            false
        })
        .await;
        if ready != Ok(true) {
            child.kill().await.ok();
            return Err(Status::unavailable(
                "a query process did not start (its reason is in the service's log)",
            ));
        }
        // Whatever else it prints goes on being read, so that it never
        // blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let client = connect(&socket).await.map_err(|e| {
            Status::unavailable(format!("cannot connect to a query process: {e}"))
        })?;
        let client = FlightServiceClient::new(client).max_decoding_message_size(MAX_MESSAGE_BYTES);
        Ok(QueryProcess { child, client, socket })
    }

    /// A process for one query, waited for until `deadline`.
    async fn lease(self: &Arc<Self>, deadline: Instant) -> Result<Lease, Status> {
        let permit = tokio::time::timeout_at(deadline, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| Status::resource_exhausted("too many queries running: none finished before this one's deadline"))?
            .map_err(|_| Status::unavailable("the service is stopping"))?;
        let idle = {
            let mut idle = self.idle.lock().expect("idle lock");
            // Every process that ended while idle is reaped and forgotten
            // here (a new one is started in its place when needed); the
            // one given back last, whose memory is warm, is taken.
            idle.retain_mut(QueryProcess::alive);
            idle.pop()
        };
        let process = match idle {
            Some(p) => p,
            None => tokio::time::timeout_at(deadline, self.spawn())
                .await
                .map_err(|_| Status::unavailable("a query process did not start before the query's deadline"))??,
        };
        Ok(Lease {
            process: Some(process),
            pool: self.clone(),
            _permit: permit,
            finished: false,
        })
    }

    /// Takes a process for a call and makes the call it forwards: the
    /// caller's headers and the front's own, the message unchanged.
    async fn forward<T>(
        self: &Arc<Self>,
        request: Request<T>,
        versions: [i64; 3],
        deadline: Instant,
    ) -> Result<(Lease, Request<T>, FlightServiceClient<Channel>), Status> {
        let peer = request.remote_addr();
        let (metadata, _, message) = request.into_parts();
        let lease = self.lease(deadline).await?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let forwarded = Request::from_parts(forwarded_metadata(metadata, peer, versions, left), Default::default(), message);
        let client = lease.process.as_ref().expect("a leased process").client.clone();
        Ok((lease, forwarded, client))
    }

    /// Plans a statement in a query process (`GetFlightInfo`): planning
    /// folds constant expressions, which can be as large as a query may
    /// hold, so it runs where a query runs.
    pub async fn get_flight_info(
        self: &Arc<Self>,
        request: Request<FlightDescriptor>,
        versions: [i64; 3],
        deadline: Instant,
    ) -> Result<Response<FlightInfo>, Status> {
        let (mut lease, forwarded, mut client) = self.forward(request, versions, deadline).await?;
        let answer = lease.reply(deadline, client.get_flight_info(forwarded)).await?;
        lease.finished = true;
        Ok(answer)
    }

    /// Runs an action in a query process (creating a prepared statement,
    /// which plans it) and answers its results.
    pub async fn do_action(
        self: &Arc<Self>,
        request: Request<Action>,
        versions: [i64; 3],
        deadline: Instant,
    ) -> Result<Vec<arrow_flight::Result>, Status> {
        let (mut lease, forwarded, mut client) = self.forward(request, versions, deadline).await?;
        let mut results = lease.reply(deadline, client.do_action(forwarded)).await?.into_inner();
        let mut out = Vec::new();
        while let Some(r) = lease.reply(deadline, async { results.next().await.transpose() }).await? {
            out.push(r);
        }
        lease.finished = true;
        Ok(out)
    }

    /// Runs a statement's `DoGet` in a query process and streams its
    /// answer back; the process's end while it runs is answered for what it
    /// was.
    pub async fn do_get(
        self: &Arc<Self>,
        request: Request<Ticket>,
        versions: [i64; 3],
        deadline: Instant,
    ) -> Result<Response<DoGetStream>, Status> {
        let (mut lease, forwarded, mut client) = self.forward(request, versions, deadline).await?;
        let timeout = self.query_timeout;
        let answer = lease.reply(deadline, client.do_get(forwarded)).await?;
        let (metadata, inner, extensions) = answer.into_parts();
        let out = stream::unfold(Some((inner, lease)), move |state| async move {
            let (mut inner, mut lease) = state?;
            if tokio::time::Instant::now() >= deadline {
                // The caller read too slowly to finish before the query's
                // deadline: the query ends, its process is not to blame
                // (dropping the stream stops its work there).
                return Some((Err(crate::state::timeout_status(timeout)), None));
            }
            match lease.reply(deadline, async { inner.next().await.transpose() }).await {
                Ok(Some(data)) => Some((Ok(data), Some((inner, lease)))),
                Ok(None) => {
                    lease.finished = true;
                    None
                }
                Err(status) => {
                    lease.finished = true;
                    Some((Err(status), None))
                }
            }
        });
        Ok(Response::from_parts(metadata, Box::pin(out) as DoGetStream, extensions))
    }
}

impl Drop for QueryProcesses {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The caller's headers without the ones only the front may set, and the
/// front's own.
fn forwarded_metadata(mut metadata: MetadataMap, peer: Option<SocketAddr>, versions: [i64; 3], left: Duration) -> MetadataMap {
    metadata.remove(PEER_HEADER);
    metadata.remove(VERSIONS_HEADER);
    metadata.remove(DEADLINE_HEADER);
    metadata.insert(
        DEADLINE_HEADER,
        MetadataValue::try_from(left.as_millis().to_string()).expect("digits"),
    );
    if let Some(peer) = peer {
        if let Ok(v) = MetadataValue::try_from(peer.to_string()) {
            metadata.insert(PEER_HEADER, v);
        }
    }
    let versions = format!("{},{},{}", versions[0], versions[1], versions[2]);
    metadata.insert(VERSIONS_HEADER, MetadataValue::try_from(versions).expect("digits and commas"));
    metadata
}

/// The versions a forwarded call carries.
pub fn versions_of(metadata: &MetadataMap) -> Option<[i64; 3]> {
    let text = metadata.get(VERSIONS_HEADER)?.to_str().ok()?;
    let mut parts = text.split(',').map(|p| p.parse::<i64>().ok());
    Some([parts.next()??, parts.next()??, parts.next()??])
}

/// The time left before its query's deadline a forwarded call carries.
pub fn time_left_of(metadata: &MetadataMap) -> Option<Duration> {
    let ms: u64 = metadata.get(DEADLINE_HEADER)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

/// The caller's address a forwarded call carries.
pub fn peer_of(metadata: &MetadataMap) -> Option<SocketAddr> {
    metadata.get(PEER_HEADER)?.to_str().ok()?.parse().ok()
}

/// One query's process, given back when the query's answer is dropped
/// (kept if it still runs, forgotten if it ended).
struct Lease {
    process: Option<QueryProcess>,
    pool: Arc<QueryProcesses>,
    _permit: OwnedSemaphorePermit,
    /// Whether the process answered the call to its end: given back
    /// before it has (a caller gone mid-answer), it may still be stopping
    /// that work, and is the last one taken.
    finished: bool,
}

impl Lease {
    /// The process's reply to a call of the query whose deadline is
    /// `deadline`. The query process keeps that deadline itself; past it
    /// and a grace, a process that has not replied is not answering
    /// (stopped, say): it is killed and the caller told. A status it
    /// answered is explained ([`Lease::explain`]).
    async fn reply<R>(&mut self, deadline: Instant, call: impl std::future::Future<Output = Result<R, Status>>) -> Result<R, Status> {
        match tokio::time::timeout_at(deadline + UNRESPONSIVE_GRACE, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(status)) => Err(self.explain(status).await),
            Err(_) => Err(self.unresponsive()),
        }
    }

    /// Kills a process that did not answer within its query's deadline and
    /// a grace (it is not given back), and says so.
    fn unresponsive(&mut self) -> Status {
        if let Some(mut process) = self.process.take() {
            process.child.start_kill().ok();
        }
        tracing::error!("a query process did not answer within its query's deadline; it was killed");
        Status::deadline_exceeded(format!(
            "the query ran past the service's query timeout ({} s), and its process did not answer: it was ended",
            self.pool.query_timeout.as_secs_f64()
        ))
    }

    /// `status` as the caller should read it: when the process ended under
    /// the query, why it ended.
    async fn explain(&mut self, status: Status) -> Status {
        let Some(process) = self.process.as_mut() else {
            return status;
        };
        // A status the query process answered is passed on as it is; a
        // broken connection (a status with a transport error as its
        // source) is explained by the process's end, whose status is there
        // a moment after its socket closes.
        let broken = std::error::Error::source(&status).is_some();
        let mut ended = None;
        let attempts = if broken { 50 } else { 1 };
        for attempt in 1..=attempts {
            match process.child.try_wait() {
                Ok(Some(s)) => {
                    ended = Some(s);
                    break;
                }
                Ok(None) if attempt < attempts => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => break,
            }
        }
        let Some(ended) = ended else {
            return status;
        };
        use std::os::unix::process::ExitStatusExt;
        if ended.code() == Some(micromegas_views_core::meter::EXIT_MEMORY) {
            tracing::warn!(limit_mb = self.pool.limit_mb, "a query went past the memory its process may hold; its process ended");
            return Status::resource_exhausted(format!(
                "the query needs more memory than a query may use: it went past the {} MiB its process may hold \
                 (--query-process-mb), and its process was ended",
                self.pool.limit_mb
            ));
        }
        tracing::error!(status = %ended, "a query process ended while it ran a query");
        Status::internal(format!(
            "the query failed: its process ended ({})",
            match ended.signal() {
                Some(signal) => format!("signal {signal}"),
                None => ended.to_string(),
            }
        ))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            if process.alive() {
                let mut idle = self.pool.idle.lock().expect("idle lock");
                if self.finished {
                    idle.push(process);
                } else {
                    idle.insert(0, process);
                }
            }
        }
    }
}

/// A channel to the query process serving on `socket`.
async fn connect(socket: &Path) -> Result<Channel, tonic::transport::Error> {
    let socket = socket.to_path_buf();
    // The URI is not used: every connection is the socket's.
    Endpoint::from_static("http://query-process")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(socket).await?))
            }
        }))
        .await
}
