//! Running core work on a planning thread, interruptibly.
//!
//! The helper threads never call Postgres. A helper is created with every
//! asynchronous signal blocked (the mask is set around `pthread_create`
//! only, and the new thread inherits it), so Postgres' handlers — statement
//! timeout, cancel, terminate, shutdown — always run on the backend's own
//! thread. While the backend waits for an answer it wakes every few
//! milliseconds to service interrupts: a pending cancel or timeout raises its
//! ERROR (or FATAL) right there, the unwinding drops the pending job, and the
//! job stops at its next checkpoint (see `micromegas_views_core::isolate`).

use super::settings;
use micromegas_views_core::isolate::{self, Budget};
use micromegas_views_core::Result;
use std::time::Duration;

/// How long the backend waits for the helper between two interrupt checks.
const TICK: Duration = Duration::from_millis(5);

/// Blocks every asynchronous signal around `start` (a thread spawn) and
/// restores the mask right after.
fn with_signals_blocked(start: &mut dyn FnMut()) {
    // SAFETY: plain libc calls on stack-allocated sigset_t values.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        // Faults stay deliverable: they are synchronous and never Postgres'.
        for fault in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
        ] {
            libc::sigdelset(&mut all, fault);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
        start();
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
    }
}

/// Runs `f` on a planning thread under this session's limits
/// (`micromegas_views.validation_timeout`, `micromegas_views.max_plan_nodes`),
/// servicing interrupts while it waits.
pub fn run_isolated<T: Send + 'static, F: FnOnce() -> Result<T> + Send + 'static>(
    f: F,
) -> Result<T> {
    isolate::set_spawn_guard(with_signals_blocked);
    let budget = Budget::with_timeout(settings::validation_timeout())
        .with_max_plan_nodes(settings::max_plan_nodes());
    let mut pending = isolate::submit(budget, f)?;
    loop {
        if let Some(result) = pending.wait(TICK) {
            return result;
        }
        // Raises the pending cancel/timeout/terminate, if any; the unwind
        // drops `pending`, which cancels the job.
        pgrx::check_for_interrupts!();
    }
}
