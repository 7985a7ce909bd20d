//! The maintenance daemon's side of the job queue (`sql/jobs.sql`).
//!
//! A [`JobWorker`] LISTENs on `micromegas_jobs` and also polls, claims the
//! oldest queued job (`mm_claim_jobs(worker, 1, kinds)`: `FOR UPDATE SKIP
//! LOCKED`, with a lease), runs the caller's handler while it heartbeats the lease, and
//! reports the handler's [`JobOutcome`] with `mm_finish_job`. Every claim
//! carries a lease token, returned once by the claim and required by the
//! heartbeat and the finish: the worker's name proves nothing (two workers
//! may share one). A cancellation requested while the job runs reaches the
//! handler through [`JobContext::cancelled`]; a lease the worker lost (it
//! expired and another worker took the job, or the job was finished under
//! another lease) is reported as [`Ran::LeaseLost`], whether a heartbeat or
//! the finish found out, and the worker goes on with the next job.

use crate::{connection, forward_notifications, in_recovery};
use std::future::Future;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio_postgres::Client;

pub const JOBS_CHANNEL: &str = "micromegas_jobs";

/// The refusal of a heartbeat or finish whose lease is no longer the job's
/// (SQLSTATE 55000): the job went back to the queue, was claimed again or
/// finished. Not a connection problem: the worker goes on.
fn lease_lost(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE)
}

/// A claimed job, as `mm_claim_jobs` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub job_id: String,
    pub kind: String,
    pub view_set_name: String,
    /// The insert-time range; `None` is unbounded.
    pub begin_time: Option<SystemTime>,
    pub end_time: Option<SystemTime>,
    pub params: serde_json::Value,
    /// How many times the job has been claimed, this claim included.
    pub attempts: i32,
}

/// What the handler reports.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOutcome {
    pub ok: bool,
    pub phase: Option<String>,
    pub message: Option<String>,
    pub retryable: bool,
}

impl JobOutcome {
    pub fn done() -> Self {
        JobOutcome {
            ok: true,
            phase: None,
            message: None,
            retryable: false,
        }
    }

    pub fn failed(phase: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        JobOutcome {
            ok: false,
            phase: Some(phase.into()),
            message: Some(message.into()),
            retryable,
        }
    }
}

/// What the handler can watch while it runs, and how it says how far it
/// got.
#[derive(Debug, Clone)]
pub struct JobContext {
    cancel: watch::Receiver<bool>,
    progress: watch::Sender<Option<serde_json::Value>>,
}

impl JobContext {
    /// The attempt's progress so far (a small JSON object: at most 4096
    /// bytes as text), sent with the next heartbeat and shown in the job's
    /// row (`micromegas.jobs.progress`) until the next report.
    pub fn report_progress(&self, progress: serde_json::Value) {
        self.progress.send_replace(Some(progress));
    }

    /// True once a cancellation was requested (seen on a heartbeat).
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves when a cancellation is requested.
    pub async fn cancelled(&mut self) {
        let _ = self.cancel.wait_for(|c| *c).await;
    }
}

/// How one claimed job ended, from this worker's point of view.
#[derive(Debug, Clone, PartialEq)]
pub enum Ran {
    /// Reported with `mm_finish_job`; the job's new state (`done`,
    /// `failed`, `queued` for a retry, `cancelled`).
    Finished { job_id: String, state: String },
    /// The lease was lost: while the handler ran (it was stopped) or by the
    /// time it finished. Nothing was reported; another worker owns the job
    /// now, or it ended without this worker.
    LeaseLost { job_id: String },
}

#[derive(Debug, Clone)]
pub struct JobWorkerConfig {
    pub dsn: String,
    /// The name `mm_claim_jobs` records as the job's worker.
    pub worker: String,
    /// Only these kinds (`None`: every kind).
    pub kinds: Option<Vec<String>>,
    /// How often the queue is polled even without a notification.
    pub poll_interval: Duration,
    /// How often a running job's lease is extended; keep it well under
    /// `micromegas_views.job_lease` (5 minutes by default).
    pub heartbeat_interval: Duration,
}

impl JobWorkerConfig {
    pub fn new(dsn: impl Into<String>, worker: impl Into<String>) -> Self {
        JobWorkerConfig {
            dsn: dsn.into(),
            worker: worker.into(),
            kinds: None,
            poll_interval: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(30),
        }
    }
}

pub struct JobWorker {
    config: JobWorkerConfig,
}

impl JobWorker {
    pub fn new(config: JobWorkerConfig) -> Self {
        JobWorker { config }
    }

