//! The helper process under its limits, from the outside: generated wide
//! and deep inputs to every function the extension runs on caller text
//! (definitions, deny rules, the fingerprint, schemas) either get their
//! answer within the memory budget or are stopped with the time or memory
//! error — never a crash, never more memory than the budget, and the
//! calling process holds no more than its own inputs and requests, and
//! nothing once the calls are over.
//!
//! One test function: the helper is forked from the test's own thread, and
//! a fork is only safe while no other test thread can hold a lock.

use micromegas_views_core::catalog::CatalogRow;
use micromegas_views_core::prepare::{self, RowInput};
use micromegas_views_core::sandbox::{self, helper_pid, last_call_peak_bytes, Limits};
use micromegas_views_core::{builtins, deny, schema, ErrorKind, Result};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

/// The helper's allocator, with a count of this (the calling) process's
/// live heap on top: what the caller holds is measured in bytes it
/// allocated, not in resident pages, which the C allocator keeps or
/// returns by its own rules.
struct CallerCounted;

static CALLER_LIVE: AtomicIsize = AtomicIsize::new(0);
static CALLER_PEAK: AtomicIsize = AtomicIsize::new(0);

fn caller_grow(bytes: usize) {
    let live = CALLER_LIVE.fetch_add(bytes as isize, Ordering::Relaxed) + bytes as isize;
    CALLER_PEAK.fetch_max(live, Ordering::Relaxed);
}

fn caller_shrink(bytes: usize) {
    CALLER_LIVE.fetch_sub(bytes as isize, Ordering::Relaxed);
}

// SAFETY: forwards every call to the helper's allocator with the same
// arguments; the counting touches only atomics.
unsafe impl GlobalAlloc for CallerCounted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        caller_grow(layout.size());
        sandbox::BudgetAllocator.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        caller_grow(layout.size());
        sandbox::BudgetAllocator.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        sandbox::BudgetAllocator.dealloc(ptr, layout);
        caller_shrink(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        caller_grow(new_size);
        let moved = sandbox::BudgetAllocator.realloc(ptr, layout, new_size);
        caller_shrink(layout.size());
        moved
    }
}

#[global_allocator]
static ALLOCATOR: CallerCounted = CallerCounted;

/// The caller's live heap, and its peak since the last reset.
fn caller_live() -> isize {
    CALLER_LIVE.load(Ordering::Relaxed)
}

fn reset_caller_peak() -> isize {
    let live = caller_live();
    CALLER_PEAK.store(live, Ordering::Relaxed);
    live
}

const BUDGET: usize = 64 << 20;

fn limits(timeout_ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        memory_bytes: BUDGET,
        max_plan_nodes: 250_000,
    }
}

