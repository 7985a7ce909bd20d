//! What one query holds, counted at every allocation it makes.
//!
//! DataFusion's memory pool counts what its operators reserve (the batches a
//! sort or a join keeps), not what an expression allocates while it computes
//! a batch: a chain of `||`, many calls of a function in one row, a window
//! aggregate whose output grows with its frame. A service that runs its
//! callers' queries in one process needs the whole of what each query holds,
//! so the services install [`MeteredAllocator`] as their global allocator.
//!
//! - Every allocation carries a 16-byte header naming the query it was made
//!   for: the [`QueryMeter`] the allocating thread had entered, or none.
//!   Its size is added to that query's count, and subtracted when it is
//!   freed, on whatever thread and after whatever hand-over (a batch made by
//!   a query and freed by the code that sent it is still that query's).
//! - A thread enters a query's meter for each poll of the query's work
//!   ([`QueryMeter::enter`]): the services do it around the query's task and
//!   around every operator's stream, so the tasks DataFusion spawns for a
//!   plan (repartitions, merges) are counted too.
//! - A count past the query's cap is acted on where an error can be
//!   returned, never inside the allocator (an allocation that fails aborts
//!   the process): after every batch an operator produces, before every
//!   call of a function whose output can be many times its input (the
//!   `bounded` module), which adds the call's bound to the count, and before
//!   every step of an aggregate's accumulator (each row of a window frame).
//!   So a query holds at most its cap plus what one operator makes of one
//!   batch of inputs already under the cap, and a window aggregate whose
//!   output grows with its frame, its cap plus one row's output.
//! - A query stopped from outside ([`QueryMeter::stop`]: its deadline, its
//!   caller gone) is refused at the same checks, so the work already running
//!   for it ends at the next one rather than at the end of its batch.
//!
//! - A thread keeps what its allocations for the query it works for add
//!   up to, and adds it to the query's count every 64 KiB, when it stops
//!   working for the query (the end of each poll) and before a check: what a
//!   check reads lags what the query holds by less than 64 KiB per thread
//!   polling it at that moment.
//! - A process that runs one query at a time (the FlightSQL service's
//!   query processes) can also have the allocator end it
//!   ([`end_process_past`]): past that many bytes held by one query, the
//!   process exits at once with [`EXIT_MEMORY`], checked
//!   when a thread adds its pending bytes to the query's count and before
//!   any allocation of 64 KiB or more is made. That bounds what the checks
//!   above cannot: an operator that copies one value to a whole batch of
//!   rows in one allocation. The process's host answers the memory error
//!   and starts another process.
//!
//! A query whose meter is dropped stops counting: frees of what it made
//! afterwards are ignored (each meter has its own generation). There are
//! [`SLOTS`]` - 1` meters at once; a query that finds none left runs
//! uncounted but for its memory pool (and says so in the log of whoever
//! created it, through [`QueryMeter::counted`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Meters that can count at once (slot 0 means "no query").
pub const SLOTS: usize = 256;
/// The header before every allocation: the slot and the generation of the
/// meter it was made for.
const HEADER: usize = 16;

