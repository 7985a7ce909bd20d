//! Runs work on caller text in a helper process that can be stopped.
//!
//! A thread cannot be stopped between two checkpoints, and DataFusion has
//! long passes with none (expanding wildcards over thousands of chained
//! CTEs, for example): an abandoned planning thread goes on allocating until
//! it ends, and an allocation that fails aborts the whole process — in
//! Postgres, the postmaster then restarts every session. So the extension
//! runs every function that reads caller text or bytes in a **helper
//! process**: one per backend, forked from it on first use and kept for the
//! next calls. A call is a plain function (`fn(A) -> Result<R>`) and its
//! argument, sent over a pipe as CBOR with the function's address (the
//! helper is a fork of the same process, so the address is the same
//! function there); the answer comes back as JSON.
//!
//! Limits, each enforced outside the work itself:
//! - **Time.** The caller waits in ticks, servicing its own interrupts
//!   (cancel, `statement_timeout`, terminate) between them; at the deadline,
//!   or when an interrupt unwinds the caller, the helper is killed
//!   (`SIGKILL`) and reaped before the caller goes on, so the work and
//!   everything it allocated are gone with the statement. The next call
//!   forks a new helper.
//! - **Memory.** [`BudgetAllocator`], the process's global allocator, counts
//!   what a call allocates net of what it frees; past the call's budget the
//!   helper exits at once with [`EXIT_MEMORY`], and the caller answers the
//!   memory-limit error. The kernel caps the helper too (`RLIMIT_AS`: its
//!   address space at the start of the call plus the budget and a margin),
//!   for anything the counter does not see.
//! - **Isolation.** The helper is not a child of the postmaster: its death,
//!   whatever the cause, never restarts the cluster. Its host stops and
//!   reaps it when the host exits ([`shutdown`], from Postgres'
//!   `on_proc_exit`; `PR_SET_PDEATHSIG` is the backstop), so it is never
//!   left to the init process. It touches no shared memory (it runs only
//!   this crate's pure code), leaves Postgres' signal handlers behind
//!   (signals are held across the fork and every disposition reset; it dies
//!   with the backend's process group on terminate or shutdown and ignores
//!   a cancel, which the backend handles by killing it), keeps no file
//!   descriptor of the backend but its two pipes and standard streams, is
//!   the kernel's first choice when memory runs out, and exits with
//!   `_exit`, running no exit handler of the backend. What it does keep is
//!   the backend's memory as it was at the fork (copy-on-write pages, and
//!   the shared segments the backend had mapped), for as long as it lives.
//!
//! Inside the helper the work runs on a thread with a large stack
//! ([`crate::isolate::STACK_BYTES`]) under a [`crate::isolate`] budget, so
//! the checkpoints still end it with a message naming its phase; the phase
//! is also published in a page shared with the caller, which names it when
//! it has to kill the helper instead.

use crate::error::{Error, ErrorKind, Result};
use crate::isolate::{self, Budget};
use serde::{de::DeserializeOwned, Serialize};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, AtomicIsize, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Default memory budget of one call (`micromegas_views.validation_memory`).
pub const DEFAULT_MEMORY_BYTES: usize = 256 << 20;
/// Smallest budget the setting accepts.
pub const MIN_MEMORY_BYTES: usize = 16 << 20;
/// Largest budget the setting accepts.
pub const MAX_MEMORY_BYTES: usize = 16 << 30;

/// Exit status of a helper whose call went past its memory budget (the
/// status of every process ended for its memory: [`crate::meter`]).
pub use crate::meter::EXIT_MEMORY;
/// Exit status of a helper that could not set itself up.
const EXIT_BROKEN: i32 = 87;

/// Address space granted above the budget: what the allocator's own
/// bookkeeping and a call's first pages need besides the counted bytes.
const ADDRESS_SPACE_MARGIN: usize = 128 << 20;
/// How long the caller waits between two interrupt checks.
const TICK: Duration = Duration::from_millis(5);
/// A helper that allocated more than this in one call gives the free memory
/// back to the kernel after it (`malloc_trim`).
const TRIM_ABOVE: isize = 16 << 20;

