//! Planning runs on a helper thread (big stack, panics caught, see
//! `micromegas_views_core::isolate`). The helper never calls Postgres. All
//! asynchronous signals are blocked around each call, and the helper is
//! started inside such a call, so it inherits a mask that keeps Postgres'
//! signal handlers on the backend's own thread.

use micromegas_views_core::{isolate, Result};

pub fn run_isolated<T: Send + 'static, F: FnOnce() -> Result<T> + Send + 'static>(
    f: F,
) -> Result<T> {
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
        let result = isolate::run(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        result
    }
}