struct Slot {
    /// Bytes allocated minus bytes freed by the query holding the slot.
    live: AtomicI64,
    /// The generation of the meter holding the slot; 0 when none does.
    generation: AtomicU32,
    /// The cap of the meter holding the slot.
    cap: AtomicU64,
    /// Whether the query holding the slot was stopped: every check refuses.
    stopped: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    live: AtomicI64::new(0),
    generation: AtomicU32::new(0),
    cap: AtomicU64::new(0),
    stopped: AtomicBool::new(false),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// The slots no meter holds (filled on first use).
static FREE: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static FREE_FILLED: AtomicBool = AtomicBool::new(false);
static NEXT_GENERATION: AtomicU32 = AtomicU32::new(1);
/// Whether [`MeteredAllocator`] is the process's allocator (set by its
/// first allocation).
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The (slot, generation) this thread's allocations are made for.
    static CURRENT: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

thread_local! {
    /// Whether the operator this thread is polling is a window operator.
    static IN_WINDOW: Cell<bool> = const { Cell::new(false) };
}

/// Says, until the guard is dropped, whether the operator this thread polls
/// is a window operator (the services set it around every operator's poll):
/// there an aggregate's value is copied to the rows of its frame.
pub fn polling_operator(window: bool) -> PollingOperator {
    let previous = IN_WINDOW.try_with(|w| w.replace(window)).unwrap_or(false);
    PollingOperator { previous }
}

/// Whether this thread is polling a window operator.
pub fn in_window() -> bool {
    IN_WINDOW.try_with(Cell::get).unwrap_or(false)
}

/// Restores the previous operator kind when dropped.
pub struct PollingOperator {
    previous: bool,
}

impl Drop for PollingOperator {
    fn drop(&mut self) {
        let _ = IN_WINDOW.try_with(|w| w.set(self.previous));
    }
}

#[inline]
fn current() -> (u32, u32) {
    CURRENT.try_with(Cell::get).unwrap_or((0, 0))
}

/// The global allocator of the services: the system's, with a header per
/// allocation that attributes it to a query.
pub struct MeteredAllocator;

#[inline]
fn prefix(align: usize) -> usize {
    align.max(HEADER)
}

#[inline]
unsafe fn tag(user: *mut u8) -> *mut (u32, u32) {
    user.sub(HEADER) as *mut (u32, u32)
}

/// What a thread's allocations for the query it works for may add up to
/// before they are added to the query's count. Every allocation adding to
/// one shared count is an atomic write to a line of memory every thread of
/// the query writes (a tenth of the daemon's time went to it); kept per
/// thread, the count is written once per `BATCH` bytes and whenever the
/// thread stops working for the query or a check reads the count.
const BATCH: i64 = 64 << 10;

thread_local! {
    /// The bytes this thread's allocations for its current query
    /// ([`CURRENT`]) made or freed and has not added to its count yet.
    static PENDING: Cell<i64> = const { Cell::new(0) };
}

/// The exit status of a process ended for its memory: a query process
/// past [`end_process_past`], the extension's helper past its budget
/// (the sandbox module).
pub const EXIT_MEMORY: i32 = 86;

/// What one query may hold before its process ends; 0: no such limit.
static PROCESS_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Ends this process (exit status [`EXIT_MEMORY`]) as soon
/// as one query holds more than `bytes`, or is about to allocate past it.
/// For a process that runs one query at a time, whose host starts another:
/// nothing unwinds and no handler runs; one line is written to stderr.
pub fn end_process_past(bytes: u64) {
    PROCESS_LIMIT.store(bytes, Ordering::Relaxed);
}

#[cold]
fn end_process() -> ! {
    const LINE: &[u8] = b"micromegas_views: a query went past the memory its process may hold; the process ends\n";
    // SAFETY: writes a static buffer to stderr and ends the process; no
    // allocation, no unwinding, no exit handler.
    unsafe {
        libc::write(2, LINE.as_ptr().cast(), LINE.len());
        libc::_exit(EXIT_MEMORY)
    }
}

/// Ends the process if the query of `slot` would hold more than the
/// process limit with `more` bytes added to what it holds now.
#[inline]
fn end_process_if_past(slot: u32, generation: u32, more: i64) {
    let limit = PROCESS_LIMIT.load(Ordering::Relaxed);
    if limit == 0 || slot == 0 {
        return;
    }
    let s = &TABLE[slot as usize];
    if s.generation.load(Ordering::Relaxed) != generation {
        return;
    }
    let pending = if current() == (slot, generation) {
        PENDING.try_with(Cell::get).unwrap_or(0)
    } else {
        0
    };
    let held = s.live.load(Ordering::Relaxed).saturating_add(pending).saturating_add(more);
    if held > limit as i64 {
        end_process();
    }
}

/// Adds `delta` to the count of the meter holding `slot`, if it is still
/// the one of `generation`.
#[inline]
fn add(slot: u32, generation: u32, delta: i64) {
    if slot != 0 && delta != 0 {
        let s = &TABLE[slot as usize];
        // A meter dropped (and its slot reused) since: not this query's
        // count any more.
        if s.generation.load(Ordering::Relaxed) == generation {
            let held = s.live.fetch_add(delta, Ordering::Relaxed) + delta;
            if delta > 0 {
                let limit = PROCESS_LIMIT.load(Ordering::Relaxed);
                if limit != 0 && held > limit as i64 {
                    end_process();
                }
            }
        }
    }
}

/// Counts `delta` bytes for the meter of `slot` and `generation`: kept
/// with this thread's pending bytes when it is the query the thread works
/// for, added at once otherwise (a free elsewhere).
#[inline]
fn count(slot: u32, generation: u32, delta: i64) {
    if slot == 0 {
        return;
    }
    if current() == (slot, generation) {
        let kept = PENDING.try_with(|p| {
            let pending = p.get() + delta;
            if pending.abs() < BATCH {
                p.set(pending);
            } else {
                p.set(0);
                add(slot, generation, pending);
            }
        });
        if kept.is_ok() {
            return;
        }
    }
    add(slot, generation, delta);
}

/// Adds this thread's pending bytes to the count of the query it works for.
#[inline]
fn flush() {
    let pending = PENDING.try_with(|p| p.replace(0)).unwrap_or(0);
    if pending != 0 {
        let (slot, generation) = current();
        add(slot, generation, pending);
    }
}

unsafe impl GlobalAlloc for MeteredAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.place(layout, false)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.place(layout, true)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let pre = prefix(layout.align());
        let (slot, generation) = tag(ptr).read();
        count(slot, generation, -(layout.size() as i64));
        System.dealloc(ptr.sub(pre), Layout::from_size_align_unchecked(layout.size() + pre, pre));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let pre = prefix(layout.align());
        let Some(full) = new_size.checked_add(pre) else {
            return std::ptr::null_mut();
        };
        let (slot, generation) = tag(ptr).read();
        let growth = new_size as i64 - layout.size() as i64;
        if growth >= BATCH {
            end_process_if_past(slot, generation, growth);
        }
        let old = Layout::from_size_align_unchecked(layout.size() + pre, pre);
        let base = System.realloc(ptr.sub(pre), old, full);
        if base.is_null() {
            return base;
        }
        // The header moved with the contents: the allocation stays the
        // query's it was made for.
        count(slot, generation, growth);
        base.add(pre)
    }
}

