//! Runs work on a helper thread with a large stack and turns a panic into an
//! error, so hostile input can neither overflow the caller's stack nor unwind
//! into it. The closure must not touch anything thread-bound (Postgres).

use crate::error::{Error, Result};

/// Stack of the helper thread. Only touched pages are committed.
pub const STACK_BYTES: usize = 256 * 1024 * 1024;

pub fn run<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send,
    T: Send,
{
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("micromegas-views-planner".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, f)
            .map_err(|e| Error::internal(format!("cannot start the planning thread: {e}")))?;
        match handle.join() {
            Ok(result) => result,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string());
                Err(
                    Error::internal("internal error while validating the definition")
                        .with_detail(what),
                )
            }
        }
    })
}
