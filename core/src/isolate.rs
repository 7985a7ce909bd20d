//! Runs work on a helper thread with a large stack and turns a panic into an
//! error, so hostile input can neither overflow the caller's stack nor unwind
//! into it. The closure must not touch anything thread-bound (Postgres).
//!
//! The helper is started on first use and kept for the life of the process
//! (one per backend): its stack pages stay mapped between calls, and no call
//! pays for a thread start.

use crate::error::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

/// Stack of the helper thread. Only touched pages are committed.
pub const STACK_BYTES: usize = 256 * 1024 * 1024;

type Job = Box<dyn FnOnce() + Send>;

fn worker() -> Result<Sender<Job>> {
    static WORKER: OnceLock<Mutex<Option<Sender<Job>>>> = OnceLock::new();
    let slot = WORKER.get_or_init(|| Mutex::new(None));
    let mut guard = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(sender) = guard.as_ref() {
        return Ok(sender.clone());
    }
    let (sender, receiver) = channel::<Job>();
    std::thread::Builder::new()
        .name("micromegas-views-planner".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            for job in receiver {
                job();
            }
        })
        .map_err(|e| Error::internal(format!("cannot start the planning thread: {e}")))?;
    *guard = Some(sender.clone());
    Ok(sender)
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Runs `f` on the helper thread and waits for its result.
pub fn run<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let (reply, answer) = channel::<Result<T>>();
    let job: Job = Box::new(move || {
        let result = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(result) => result,
            Err(panic) => Err(
                Error::internal("internal error while validating the definition")
                    .with_detail(panic_message(panic.as_ref())),
            ),
        };
        let _ = reply.send(result);
    });
    worker()?
        .send(job)
        .map_err(|_| Error::internal("the planning thread is gone"))?;
    answer
        .recv()
        .map_err(|_| Error::internal("the planning thread is gone"))?
}