    /// Claims one job and runs it to the end; `None` when the queue had
    /// nothing for this worker.
    pub async fn run_once<F, Fut>(
        &self,
        client: &Client,
        handler: &F,
    ) -> Result<Option<Ran>, tokio_postgres::Error>
    where
        F: Fn(Job, JobContext) -> Fut,
        Fut: Future<Output = JobOutcome>,
    {
        let rows = client
            .query(
                "SELECT job_id::text, kind, view_set_name, begin_time, end_time, params, attempts,
                        lease_token::text
                   FROM micromegas.mm_claim_jobs($1, 1, $2)",
                &[&self.config.worker, &self.config.kinds],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let job = Job {
            job_id: row.get(0),
            kind: row.get(1),
            view_set_name: row.get(2),
            begin_time: row.get(3),
            end_time: row.get(4),
            params: row.get(5),
            attempts: row.get(6),
        };
        // Proves this claim to the heartbeat and the finish; never logged.
        let lease_token: String = row.get(7);
        let job_id = job.job_id.clone();
        tracing::info!(job_id = %job_id, kind = %job.kind, view_set_name = %job.view_set_name,
                       attempts = job.attempts, worker = %self.config.worker, "micromegas_views: job claimed");
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (progress_tx, mut progress_rx) = watch::channel(None);
        let work = handler(job, JobContext { cancel: cancel_rx, progress: progress_tx });
        tokio::pin!(work);
        let mut ticker = tokio::time::interval(self.config.heartbeat_interval);
        ticker.tick().await;
        let outcome = loop {
            tokio::select! {
                outcome = &mut work => break outcome,
                _ = ticker.tick() => {
                    // The progress reported since the last heartbeat, if any.
                    let progress = progress_rx
                        .has_changed()
                        .unwrap_or(false)
                        .then(|| progress_rx.borrow_and_update().clone().map(tokio_postgres::types::Json))
                        .flatten();
                    let beat = client
                        .query_one("SELECT micromegas.mm_heartbeat_job($1::text::uuid, $2::text::uuid, $3::jsonb)",
                                   &[&job_id, &lease_token, &progress])
                        .await;
                    match beat {
                        Ok(row) => {
                            let state: String = row.get(0);
                            if state == "cancel_requested" && !*cancel_tx.borrow() {
                                tracing::info!(job_id = %job_id, "micromegas_views: job cancellation requested");
                                let _ = cancel_tx.send(true);
                            }
                        }
                        Err(e) if lease_lost(&e) => {
                            tracing::warn!(job_id = %job_id, error = %e, "micromegas_views: job lease lost; stopping");
                            return Ok(Some(Ran::LeaseLost { job_id }));
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        let finished = client
            .query_one(
                "SELECT micromegas.mm_finish_job($1::text::uuid, $2::text::uuid, $3, $4, $5, $6)",
                &[
                    &job_id,
                    &lease_token,
                    &outcome.ok,
                    &outcome.phase,
                    &outcome.message,
                    &outcome.retryable,
                ],
            )
            .await;
        let state: String = match finished {
            Ok(row) => row.get(0),
            Err(e) if lease_lost(&e) => {
                tracing::warn!(job_id = %job_id, error = %e,
                               "micromegas_views: job lease lost before the result was reported");
                return Ok(Some(Ran::LeaseLost { job_id }));
            }
            Err(e) => return Err(e),
        };
        tracing::info!(job_id = %job_id, state = %state, "micromegas_views: job finished");
        Ok(Some(Ran::Finished { job_id, state }))
    }

    /// Runs jobs until `shutdown` resolves: claims while there is work,
    /// then waits for a notification on `micromegas_jobs` or the poll.
    /// Returns on shutdown, or with the connection's error (the caller
    /// decides whether to reconnect).
    pub async fn run<F, Fut>(
        &self,
        handler: F,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), tokio_postgres::Error>
    where
        F: Fn(Job, JobContext) -> Fut,
        Fut: Future<Output = JobOutcome>,
    {
        let (pg_config, tls) = connection(&self.config.dsn)?;
        let (client, connection) = pg_config.connect(tls).await?;
        let (driver, mut notify_rx) = forward_notifications(connection, JOBS_CHANNEL);
        tokio::pin!(shutdown);
        let result = async {
            // Jobs are claimed on the primary only: pointed at a hot standby,
            // the worker says so once and waits, polling every
            // poll_interval, until the server is promoted or shutdown.
            let mut ticker = tokio::time::interval(self.config.poll_interval);
            let mut warned = false;
            while in_recovery(&client).await? {
                if !warned {
                    tracing::warn!(worker = %self.config.worker,
                        "micromegas_views: connected to a hot standby (in recovery), where jobs cannot be claimed; waiting until it is promoted");
                    warned = true;
                }
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    _ = ticker.tick() => {}
                }
            }
            client
                .batch_execute(&format!("LISTEN {JOBS_CHANNEL}"))
                .await?;
            loop {
                // Drain the queue, then wait for a newly queued job (or an
                // unreadable payload), the poll, or the shutdown.
                while self.run_once(&client, &handler).await?.is_some() {}
                loop {
                    tokio::select! {
                        _ = &mut shutdown => return Ok(()),
                        woke = notify_rx.recv() => match woke {
                            Some(payload) if payload.is_null() || payload["op"] == "queued" => break,
                            Some(_) => {}
                            None => {
                                client.simple_query("SELECT 1").await?;
                                return Ok(());
                            }
                        },
                        _ = ticker.tick() => break,
                    }
                }
            }
        }
        .await;
        driver.abort();
        result
    }
}
