//! Planning runs on a helper thread (big stack, panics caught, see
//! `micromegas_views_core::isolate`). The helper never calls Postgres; all
//! signals are blocked while it runs so that Postgres' signal handlers only
//! ever run on the backend's own thread (the helper inherits the mask).

use micromegas_views_core::{isolate, Result};

pub fn run_isolated<T: Send, F: FnOnce() -> Result<T> + Send>(f: F) -> Result<T> {
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