impl MeteredAllocator {
    #[inline]
    unsafe fn place(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let pre = prefix(layout.align());
        let Some(size) = layout.size().checked_add(pre) else {
            return std::ptr::null_mut();
        };
        let Ok(full) = Layout::from_size_align(size, pre) else {
            return std::ptr::null_mut();
        };
        if layout.size() as i64 >= BATCH {
            let (slot, generation) = current();
            end_process_if_past(slot, generation, layout.size() as i64);
        }
        let base = if zeroed { System.alloc_zeroed(full) } else { System.alloc(full) };
        if base.is_null() {
            return base;
        }
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
        let user = base.add(pre);
        let (slot, generation) = current();
        tag(user).write((slot, generation));
        count(slot, generation, layout.size() as i64);
        user
    }
}

/// Whether this process counts its queries' allocations.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// One query's count and cap. Dropping it ends the count and frees its slot.
#[derive(Debug)]
pub struct QueryMeter {
    slot: u32,
    generation: u32,
    cap: u64,
}

impl QueryMeter {
    /// A meter for a query that may hold `cap` bytes.
    pub fn new(cap: u64) -> Arc<QueryMeter> {
        let slot = {
            let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
            if !FREE_FILLED.swap(true, Ordering::Relaxed) {
                free.extend((1..SLOTS as u32).rev());
            }
            free.pop().unwrap_or(0)
        };
        let mut generation = 0;
        if slot != 0 {
            generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
            if generation == 0 {
                generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
            }
            let s = &TABLE[slot as usize];
            s.live.store(0, Ordering::Relaxed);
            s.cap.store(cap, Ordering::Relaxed);
            s.stopped.store(false, Ordering::Relaxed);
            s.generation.store(generation, Ordering::Release);
        }
        Arc::new(QueryMeter { slot, generation, cap })
    }

    /// Whether this meter counts (the allocator is installed and a slot
    /// was free).
    pub fn counted(&self) -> bool {
        self.slot != 0 && installed()
    }

    /// What the query holds now, in bytes.
    pub fn live(&self) -> u64 {
        if self.slot == 0 {
            return 0;
        }
        flush();
        TABLE[self.slot as usize].live.load(Ordering::Relaxed).max(0) as u64
    }

    /// The bytes the query may hold.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// Attributes this thread's allocations to the query until the guard is
    /// dropped (then to whatever they were attributed to before).
    pub fn enter(&self) -> Entered {
        flush();
        let previous = current();
        let _ = CURRENT.try_with(|c| c.set((self.slot, self.generation)));
        Entered { previous }
    }

