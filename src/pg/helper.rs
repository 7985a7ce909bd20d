//! Running core work on caller text in the backend's helper process.
//!
//! Every Rust step that reads caller text or bytes (a definition, a deny
//! rule, a query to fingerprint, a schema) runs in a helper process forked
//! from the backend (`micromegas_views_core::sandbox`), under this session's
//! limits: `micromegas_views.validation_timeout` (capped for a caller that is
//! not an admin, `settings::validation_timeout`),
//! `micromegas_views.validation_memory` and `micromegas_views.max_plan_nodes`.
//! While it waits, the backend wakes every few milliseconds to service its
//! interrupts: a pending cancel, `statement_timeout` or terminate raises its
//! error right there, and the unwinding kills and reaps the helper before the
//! error reaches Postgres, so the work ends with its statement and its memory
//! is given back. The helper is not the postmaster's child: however it ends,
//! the cluster never restarts.

use super::settings;
use micromegas_views_core::sandbox::{self, Limits};
use pgrx::pg_sys;
use micromegas_views_core::Result;
use serde::{de::DeserializeOwned, Serialize};

/// Stops and reaps the helper when the backend exits, whatever ends it
/// (a disconnect, a terminate, a FATAL error, a parallel worker's end): a
/// helper left behind would be adopted by the init process, which in a
/// container is often the postmaster, and the postmaster takes the exit of
/// a child it does not know for a crash and restarts the cluster.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn stop_helper(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    sandbox::shutdown();
}

/// Called once from `_PG_init`.
pub fn register() {
    // SAFETY: registers an exit callback with the backend, on its own thread.
    unsafe { pg_sys::on_proc_exit(Some(stop_helper), pg_sys::Datum::from(0)) };
}

/// Runs `f(arg)` in the helper process under this session's limits.
pub fn run_isolated<A, R>(arg: A, f: fn(A) -> Result<R>) -> Result<R>
where
    A: Serialize + DeserializeOwned,
    R: Serialize + DeserializeOwned,
{
    let (timeout, held_to_default) = settings::validation_timeout();
    let limits = Limits {
        timeout,
        memory_bytes: settings::validation_memory_bytes(),
        max_plan_nodes: settings::max_plan_nodes(),
    };
    sandbox::call(limits, arg, f, &mut || {
        // Raises the pending cancel/timeout/terminate, if any; the unwind
        // drops the call in flight, which kills the helper.
        pgrx::check_for_interrupts!();
    })
    .map_err(|e| {
        if held_to_default {
            settings::explain_time_limit(e)
        } else {
            e
        }
    })
}