/// The limits of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout: Duration,
    pub memory_bytes: usize,
    pub max_plan_nodes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(5),
            memory_bytes: DEFAULT_MEMORY_BYTES,
            max_plan_nodes: isolate::DEFAULT_MAX_PLAN_NODES,
        }
    }
}

/// The memory-limit error of a call with budget `bytes`.
pub fn memory_limit_error(bytes: usize) -> Error {
    Error::new(
        ErrorKind::MemoryLimit,
        format!(
            "validation exceeded its memory limit of {} MB",
            bytes >> 20
        ),
    )
    .with_detail(format!(
        "Validation runs in a helper process that is stopped once what it allocates passes micromegas_views.validation_memory ({} MB).",
        bytes >> 20
    ))
    .with_hint("Simplify the input; a superuser may raise micromegas_views.validation_memory.")
}

// ---------------------------------------------------------------------------
// The allocator

/// The global allocator of a process that runs helpers: the system's, with
/// a counter that is live only inside a helper's call (one relaxed load per
/// allocation elsewhere).
pub struct BudgetAllocator;

/// The budget of the call in progress in this process; 0: not counting.
static LIMIT: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated minus bytes freed since the call began (frees of what
/// was allocated before it make it negative).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The highest `LIVE` of the call.
static PEAK: AtomicIsize = AtomicIsize::new(0);

#[inline]
fn grow(bytes: usize) {
    let limit = LIMIT.load(Ordering::Relaxed);
    if limit == 0 {
        return;
    }
    let live = LIVE.fetch_add(bytes as isize, Ordering::Relaxed) + bytes as isize;
    if live > limit as isize {
        over_budget();
    }
    if live > PEAK.load(Ordering::Relaxed) {
        PEAK.store(live, Ordering::Relaxed);
    }
}

#[inline]
fn shrink(bytes: usize) {
    if LIMIT.load(Ordering::Relaxed) != 0 {
        LIVE.fetch_sub(bytes as isize, Ordering::Relaxed);
    }
}

/// A helper past its budget (or refused memory by the kernel) ends at once:
/// nothing unwinds, nothing is printed, and the caller reads the status.
#[cold]
fn over_budget() -> ! {
    // SAFETY: ends this process (a helper); runs no handler of any kind.
    unsafe { libc::_exit(EXIT_MEMORY) }
}

#[inline]
fn checked(ptr: *mut u8) -> *mut u8 {
    if ptr.is_null() && LIMIT.load(Ordering::Relaxed) != 0 {
        over_budget();
    }
    ptr
}

// SAFETY: every method forwards to `System` with the same arguments; the
// counting touches only atomics.
unsafe impl GlobalAlloc for BudgetAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        checked(System.alloc(layout))
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        checked(System.alloc_zeroed(layout))
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        shrink(layout.size());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old {
            grow(new_size - old);
        }
        let moved = checked(System.realloc(ptr, layout, new_size));
        if new_size < old {
            shrink(old - new_size);
        }
        moved
    }
}

// ---------------------------------------------------------------------------
// The caller's side

/// The helper of this thread (a backend has one thread). Dropping it kills
/// it (if it still runs) and reaps it, so no path — an error, an unwinding
/// interrupt, the backend's exit — leaves a helper running or a zombie.
struct Helper {
    pid: libc::pid_t,
    /// Requests go here (non-blocking).
    to_helper: libc::c_int,
    /// Answers come from here (non-blocking).
    from_helper: libc::c_int,
    /// The page the helper publishes its phase in.
    phase: isolate::PhasePage,
    /// How it ended, once reaped.
    ended: Option<Ended>,
}