    /// Refuses `more` bytes if the query would then hold more than its cap,
    /// and anything once the query is stopped.
    pub fn check(&self, more: u64) -> Result<(), String> {
        if self.slot != 0 && TABLE[self.slot as usize].stopped.load(Ordering::Relaxed) {
            return Err(STOPPED.to_string());
        }
        refusal(self.live(), more, self.cap)
    }

    /// Stops the query: from now on every check of its meter refuses, so
    /// that work already running for it (a batch being computed on another
    /// thread, which dropping the query's task cannot interrupt) ends at its
    /// next check instead of its batch's end. A meter without a slot
    /// ([`QueryMeter::counted`] false) has nothing to stop.
    pub fn stop(&self) {
        if self.slot != 0 {
            TABLE[self.slot as usize].stopped.store(true, Ordering::Relaxed);
        }
    }
}

/// What a check answers once its query is stopped.
const STOPPED: &str = "the query was stopped (its deadline passed, its caller went away or its job was given back)";

impl Drop for QueryMeter {
    fn drop(&mut self) {
        if self.slot != 0 {
            TABLE[self.slot as usize].generation.store(0, Ordering::Release);
            FREE.lock().unwrap_or_else(|e| e.into_inner()).push(self.slot);
        }
    }
}

/// Restores the thread's previous attribution when dropped.
pub struct Entered {
    previous: (u32, u32),
}

impl Drop for Entered {
    fn drop(&mut self) {
        flush();
        let _ = CURRENT.try_with(|c| c.set(self.previous));
    }
}

/// Refuses `more` bytes for the query this thread is working for, if it
/// would then hold more than its cap, and anything once that query is
/// stopped (nothing to refuse when the thread works for no query).
pub fn check_current(more: u64) -> Result<(), String> {
    let (slot, generation) = current();
    if slot == 0 {
        return Ok(());
    }
    flush();
    let s = &TABLE[slot as usize];
    if s.generation.load(Ordering::Acquire) != generation {
        return Ok(());
    }
    if s.stopped.load(Ordering::Relaxed) {
        return Err(STOPPED.to_string());
    }
    if !installed() {
        return Ok(());
    }
    refusal(s.live.load(Ordering::Relaxed).max(0) as u64, more, s.cap.load(Ordering::Relaxed))
}

