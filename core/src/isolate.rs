//! The budget of one piece of work on caller text, and a thread to run it
//! on. The work must not touch anything thread-bound (Postgres).
//!
//! Every job carries a [`Budget`]: a deadline, a plan-node limit and a
//! cancel flag. The work calls [`checkpoint`] between phases and inside the
//! loops that can grow with the input; past the deadline, or once the caller
//! has given up on the job, the checkpoint returns an error and the job
//! ends, its message naming the phase [`set_phase`] last named.
//!
//! The extension runs its work in a helper process (`sandbox`), which
//! enters a budget on its serving thread ([`enter`]) and publishes the
//! phase in a page its caller reads ([`PhasePage`]); the caller stops the
//! process itself past the deadline. Tests, examples and other hosts run
//! work on a thread of its own instead ([`run`], [`run_with`], [`submit`]):
//! a large stack, a panic turned into an error, and a caller that is
//! answered at the deadline whether or not the work reached a checkpoint
//! (the work then ends at its next one).

use crate::error::{Error, ErrorKind, Result};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Logical plan nodes a query may plan to, counted as a tree (a CTE is
/// counted once per reference), before the analyzer runs. The default of the
/// superuser-only `micromegas_views.max_plan_nodes`.
pub const DEFAULT_MAX_PLAN_NODES: usize = 10_000;
/// The highest value `micromegas_views.max_plan_nodes` accepts.
pub const MAX_MAX_PLAN_NODES: usize = 250_000;

/// The longest `micromegas_views.validation_timeout` accepts, and the
/// limit of the extension's own re-checks of dependents.
pub const MAX_VALIDATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Stack of the thread work runs on. Only touched pages are committed.
pub const STACK_BYTES: usize = 256 * 1024 * 1024;

/// Limits on one job: a deadline and a flag the caller sets when it gives up.
#[derive(Debug, Clone)]
pub struct Budget {
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    cancelled: Arc<AtomicBool>,
    max_plan_nodes: usize,
    /// What the job is doing (set by [`set_phase`]), shared with the caller
    /// so that its own time-limit error names the same phase.
    phase: Arc<Mutex<String>>,
}

impl Budget {
    /// No deadline (tests, fuzzing); still cancellable.
    pub fn unlimited() -> Self {
        Budget {
            deadline: None,
            timeout: None,
            cancelled: Arc::new(AtomicBool::new(false)),
            max_plan_nodes: DEFAULT_MAX_PLAN_NODES,
            phase: Arc::new(Mutex::new(String::from("validation"))),
        }
    }

    /// A deadline `timeout` from now.
    pub fn with_timeout(timeout: Duration) -> Self {
        Budget {
            deadline: Some(Instant::now() + timeout),
            timeout: Some(timeout),
            ..Budget::unlimited()
        }
    }

    /// The plan-node limit of the job (clamped to
    /// [`MAX_MAX_PLAN_NODES`]).
    pub fn with_max_plan_nodes(mut self, limit: usize) -> Self {
        self.max_plan_nodes = limit.clamp(1, MAX_MAX_PLAN_NODES);
        self
    }

    fn check(&self) -> Result<()> {
        if self.cancelled.load(Ordering::Relaxed) {
            return Err(Error::new(
                ErrorKind::Cancelled,
                "validation cancelled: the caller stopped waiting",
            ));
        }
        match self.expired() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The time-limit error, once the deadline has passed.
    fn expired(&self) -> Option<Error> {
        let (deadline, timeout) = (self.deadline?, self.timeout?);
        if Instant::now() < deadline {
            return None;
        }
        let phase = self
            .phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        Some(time_limit_error(&phase, timeout))
    }

    /// How long until the deadline (none: no deadline).
    fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// `phase` ran out of `timeout`. The hint suggests a longer limit only
/// when there is one to give: not at the maximum, where a re-check of a
/// dependent always runs.
pub fn time_limit_error(phase: &str, timeout: Duration) -> Error {
    let error = Error::new(
        ErrorKind::TimeLimit,
        format!(
            "{phase} exceeded the validation time limit of {} ms",
            timeout.as_millis()
        ),
    );
    if timeout >= MAX_VALIDATION_TIMEOUT {
        error
            .with_detail(format!(
                "Validation stops after {} ms, the longest it may take (a re-check of a dependent always runs under it).",
                timeout.as_millis()
            ))
            .with_hint("Simplify the query.")
    } else {
        error
            .with_detail(format!(
                "Validation stops after micromegas_views.validation_timeout ({} ms).",
                timeout.as_millis()
            ))
            .with_hint("Simplify the query, or raise micromegas_views.validation_timeout for this session (at most 60s).")
    }
}

thread_local! {
    static BUDGET: RefCell<Option<Budget>> = const { RefCell::new(None) };
}

/// Ends the current job with an error once its deadline has passed or its
/// caller has given up. Free outside a job.
pub fn checkpoint() -> Result<()> {
    BUDGET.with(|b| match b.borrow().as_ref() {
        Some(budget) => budget.check(),
        None => Ok(()),
    })
}

/// The current job's plan-node limit.
pub fn max_plan_nodes() -> usize {
    BUDGET.with(|b| {
        b.borrow()
            .as_ref()
            .map_or(DEFAULT_MAX_PLAN_NODES, |b| b.max_plan_nodes)
    })
}

/// Names what the current job is doing, for the time-limit message
/// (e.g. `extract_query`); in a helper process, also in the page its caller
/// reads when it has to stop the helper itself.
pub fn set_phase(phase: &str) {
    let page = SHARED_PHASE_PAGE.load(Ordering::Relaxed);
    if !page.is_null() {
        PhasePage(page).write(phase);
    }
    BUDGET.with(|b| {
        if let Some(budget) = b.borrow().as_ref() {
            let mut p = budget
                .phase
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            p.clear();
            p.push_str(phase);
        }
    });
}

/// Runs the current thread's work under `budget` until the guard drops
/// (the requests of a helper process: see the `sandbox` module).
pub fn enter(budget: Budget) -> Entered {
    BUDGET.with(|b| *b.borrow_mut() = Some(budget));
    Entered(())
}

/// Ends the budget [`enter`] began.
pub struct Entered(());

impl Drop for Entered {
    fn drop(&mut self) {
        BUDGET.with(|b| *b.borrow_mut() = None);
    }
}

/// A page of memory shared between a helper process and its caller, where
/// the helper writes the phase it is in (a length, then UTF-8).
#[derive(Debug, Clone, Copy)]
pub struct PhasePage(*mut u8);

// SAFETY: the page is plain shared memory; readers tolerate a torn phase
// name (it only names the phase in a message).
unsafe impl Send for PhasePage {}

const PHASE_PAGE_BYTES: usize = 4096;

impl PhasePage {
    /// Maps a fresh shared page (it stays shared across `fork`).
    pub fn map() -> Option<PhasePage> {
        // SAFETY: an anonymous shared mapping of one page.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PHASE_PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(PhasePage(p.cast()))
    }

    pub fn unmap(self) {
        // SAFETY: the page this value mapped; no copy is used after.
        unsafe { libc::munmap(self.0.cast(), PHASE_PAGE_BYTES) };
    }

    pub fn write(&self, phase: &str) {
        let bytes = &phase.as_bytes()[..phase.len().min(PHASE_PAGE_BYTES - 2)];
        // SAFETY: within the mapped page.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.0.add(2), bytes.len());
            std::ptr::write_volatile(self.0.cast::<u16>(), bytes.len() as u16);
        }
    }

    pub fn clear(&self) {
        // SAFETY: within the mapped page.
        unsafe { std::ptr::write_volatile(self.0.cast::<u16>(), 0) };
    }

    pub fn read(&self) -> String {
        // SAFETY: within the mapped page; the length is clamped.
        unsafe {
            let len = (std::ptr::read_volatile(self.0.cast::<u16>()) as usize).min(PHASE_PAGE_BYTES - 2);
            String::from_utf8_lossy(std::slice::from_raw_parts(self.0.add(2), len)).into_owned()
        }
    }
}

/// Makes `set_phase` publish in `page` (in a helper process, which maps
/// one page for its life).
pub fn set_phase_page(page: PhasePage) {
    SHARED_PHASE_PAGE.store(page.0, Ordering::SeqCst);
}

/// Empties the published phase between two requests.
pub fn clear_phase_page() {
    let p = SHARED_PHASE_PAGE.load(Ordering::SeqCst);
    if !p.is_null() {
        PhasePage(p).clear();
    }
}

static SHARED_PHASE_PAGE: std::sync::atomic::AtomicPtr<u8> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The text a panic carried (`&str` or `String`), for an error message.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// A job on its thread. Dropping it before its answer arrived cancels the
/// job: its next [`checkpoint`] ends it.
pub struct Pending<T> {
    answer: Receiver<Result<T>>,
    budget: Budget,
    done: bool,
}

impl<T> Pending<T> {
    /// Waits up to `tick` for the answer (less when the deadline comes
    /// first). Past the deadline it answers the time-limit error itself,
    /// whether or not the job reached a checkpoint; dropping `self` then
    /// cancels the job.
    pub fn wait(&mut self, tick: Duration) -> Option<Result<T>> {
        let tick = self.budget.remaining().map_or(tick, |r| r.min(tick));
        match self.answer.recv_timeout(tick) {
            Ok(result) => {
                self.done = true;
                Some(result)
            }
            Err(RecvTimeoutError::Timeout) => self.budget.expired().map(Err),
            Err(RecvTimeoutError::Disconnected) => {
                self.done = true;
                Some(Err(Error::internal("the planning thread is gone")))
            }
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if !self.done {
            self.budget.cancelled.store(true, Ordering::SeqCst);
        }
    }
}

/// Starts `f` on a thread of its own under `budget` and returns at once.
pub fn submit<T, F>(budget: Budget, f: F) -> Result<Pending<T>>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let (reply, answer) = channel::<Result<T>>();
    let waiter = budget.clone();
    std::thread::Builder::new()
        .name("micromegas-views-planner".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let _job = enter(budget);
            let result = match catch_unwind(AssertUnwindSafe(f)) {
                Ok(result) => result,
                Err(panic) => Err(
                    Error::internal("internal error while validating the definition")
                        .with_detail(panic_message(panic.as_ref())),
                ),
            };
            let _ = reply.send(result);
        })
        .map_err(|e| Error::internal(format!("cannot start the planning thread: {e}")))?;
    Ok(Pending {
        answer,
        budget: waiter,
        done: false,
    })
}

/// Runs `f` on a thread of its own and waits for its result, without a deadline.
pub fn run<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    run_with(Budget::unlimited(), f)
}

/// Runs `f` on a thread of its own under `budget` and waits for its result.
pub fn run_with<T, F>(budget: Budget, f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let mut pending = submit(budget, f)?;
    loop {
        if let Some(result) = pending.wait(Duration::from_secs(3600)) {
            return result;
        }
    }
}
