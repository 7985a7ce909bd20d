//! Runs work on a helper thread with a large stack and turns a panic into an
//! error, so hostile input can neither overflow the caller's stack nor unwind
//! into it. The closure must not touch anything thread-bound (Postgres).
//!
//! Every job carries a [`Budget`]: a deadline and a cancel flag. The work
//! calls [`checkpoint`] between phases and inside the loops that can grow
//! with the input; past the deadline, or once the caller has given up on the
//! job (it was interrupted and dropped its [`Pending`]), the checkpoint
//! returns an error and the job ends. The caller never blocks on the helper
//! without a way out: [`Pending::wait`] returns after a tick so that the
//! caller can service its own interrupts in between, and returns the
//! time-limit error itself once the deadline has passed: a stretch of work
//! that reaches no checkpoint (one long DataFusion pass over a very wide
//! query) cannot keep the caller past its limit; the abandoned job ends at
//! its next checkpoint — which DataFusion's work on very wide nested
//! queries (its column look-ups are linear, so `SELECT *` over thousands of
//! columns, nested, is quadratic per level) can put far off: at most
//! [`MAX_HELPERS`] such jobs run per backend, and a job that could not start
//! before its deadline says so. A job whose caller gave up runs the rest of
//! its work at the lowest CPU priority (nice 19, Linux): what no checkpoint
//! and no estimate bounded takes only CPU time nothing else wants. Its
//! helper then takes no new job (a thread cannot raise its priority back)
//! and exits once replaced.
//!
//! One helper is kept per process (per backend), so its stack pages stay
//! mapped and no call pays for a thread start. When a job is submitted while
//! the helper is still finishing an abandoned one, a fresh helper takes the
//! new job and the old one exits once its job ends (at most
//! [`MAX_HELPERS`] at once; past that the job waits its turn).

use crate::error::{Error, ErrorKind, Result};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
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

/// Stack of the helper thread. Only touched pages are committed.
pub const STACK_BYTES: usize = 256 * 1024 * 1024;
/// Helpers alive at once, counting those finishing an abandoned job.
pub const MAX_HELPERS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

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
    /// Whether a helper has begun the job (it may wait behind helpers
    /// still finishing abandoned jobs).
    started: Arc<AtomicBool>,
    /// The helper running the job, and what the caller may do to it.
    runner: Arc<Runner>,
}

/// The helper thread a job runs on, as its caller sees it.
#[derive(Debug, Default)]
struct Runner {
    /// The thread's id (Linux), once the job started; 0 before.
    tid: std::sync::atomic::AtomicI32,
    /// Set by a caller that gave up: the helper runs at the lowest priority
    /// and takes no new job.
    retired: Arc<AtomicBool>,
}

impl Runner {
    /// Lowers the running job's thread to the lowest CPU priority and
    /// retires its helper.
    fn demote(&self) {
        self.retired.store(true, Ordering::SeqCst);
        let tid = self.tid.load(Ordering::SeqCst);
        if tid != 0 {
            lowest_priority(tid);
        }
    }
}

#[cfg(target_os = "linux")]
fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

#[cfg(not(target_os = "linux"))]
fn current_tid() -> i32 {
    0
}

/// Nice 19 for one thread: on Linux `setpriority(PRIO_PROCESS, tid)` sets a
/// single thread's priority; any process may lower its own threads'.
#[cfg(target_os = "linux")]
fn lowest_priority(tid: i32) {
    // SAFETY: plain system call on an id of this process's own thread; a
    // failure (thread gone) changes nothing.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
}

#[cfg(not(target_os = "linux"))]
fn lowest_priority(_tid: i32) {}