fn refusal(live: u64, more: u64, cap: u64) -> Result<(), String> {
    if live.saturating_add(more) <= cap {
        return Ok(());
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    Err(if more == 0 {
        format!("the query holds {:.1} MiB, more than the {:.1} MiB a query may hold", mib(live), mib(cap))
    } else {
        format!(
            "the query holds {:.1} MiB and this call would add up to {:.1} MiB, more than the {:.1} MiB a query may hold",
            mib(live),
            mib(more),
            mib(cap)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The core's tests run under the system allocator: what is tested here
    // is the bookkeeping, through the same entry points the allocator uses.
    unsafe fn made(layout: Layout) -> *mut u8 {
        MeteredAllocator.alloc(layout)
    }

    #[test]
    fn an_allocation_is_counted_for_the_query_entered_and_freed_from_it_anywhere() {
        let meter = QueryMeter::new(1 << 20);
        let layout = Layout::from_size_align(1000, 8).unwrap();
        let ptr = {
            let _in = meter.enter();
            unsafe { made(layout) }
        };
        assert_eq!(meter.live(), 1000);
        // Grown outside the query: still the query's.
        let ptr = unsafe { MeteredAllocator.realloc(ptr, layout, 5000) };
        assert_eq!(meter.live(), 5000);
        // Freed on another thread.
        let address = ptr as usize;
        std::thread::spawn(move || unsafe {
            MeteredAllocator.dealloc(address as *mut u8, Layout::from_size_align(5000, 8).unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(meter.live(), 0);
    }

    #[test]
    fn a_large_alignment_keeps_its_alignment_and_its_header() {
        let meter = QueryMeter::new(1 << 20);
        let layout = Layout::from_size_align(100, 4096).unwrap();
        let ptr = {
            let _in = meter.enter();
            unsafe { MeteredAllocator.alloc_zeroed(layout) }
        };
        assert_eq!(ptr as usize % 4096, 0);
        assert!(unsafe { std::slice::from_raw_parts(ptr, 100) }.iter().all(|b| *b == 0));
        assert_eq!(meter.live(), 100);
        unsafe { MeteredAllocator.dealloc(ptr, layout) };
        assert_eq!(meter.live(), 0);
    }

    #[test]
    fn what_a_finished_query_made_is_not_counted_against_the_next() {
        let layout = Layout::from_size_align(4096, 8).unwrap();
        let first = QueryMeter::new(1 << 20);
        let ptr = {
            let _in = first.enter();
            unsafe { made(layout) }
        };
        drop(first);
        let second = QueryMeter::new(1 << 20);
        let ours = {
            let _in = second.enter();
            unsafe { made(layout) }
        };
        unsafe { MeteredAllocator.dealloc(ptr, layout) };
        assert_eq!(second.live(), 4096);
        unsafe { MeteredAllocator.dealloc(ours, layout) };
        assert_eq!(second.live(), 0);
    }

    #[test]
    fn a_query_past_its_cap_is_refused_with_what_it_holds() {
        let meter = QueryMeter::new(10_000);
        let layout = Layout::from_size_align(8_000, 8).unwrap();
        let _in = meter.enter();
        let ptr = unsafe { made(layout) };
        assert!(meter.check(0).is_ok());
        let e = meter.check(4_000).unwrap_err();
        assert!(e.contains("a query may hold"), "{e}");
        unsafe { MeteredAllocator.dealloc(ptr, layout) };
        assert!(meter.check(4_000).is_ok());
    }

    #[test]
    fn a_stopped_query_is_refused_at_every_check_and_the_next_holder_of_its_slot_is_not() {
        let meter = QueryMeter::new(1 << 20);
        assert!(meter.check(0).is_ok());
        meter.stop();
        assert!(meter.check(0).unwrap_err().contains("stopped"));
        {
            let _in = meter.enter();
            assert!(check_current(0).unwrap_err().contains("stopped"));
        }
        // Work for no query is never stopped.
        assert!(check_current(0).is_ok());
        drop(meter);
        let next = QueryMeter::new(1 << 20);
        let _in = next.enter();
        assert!(next.check(0).is_ok() && check_current(0).is_ok());
    }

    #[test]
    fn entering_nests_and_restores() {
        let a = QueryMeter::new(1 << 20);
        let b = QueryMeter::new(1 << 20);
        let layout = Layout::from_size_align(10, 1).unwrap();
        let _a = a.enter();
        {
            let _b = b.enter();
            let p = unsafe { made(layout) };
            assert_eq!((a.live(), b.live()), (0, 10));
            unsafe { MeteredAllocator.dealloc(p, layout) };
        }
        let p = unsafe { made(layout) };
        assert_eq!((a.live(), b.live()), (10, 0));
        unsafe { MeteredAllocator.dealloc(p, layout) };
    }

    /// Run in a process of its own (the test below starts it): allocations
    /// under the limit are made, the first that would pass it ends the
    /// process before it is made, and so does a count growing past it in
    /// small steps.
    #[test]
    fn process_limit_child() {
        let Ok(how) = std::env::var("MMV_METER_LIMIT_CHILD") else {
            return;
        };
        end_process_past(8 << 20);
        let meter = QueryMeter::new(1 << 40);
        let _in = meter.enter();
        let below = Layout::from_size_align(6 << 20, 8).unwrap();
        let p = unsafe { made(below) };
        assert!(!p.is_null());
        println!("under the limit: made");
        if how == "one" {
            // 6 + 4 MiB: refused before the 4 MiB are asked of the system.
            let _ = unsafe { made(Layout::from_size_align(4 << 20, 8).unwrap()) };
        } else {
            let small = Layout::from_size_align(1000, 8).unwrap();
            for _ in 0..4_000 {
                let _ = unsafe { made(small) };
            }
        }
        println!("past the limit: still running");
    }

    #[test]
    fn a_query_past_the_process_limit_ends_its_process_with_the_memory_status() {
        for how in ["one", "steps"] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "meter::tests::process_limit_child", "--nocapture", "--test-threads=1"])
                .env("MMV_METER_LIMIT_CHILD", how)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(EXIT_MEMORY), "{how}: {stdout} {stderr}");
            assert!(stdout.contains("under the limit: made"), "{how}: {stdout}");
            assert!(!stdout.contains("still running"), "{how}: {stdout}");
            assert!(stderr.contains("went past the memory its process may hold"), "{how}: {stderr}");
        }
    }
}