impl Helper {
    /// Whether an idle helper is still there to take a call; one that died
    /// meanwhile (the out-of-memory killer, an operator) is reaped here.
    fn alive(&mut self) -> bool {
        if self.ended.is_some() {
            return false;
        }
        let mut status = 0;
        // SAFETY: asks about our own child without waiting.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r == 0 {
            return true;
        }
        self.ended = Some(if r == self.pid { Ended::from_status(status) } else { Ended::Unknown });
        false
    }

    /// Kills the helper (a no-op on one that already ended) and reaps it:
    /// how it ended.
    fn stop(&mut self) -> Ended {
        if let Some(ended) = self.ended {
            return ended;
        }
        // SAFETY: signals and reaps our own child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let ended = reap(self.pid);
        self.ended = Some(ended);
        ended
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stop();
        // SAFETY: closes our own fds and unmaps our own page, once.
        unsafe {
            libc::close(self.to_helper);
            libc::close(self.from_helper);
        }
        self.phase.unmap();
    }
}

/// How a helper ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    Signaled(i32),
    /// Not ours to reap any more (SIGCHLD ignored by the host).
    Unknown,
}

impl Ended {
    fn from_status(status: libc::c_int) -> Ended {
        if libc::WIFEXITED(status) {
            Ended::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            Ended::Signaled(libc::WTERMSIG(status))
        } else {
            Ended::Unknown
        }
    }
}

fn reap(pid: libc::pid_t) -> Ended {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child (killed just before).
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ended::from_status(status);
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return Ended::Unknown;
    }
}