impl Budget {
    /// No deadline (tests, fuzzing); still cancellable.
    pub fn unlimited() -> Self {
        Budget {
            deadline: None,
            timeout: None,
            cancelled: Arc::new(AtomicBool::new(false)),
            max_plan_nodes: DEFAULT_MAX_PLAN_NODES,
            phase: Arc::new(Mutex::new(String::from("validation"))),
            started: Arc::new(AtomicBool::new(false)),
            runner: Arc::new(Runner::default()),
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
        if !self.started.load(Ordering::SeqCst) {
            return Some(could_not_start(timeout));
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

/// A job that found every helper of the process busy with abandoned work.
fn could_not_start(timeout: Duration) -> Error {
    Error::new(
        ErrorKind::TimeLimit,
        format!(
            "validation could not start within the validation time limit of {} ms",
            timeout.as_millis()
        ),
    )
    .with_detail(format!(
        "This session's {MAX_HELPERS} planning threads are all still finishing validations that ran out of time earlier; they stop at their next checkpoint."
    ))
    .with_hint("Retry once they have finished, or from another session.")
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
    budget.started.store(true, Ordering::SeqCst);
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

/// How a helper thread is started. The host (the pgrx shell) may wrap the
/// spawn, e.g. to block its signals so that the new thread inherits a mask
/// that leaves every signal to the host's own thread.
pub type SpawnGuard = fn(&mut dyn FnMut());

static SPAWN_GUARD: OnceLock<SpawnGuard> = OnceLock::new();

/// Installs the spawn wrapper; the first call wins.
pub fn set_spawn_guard(guard: SpawnGuard) {
    let _ = SPAWN_GUARD.set(guard);
}

struct Helper {
    sender: Sender<Job>,
    /// Jobs handed to this helper and not ended yet (queued or running).
    busy: Arc<AtomicUsize>,
    /// Set when a caller gave up on one of its jobs: it runs at the lowest
    /// priority from then on, so it takes no new job.
    retired: Arc<AtomicBool>,
}

static ALIVE: AtomicUsize = AtomicUsize::new(0);

fn spawn_helper() -> Result<Helper> {
    let (sender, receiver) = channel::<Job>();
    let busy = Arc::new(AtomicUsize::new(0));
    let mut receiver = Some(receiver);
    let mut spawned = Err(Error::internal("the planning thread was not started"));
    let mut start = || {
        let Some(receiver) = receiver.take() else {
            return;
        };
        ALIVE.fetch_add(1, Ordering::SeqCst);
        spawned = std::thread::Builder::new()
            .name("micromegas-views-planner".into())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                // Each job takes itself off its helper's `busy` count, before it replies.
                for job in receiver {
                    job();
                }
                ALIVE.fetch_sub(1, Ordering::SeqCst);
            })
            .map(|_| ())
            .map_err(|e| {
                ALIVE.fetch_sub(1, Ordering::SeqCst);
                Error::internal(format!("cannot start the planning thread: {e}"))
            });
    };
    match SPAWN_GUARD.get() {
        Some(guard) => guard(&mut start),
        None => start(),
    }
    spawned?;
    Ok(Helper {
        sender,
        busy,
        retired: Arc::new(AtomicBool::new(false)),
    })
}

/// The helper for a new job, or `None` when a job with a deadline cannot
/// have one: the current helper is retired and still busy with abandoned
/// work, and [`MAX_HELPERS`] are alive. A job must never start on a retired
/// helper (it would run at the lowest priority); one without a deadline
/// (tests, fuzzing; every validation of the extension, a re-check too, has
/// one) gets a fresh helper even past the cap.
fn helper_for_new_job(
    bounded: bool,
) -> Result<Option<(Sender<Job>, Arc<AtomicUsize>, Arc<AtomicBool>)>> {
    static HELPER: OnceLock<Mutex<Option<Helper>>> = OnceLock::new();
    let slot = HELPER.get_or_init(|| Mutex::new(None));
    let mut guard = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let replace = match guard.as_ref() {
        None => true,
        Some(h) => {
            let busy = h.busy.load(Ordering::SeqCst) > 0;
            let retired = h.retired.load(Ordering::SeqCst);
            let room = ALIVE.load(Ordering::SeqCst) < MAX_HELPERS;
            match (retired, busy) {
                // Idle and retired: it exits as soon as it is replaced.
                (true, false) => true,
                (true, true) if !room && bounded => return Ok(None),
                (true, true) => true,
                // Busy (only when several threads of one process submit):
                // a new helper while there is room, else the job waits.
                (false, busy) => busy && room,
            }
        }
    };
    if replace {
        // Dropping the old sender lets a busy helper exit after its job.
        *guard = Some(spawn_helper()?);
    }
    let helper = guard.as_ref().expect("a helper");
    helper.busy.fetch_add(1, Ordering::SeqCst);
    Ok(Some((
        helper.sender.clone(),
        Arc::clone(&helper.busy),
        Arc::clone(&helper.retired),
    )))
}

/// The text a panic carried (`&str` or `String`), for an error message.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// A job handed to a helper. Dropping it before its answer arrived cancels
/// the job: its next [`checkpoint`] ends it.
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
            self.budget.runner.demote();
        }
    }
}

/// Hands `f` to a helper thread under `budget` and returns at once.
pub fn submit<T, F>(budget: Budget, f: F) -> Result<Pending<T>>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let (reply, answer) = channel::<Result<T>>();
    let Some((sender, busy, retired)) = helper_for_new_job(budget.deadline.is_some())? else {
        return Err(could_not_start(budget.timeout.unwrap_or_default()));
    };
    let mut budget = budget;
    budget.runner = Arc::new(Runner {
        tid: Default::default(),
        retired,
    });
    let waiter = budget.clone();
    let done = Arc::clone(&busy);
    let job: Job = Box::new(move || {
        budget.runner.tid.store(current_tid(), Ordering::SeqCst);
        budget.started.store(true, Ordering::SeqCst);
        BUDGET.with(|b| *b.borrow_mut() = Some(budget));
        let result = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(result) => result,
            Err(panic) => Err(
                Error::internal("internal error while validating the definition")
                    .with_detail(panic_message(panic.as_ref())),
            ),
        };
        BUDGET.with(|b| *b.borrow_mut() = None);
        // Free before the caller can see the answer and submit again: a
        // caller must never find its helper busy with a job it already has
        // the answer of (it would start a needless new helper).
        done.fetch_sub(1, Ordering::SeqCst);
        let _ = reply.send(result);
    });
    if sender.send(job).is_err() {
        busy.fetch_sub(1, Ordering::SeqCst);
        return Err(Error::internal("the planning thread is gone"));
    }
    Ok(Pending {
        answer,
        budget: waiter,
        done: false,
    })
}

/// Runs `f` on a helper thread and waits for its result, without a deadline.
pub fn run<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    run_with(Budget::unlimited(), f)
}

/// Runs `f` on a helper thread under `budget` and waits for its result.
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

/// Serializes the tests that leave helpers stuck or abandoned: the helpers
/// are per process, so one such test could otherwise fill every helper
/// another one expects to find free (its job then "could not start").
#[cfg(test)]
pub(crate) fn exclusive_pool() -> std::sync::MutexGuard<'static, ()> {
    static POOL: Mutex<()> = Mutex::new(());
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