fn alive(pid: i32) -> bool {
    // A reaped process has no /proc entry.
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn call<A, R>(timeout_ms: u64, arg: A, f: fn(A) -> Result<R>) -> Result<R>
where
    A: serde::Serialize + serde::de::DeserializeOwned,
    R: serde::Serialize + serde::de::DeserializeOwned,
{
    let mut ticks = 0u64;
    // What the caller may hold during a call: the request (its CBOR, in a
    // buffer of its size) and the answer (its bytes and their decoding);
    // planning the input is not in it.
    let mut encoded = Vec::new();
    let request = ciborium::into_writer(&arg, &mut encoded).map(|()| encoded.len()).unwrap_or(0);
    drop(encoded);
    let before = reset_caller_peak();
    let result = sandbox::call(limits(timeout_ms), arg, f, &mut || ticks += 1);
    let held = CALLER_PEAK.load(Ordering::Relaxed) - before;
    let answer = serde_json::to_vec(&result).map(|v| v.len()).unwrap_or(0);
    let allowed = request.min(BUDGET) + 3 * answer + (1 << 20);
    assert!(
        held <= allowed as isize,
        "the caller held {held} bytes for a {request}-byte request and a {answer}-byte answer"
    );
    if result.is_ok() {
        let peak = last_call_peak_bytes();
        assert!(peak <= BUDGET as isize, "answered after allocating {peak} bytes");
    }
    result
}

/// What a generated input may get: its answer, or a limit's error, or an
/// error about the input itself. Never an internal error.
fn acceptable(what: &str, result: &Result<impl std::fmt::Debug>) {
    if let Err(e) = result {
        assert!(
            e.kind != ErrorKind::Internal && e.kind != ErrorKind::Cancelled,
            "{what}: {e}"
        );
    }
}

fn builtin_rows() -> Vec<CatalogRow> {
    builtins::builtin_rows()
}

fn validate((statement, rows): (String, Vec<CatalogRow>)) -> Result<String> {
    let derived = prepare::derive(RowInput {
        definition_sql: Some(statement),
        ..Default::default()
    })?;
    let prepared = prepare::prepare(&derived, &rows, false)?;
    Ok(prepared.schema_ipc)
}

fn statement(extract: &str) -> String {
    format!(
        "CREATE MATERIALIZED VIEW gen WITH (extract_query = '{}', \
         count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''', \
         merge_partitions_query = 'SELECT * FROM {{source}}', update_group = 9000, time_column = 'time')",
        extract.replace('\'', "''")
    )
}

/// A small deterministic generator (no dependency): xorshift.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Wide and deep query texts of the shapes that cost planners the most.
fn generated_queries(g: &mut Gen) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for round in 0..6 {
        let n = 10usize.pow(1 + (g.below(4) as u32)) * (1 + g.below(5) as usize);
        let shape = (round + g.below(6) as usize) % 6;
        let text = match shape {
            0 => {
                // Chained CTEs, each over the one before.
                let mut q = String::from("WITH t0 AS (SELECT * FROM log_entries)");
                for i in 1..n.min(3000) {
                    q.push_str(&format!(", t{i} AS (SELECT * FROM t{})", i - 1));
                }
                q.push_str(&format!(" SELECT * FROM t{}", n.min(3000) - 1));
                q
            }
            1 => format!("SELECT {} FROM log_entries", vec!["level"; n].join(", ")),
            2 => format!(
                "SELECT {}level{} AS x FROM log_entries",
                "(".repeat(n.min(5000)),
                ")".repeat(n.min(5000))
            ),
            3 => format!(
                "SELECT time FROM log_entries {}",
                (0..n.min(2000))
                    .map(|i| format!("UNION ALL SELECT time FROM log_entries WHERE level = {i}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            4 => format!("SELECT time FROM log_entries WHERE {}", vec!["level = 1"; n].join(" OR ")),
            _ => ",".repeat(n * 100),
        };
        out.push((format!("shape {shape}, n {n}"), text));
    }
    out
}

#[test]
fn the_helper_process_bounds_memory_and_time() {
    let baseline = caller_live();

    // An answer, and the same helper serves the next call.
    let hash = call(5_000, "SELECT 1".to_string(), |t| deny::sql_hash(&t)).unwrap();
    assert_eq!(hash.len(), 16);
    let first = helper_pid().expect("a helper");
    assert_eq!(
        call(5_000, "SELECT 1".to_string(), |t| deny::sql_hash(&t)).unwrap(),
        hash
    );
    assert_eq!(helper_pid(), Some(first));

    // What a call allocates is counted: a call that keeps 8 MB reports at
    // least that much.
    call(5_000, 8usize << 20, |n| Ok(vec![1u8; n].iter().map(|b| *b as usize).sum::<usize>()))
        .unwrap();
    assert!(last_call_peak_bytes() >= 8 << 20, "{}", last_call_peak_bytes());

    // A panic is an internal error; the helper lives on.
    let e = call::<(), ()>(5_000, (), |()| panic!("boom")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.detail.as_deref().unwrap_or("").contains("boom"), "{e}");
    assert_eq!(helper_pid(), Some(first));

    // 16 MB of commas to the fingerprint: several hundred MB of tokens
    // unbounded; here the memory error, three times in a row, each in a
    // new helper, and the previous one is gone.
    let mut previous = first;
    for _ in 0..3 {
        let started = Instant::now();
        let e = call(20_000, ",".repeat(16_000_000), |t| deny::sql_hash(&t)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::MemoryLimit, "{e}");
        assert!(e.message.contains("64 MB"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(15));
        assert!(!alive(previous), "helper {previous} outlived its call");
        assert_eq!(helper_pid(), None);
        call(5_000, "SELECT 2".to_string(), |t| deny::sql_hash(&t)).unwrap();
        previous = helper_pid().unwrap();
    }

    // A helper that died while idle (the out-of-memory killer, an operator)
    // is replaced: the next call is answered.
    // SAFETY: kills this test's own helper process.
    unsafe { libc::kill(previous, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(50));
    call(5_000, "SELECT 3".to_string(), |t| deny::sql_hash(&t)).unwrap();
    assert_ne!(helper_pid(), Some(previous));
    assert!(!alive(previous), "the dead helper {previous} was not reaped");
    previous = helper_pid().unwrap();

    // An argument whose encoding alone is over the budget is refused before
    // it is sent, and the helper stays.
    let e = call(5_000, "\u{1}".repeat(BUDGET + 1), |t| deny::sql_hash(&t)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::MemoryLimit, "{e}");
    assert_eq!(helper_pid(), Some(previous));

    // Work that never reaches a checkpoint and never allocates is killed at
    // the deadline: the time-limit error, and the process is gone.
    let started = Instant::now();
    let e = call::<(), ()>(200, (), |()| loop {
        std::hint::spin_loop();
    })
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TimeLimit, "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(!alive(previous));
    assert_eq!(helper_pid(), None);

    // Memory allocated in a tight loop with no checkpoint: stopped by the
    // budget, not by the clock.
    let e = call::<(), ()>(20_000, (), |()| {
        let mut keep: Vec<Vec<u8>> = Vec::new();
        loop {
            keep.push(vec![1u8; 1 << 20]);
        }
    })
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::MemoryLimit, "{e}");

    // Generated wide and deep definitions, deny rules, fingerprints and
    // schemas: each answered within the budget or stopped by a limit.
    let rows = builtin_rows();
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    for (what, query) in generated_queries(&mut g) {
        let r = call(3_000, (statement(&query), rows.clone()), validate);
        acceptable(&format!("validate {what}"), &r);
        let r = call(3_000, query.clone(), |t| deny::sql_hash(&t));
        acceptable(&format!("sql_hash {what}"), &r);
        let rule = format!("sql LIKE '{}'", query.replace('\'', "''"));
        let r = call(3_000, rule, |t| deny::compile(&t).map(|_| ()));
        acceptable(&format!("deny rule {what}"), &r);
    }
    for depth in [10usize, 1_000, 100_000] {
        let rule = format!("{}user_id = 'x'{}", "NOT (".repeat(depth), ")".repeat(depth));
        let r = call(3_000, rule, |t| deny::compile(&t).map(|_| ()));
        acceptable(&format!("deny NOT depth {depth}"), &r);
        let fields: Vec<String> = (0..depth.min(20_000)).map(|i| format!(r#"{{"name":"c{i}","data_type":"Int64","nullable":true,"dict_id":0,"dict_is_ordered":false,"metadata":{{}}}}"#)).collect();
        let json = format!(r#"{{"fields":[{}],"metadata":{{}}}}"#, fields.join(","));
        let r = call(3_000, json, |t| {
            let parsed = schema::parse_any(&t)?;
            Ok(schema::to_ipc_base64(&parsed)?)
        });
        acceptable(&format!("schema of {depth} fields"), &r);
    }

    // Every call above held no more than its request and answer (checked
    // in `call`), and the caller keeps nothing once the calls are over.
    drop(rows);
    let kept = caller_live() - baseline;
    assert!(kept < 1 << 20, "the calling process kept {kept} bytes");
}