thread_local! {
    static HELPER: RefCell<Option<Helper>> = const { RefCell::new(None) };
    static LAST_PEAK: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

/// What the last answered call allocated at most, net (for tests and
/// benchmarks).
pub fn last_call_peak_bytes() -> isize {
    LAST_PEAK.get()
}

/// The process id of this thread's helper, if one runs (for tests).
pub fn helper_pid() -> Option<i32> {
    HELPER.with_borrow(|h| h.as_ref().map(|h| h.pid))
}

/// Stops and reaps this thread's helper. The host calls it when its process
/// exits (Postgres' `on_proc_exit`), so a helper never outlives its backend:
/// an orphan would be adopted by the init process, which in a container is
/// often the postmaster, and the postmaster takes the exit of a child it
/// does not know for a crash.
///
/// A helper in the middle of a call is not in `HELPER` but in the call's
/// frame, which a FATAL exit (a terminate, a lost client, a parallel
/// worker stopped by its leader) leaves without unwinding: its pid is
/// kept in `IN_FLIGHT` for this.
pub fn shutdown() {
    let pid = IN_FLIGHT.swap(0, Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: our own child, not yet reaped (the call never returned),
        // so the pid cannot name another process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        reap(pid);
    }
    drop(HELPER.with_borrow_mut(|h| h.take()));
}

/// The helper of the call in flight (0: none).
static IN_FLIGHT: AtomicI32 = AtomicI32::new(0);

/// Clears `IN_FLIGHT` when the call ends by returning or unwinding (both
/// drop or keep the helper themselves); only an exit that skips both
/// leaves it for [`shutdown`].
struct InFlight;

impl InFlight {
    fn start(pid: libc::pid_t) -> InFlight {
        IN_FLIGHT.store(pid, Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.store(0, Ordering::SeqCst);
    }
}

/// A writer that calls `service` every mebibyte written, so that
/// encoding a large request stays responsive to the host's interrupts.
struct Serviced<'a, W> {
    inner: W,
    since: usize,
    service: &'a mut dyn FnMut(),
}

impl<W: std::io::Write> std::io::Write for Serviced<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.since += bytes.len();
        if self.since >= 1 << 20 {
            self.since = 0;
            (self.service)();
        }
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Counts what serializing the argument writes, stopping past `cap`: the
/// request's size is known before any of it is allocated.
struct Measure {
    len: usize,
    cap: usize,
}

impl std::io::Write for Measure {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.len = self.len.saturating_add(bytes.len());
        if self.len > self.cap {
            return Err(std::io::Error::other("over the budget"));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const HEADER_BYTES: usize = 48;

/// A request: a 48-byte header, then the argument as CBOR, in one buffer of
/// exactly that size. Its size is measured first (an argument whose
/// encoding is over the budget is refused without allocating it) and the
/// buffer is asked of the allocator fallibly, once — the caller may be a
/// Postgres backend, where a failed infallible allocation aborts the
/// process. CBOR writes a string as its length and then its bytes in one
/// write: measuring costs nothing per byte and filling is a copy, and the
/// host's interrupts are serviced between writes (JSON scanned a long
/// string for characters to escape, twice, deaf to a cancel meanwhile).
fn encode_request<A: Serialize>(arg: &A, budget: usize, service: &mut dyn FnMut()) -> Result<Vec<u8>> {
    let encode_error = |e: String| {
        Error::internal("cannot encode a validation request").with_detail(e)
    };
    let mut measure = Measure { len: 0, cap: budget };
    let measured = ciborium::into_writer(
        arg,
        Serviced { inner: &mut measure, since: 0, service: &mut *service },
    );
    if let Err(e) = measured {
        return Err(if measure.len > budget {
            memory_limit_error(budget)
        } else {
            encode_error(e.to_string())
        });
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(HEADER_BYTES + measure.len)
        .map_err(|_| memory_limit_error(budget))?;
    buf.extend_from_slice(&[0u8; HEADER_BYTES]);
    // Within the capacity just reserved: the same value encodes to the
    // same bytes.
    ciborium::into_writer(arg, Serviced { inner: &mut buf, since: 0, service })
        .map_err(|e| encode_error(e.to_string()))?;
    Ok(buf)
}

/// Runs `f(arg)` in this thread's helper process under `limits`, calling
/// `service` every few milliseconds while it waits (the host services its
/// interrupts there; if `service` unwinds, the helper is killed first).
pub fn call<A, R>(
    limits: Limits,
    arg: A,
    f: fn(A) -> Result<R>,
    service: &mut dyn FnMut(),
) -> Result<R>
where
    A: Serialize + DeserializeOwned,
    R: Serialize + DeserializeOwned,
{
    let mut request = encode_request(&arg, limits.memory_bytes, &mut *service)?;
    drop(arg);
    let payload = request.len() - HEADER_BYTES;
    for (i, word) in [
        payload as u64,
        trampoline::<A, R> as *const () as usize as u64,
        f as *const () as usize as u64,
        limits.timeout.as_millis() as u64,
        limits.max_plan_nodes as u64,
        limits.memory_bytes as u64,
    ]
    .into_iter()
    .enumerate()
    {
        request[i * 8..i * 8 + 8].copy_from_slice(&word.to_le_bytes());
    }

    let deadline = Instant::now() + limits.timeout;
    // Dropped (killed and reaped) on every path but a clean answer.
    let mut helper = match HELPER.with_borrow_mut(|h| h.take()) {
        Some(mut h) => {
            if h.alive() {
                h
            } else {
                drop(h);
                spawn()?
            }
        }
        None => spawn()?,
    };
    let _in_flight = InFlight::start(helper.pid);
    helper.phase.clear();
    let outcome = exchange(
        helper.to_helper,
        helper.from_helper,
        &request,
        deadline,
        limits.memory_bytes,
        service,
    );
    drop(request);
    match outcome {
        Exchange::Answered { body, peak } => {
            HELPER.with_borrow_mut(|h| *h = Some(helper));
            LAST_PEAK.set(peak);
            serde_json::from_slice::<Result<R>>(&body).unwrap_or_else(|e| {
                Err(Error::internal("malformed answer from the validation helper")
                    .with_detail(e.to_string()))
            })
        }
        Exchange::Deadline => {
            let phase = helper.phase.read();
            drop(helper);
            Err(isolate::time_limit_error(
                if phase.is_empty() { "validation" } else { &phase },
                limits.timeout,
            ))
        }
        Exchange::Gone => {
            let ended = helper.stop();
            drop(helper);
            // A terminate or shutdown reaches the helper with the backend's
            // process group: the host's own interrupt comes first.
            service();
            match ended {
                Ended::Exited(EXIT_MEMORY) => Err(memory_limit_error(limits.memory_bytes)),
                Ended::Signaled(libc::SIGTERM | libc::SIGQUIT) => Err(Error::new(
                    ErrorKind::Cancelled,
                    "the validation helper process was stopped with its backend",
                )),
                Ended::Signaled(libc::SIGKILL) => Err(Error::internal(
                    "the validation helper process was killed",
                )
                .with_detail("Something outside this backend (the kernel's out-of-memory killer, an operator) sent it SIGKILL.")),
                ended => Err(Error::internal("the validation helper process ended unexpectedly")
                    .with_detail(format!("{ended:?}"))),
            }
        }
        Exchange::TooLarge => {
            drop(helper);
            Err(memory_limit_error(limits.memory_bytes))
        }
    }
}

enum Exchange {
    Answered { body: Vec<u8>, peak: isize },
    Deadline,
    /// The helper closed its end: it ended.
    Gone,
    /// It answered more than its budget.
    TooLarge,
}

/// Writes the request and reads the answer, a tick at a time.
fn exchange(
    to: libc::c_int,
    from: libc::c_int,
    request: &[u8],
    deadline: Instant,
    budget: usize,
    service: &mut dyn FnMut(),
) -> Exchange {
    let mut written = 0;
    while written < request.len() {
        match wait_for(to, libc::POLLOUT, deadline, service) {
            Ready::Yes => {}
            Ready::Deadline => return Exchange::Deadline,
            Ready::Closed => return Exchange::Gone,
        }
        // SAFETY: writes from a live slice to our own pipe.
        let n = unsafe {
            libc::write(
                to,
                request[written..].as_ptr().cast(),
                request.len() - written,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error().raw_os_error();
            if err == Some(libc::EINTR) || err == Some(libc::EAGAIN) {
                continue;
            }
            return Exchange::Gone;
        }
        written += n as usize;
    }
    let mut head = [0u8; 16];
    match read_full(from, &mut head, deadline, service) {
        Ok(()) => {}
        Err(e) => return e,
    }
    let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) as usize;
    let peak = i64::from_le_bytes(head[8..].try_into().expect("8 bytes")) as isize;
    let mut body = Vec::new();
    if len > budget || body.try_reserve_exact(len).is_err() {
        return Exchange::TooLarge;
    }
    body.resize(len, 0u8);
    match read_full(from, &mut body, deadline, service) {
        Ok(()) => Exchange::Answered { body, peak },
        Err(e) => e,
    }
}

fn read_full(
    fd: libc::c_int,
    buf: &mut [u8],
    deadline: Instant,
    service: &mut dyn FnMut(),
) -> std::result::Result<(), Exchange> {
    let mut got = 0;
    while got < buf.len() {
        match wait_for(fd, libc::POLLIN, deadline, service) {
            Ready::Yes => {}
            Ready::Deadline => return Err(Exchange::Deadline),
            Ready::Closed => return Err(Exchange::Gone),
        }
        // SAFETY: reads into a live slice from our own pipe.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n < 0 {
            let err = std::io::Error::last_os_error().raw_os_error();
            if err == Some(libc::EINTR) || err == Some(libc::EAGAIN) {
                continue;
            }
            return Err(Exchange::Gone);
        }
        if n == 0 {
            return Err(Exchange::Gone);
        }
        got += n as usize;
    }
    Ok(())
}

enum Ready {
    Yes,
    Deadline,
    Closed,
}

/// Waits until `fd` is ready for `events`, servicing the caller between
/// ticks; past the deadline, says so.
fn wait_for(
    fd: libc::c_int,
    events: libc::c_short,
    deadline: Instant,
    service: &mut dyn FnMut(),
) -> Ready {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ready::Deadline;
        }
        let wait = TICK.min(deadline - now);
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: polls one fd of ours.
        let r = unsafe { libc::poll(&mut pfd, 1, wait.as_millis().max(1) as libc::c_int) };
        if r > 0 {
            if pfd.revents & events != 0 {
                return Ready::Yes;
            }
            if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return Ready::Closed;
            }
        }
        service();
    }
}

