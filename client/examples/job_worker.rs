//! A maintenance-daemon stand-in: takes jobs from the queue and
//! "materializes" each by sleeping (`params.sleep_ms`, default 200 ms), then
//! reports it done; a job whose `params.fail` is set fails, retryably.
//!   MMV_DSN="host=… dbname=…" cargo run -p micromegas_views_client --example job_worker [worker-name]
//! Stops on Ctrl-C.
use micromegas_views_client::{Job, JobContext, JobOutcome, JobWorker, JobWorkerConfig};
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dsn = std::env::var("MMV_DSN").unwrap_or_default();
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "example-worker".into());
    let mut config = JobWorkerConfig::new(dsn, name.clone());
    config.poll_interval = Duration::from_secs(2);
    config.heartbeat_interval = Duration::from_millis(500);
    let worker = JobWorker::new(config);
    let handler = |job: Job, mut context: JobContext| async move {
        let sleep_ms = job.params["sleep_ms"].as_u64().unwrap_or(200);
        println!(
            "{}: {} of {} (attempt {})",
            job.job_id, job.kind, job.view_set_name, job.attempts
        );
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
            _ = context.cancelled() => {
                println!("{}: cancelled", job.job_id);
                return JobOutcome::failed("materialize", "cancelled while running", false);
            }
        }
        if job.params["fail"].as_bool().unwrap_or(false) {
            return JobOutcome::failed("materialize", "asked to fail", true);
        }
        JobOutcome::done()
    };
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    println!("{name}: waiting for jobs");
    if let Err(e) = worker.run(handler, shutdown).await {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}