// ---------------------------------------------------------------------------
// The helper's side

/// Decodes the argument, runs `f`, encodes its result (a panic becomes an
/// internal error). Its address travels with each request.
fn trampoline<A: DeserializeOwned, R: Serialize>(f: usize, input: &[u8]) -> Vec<u8> {
    // SAFETY: `f` is the address of a `fn(A) -> Result<R>` that the caller
    // took for this very instantiation; the helper is a fork of the caller,
    // so the code is at the same address here.
    let f: fn(A) -> Result<R> = unsafe { std::mem::transmute::<usize, fn(A) -> Result<R>>(f) };
    let result: Result<R> = match ciborium::from_reader::<A, _>(input) {
        Ok(arg) => match catch_unwind(AssertUnwindSafe(|| f(arg))) {
            Ok(result) => result,
            Err(panic) => Err(Error::internal("internal error while validating the definition")
                .with_detail(isolate::panic_message(panic.as_ref()))),
        },
        Err(e) => Err(Error::internal("malformed validation request").with_detail(e.to_string())),
    };
    serde_json::to_vec(&result).unwrap_or_else(|e| {
        serde_json::to_vec(&Result::<()>::Err(
            Error::internal("cannot encode a validation answer").with_detail(e.to_string()),
        ))
        .unwrap_or_default()
    })
}

/// Forks this thread's helper.
fn spawn() -> Result<Helper> {
    let mut request = [0 as libc::c_int; 2];
    let mut answer = [0 as libc::c_int; 2];
    let phase = isolate::PhasePage::map()
        .ok_or_else(|| Error::internal("cannot map the validation helper's phase page"))?;
    // SAFETY: plain system calls; the child branch never returns (it ends
    // with `_exit`), the parent closes the child's ends.
    unsafe {
        if libc::pipe2(request.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            phase.unmap();
            return Err(Error::internal("cannot create the validation helper's pipe")
                .with_detail(std::io::Error::last_os_error().to_string()));
        }
        if libc::pipe2(answer.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            libc::close(request[0]);
            libc::close(request[1]);
            phase.unmap();
            return Err(Error::internal("cannot create the validation helper's pipe")
                .with_detail(std::io::Error::last_os_error().to_string()));
        }
        let parent = libc::getpid();
        // Every signal is held across the fork, so none of the host's
        // handlers can run in the child before it has reset them.
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
        let pid = libc::fork();
        if pid == 0 {
            helper_main(request[0], answer[1], parent, phase);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            for fd in [request[0], request[1], answer[0], answer[1]] {
                libc::close(fd);
            }
            phase.unmap();
            return Err(
                Error::internal("cannot start the validation helper process").with_detail(e.to_string())
            );
        }
        libc::close(request[0]);
        libc::close(answer[1]);
        // The caller's ends never block: it waits in poll, a tick at a time.
        for fd in [request[1], answer[0]] {
            libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
        }
        Ok(Helper {
            pid,
            to_helper: request[1],
            from_helper: answer[0],
            phase,
            ended: None,
        })
    }
}

/// The helper process: leaves the host's state behind, then serves
/// requests on a large-stack thread until its caller closes the pipe.
unsafe fn helper_main(
    input: libc::c_int,
    output: libc::c_int,
    parent: libc::pid_t,
    phase: isolate::PhasePage,
) -> ! {
    // The host's handlers must never run here: every disposition goes back
    // to the default (signals are still held), then a cancel — the caller's
    // to handle, by killing this process — and the host's housekeeping
    // signals are ignored; terminate and shutdown, sent to the backend's
    // process group, end it with the backend.
    for sig in 1..libc::SIGRTMAX() {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    for sig in [
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
    ] {
        libc::signal(sig, libc::SIG_IGN);
    }
    let mut none: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut none);
    libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    #[cfg(target_os = "linux")]
    {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        // No core dump, whatever the kernel's core_pattern.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // Under memory pressure the kernel kills this process before any
        // backend (whose death would restart the cluster).
        let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    }
    if libc::getppid() != parent {
        libc::_exit(EXIT_BROKEN);
    }
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    libc::setrlimit(libc::RLIMIT_CORE, &no_core);
    close_other_fds(input, output);
    // One malloc arena: a thread's own arena would reserve 64 MB of
    // address space, which counts against RLIMIT_AS.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    isolate::set_phase_page(phase);
    // A panic is answered as an internal error with its message (the
    // trampoline catches it). The host's hook would print it and, with
    // RUST_BACKTRACE set in the environment, capture and symbolize a
    // backtrace — hundreds of MB for a large binary, which the budget would
    // answer as a memory error instead.
    std::panic::set_hook(Box::new(|_| {}));
    // SAFETY (of from_raw_fd): the two pipe ends are this process's own,
    // and the files below are their only owners.
    let (input, output) = (
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(input),
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(output),
    );
    let served = std::thread::Builder::new()
        .name("micromegas-views-helper".into())
        .stack_size(isolate::STACK_BYTES)
        .spawn(move || serve(input, output));
    let status = match served.map(|t| t.join()) {
        Ok(Ok(())) => 0,
        _ => EXIT_BROKEN,
    };
    libc::_exit(status)
}

/// Closes every descriptor but the standard streams and the two pipes.
unsafe fn close_other_fds(a: libc::c_int, b: libc::c_int) {
    let (low, high) = (a.min(b), a.max(b));
    let ranges = [(3, low - 1), (low + 1, high - 1), (high + 1, libc::c_int::MAX)];
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        #[cfg(target_os = "linux")]
        {
            if libc::syscall(libc::SYS_close_range, first as libc::c_uint, last as libc::c_uint, 0) == 0 {
                continue;
            }
        }
        for fd in first..=last.min(65_535) {
            libc::close(fd);
        }
    }
}

/// This process's address space, in bytes (`/proc/self/statm`).
fn address_space() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page.max(4096) as usize)
}

/// Caps this process's address space at what it has now plus `memory` and
/// a margin, within the hard limit it was given.
fn cap_address_space(memory: usize) {
    let Some(space) = address_space() else {
        return;
    };
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_AS, &mut limit) != 0 {
            return;
        }
        let wanted = space.saturating_add(memory).saturating_add(ADDRESS_SPACE_MARGIN) as libc::rlim_t;
        limit.rlim_cur = wanted.min(limit.rlim_max);
        libc::setrlimit(libc::RLIMIT_AS, &limit);
    }
}

fn serve(mut input: std::fs::File, mut output: std::fs::File) {
    use std::io::{Read, Write};
    loop {
        let mut head = [0u8; HEADER_BYTES];
        if input.read_exact(&mut head).is_err() {
            return;
        }
        let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (len, trampoline, f) = (word(0) as usize, word(1) as usize, word(2) as usize);
        let timeout = Duration::from_millis(word(3));
        let max_plan_nodes = word(4) as usize;
        let memory = (word(5) as usize).max(1);
        cap_address_space(memory);
        LIVE.store(0, Ordering::Relaxed);
        PEAK.store(0, Ordering::Relaxed);
        LIMIT.store(memory, Ordering::Relaxed);
        let mut body = vec![0u8; len];
        if input.read_exact(&mut body).is_err() {
            return;
        }
        let budget = Budget::with_timeout(timeout).with_max_plan_nodes(max_plan_nodes);
        let job = isolate::enter(budget);
        // SAFETY: the address of `trampoline::<A, R>` for the caller's
        // types, sent by the caller, a fork of this very process.
        let run: fn(usize, &[u8]) -> Vec<u8> =
            unsafe { std::mem::transmute::<usize, fn(usize, &[u8]) -> Vec<u8>>(trampoline) };
        let answer = run(f, &body);
        drop(job);
        drop(body);
        let peak = PEAK.load(Ordering::Relaxed);
        let mut out = Vec::with_capacity(16 + answer.len());
        out.extend_from_slice(&(answer.len() as u64).to_le_bytes());
        out.extend_from_slice(&(peak as i64).to_le_bytes());
        out.extend_from_slice(&answer);
        drop(answer);
        LIMIT.store(0, Ordering::Relaxed);
        let ok = output.write_all(&out).is_ok();
        drop(out);
        isolate::clear_phase_page();
        if peak > TRIM_ABOVE {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: returns free heap memory to the kernel.
            unsafe {
                libc::malloc_trim(0);
            }
        }
        if !ok {
            return;
        }
    }
}
