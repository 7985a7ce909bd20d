//! What makes a write "the extension's own", and who is calling.
//!
//! The triggers on the definitions and built-in tables must tell the
//! extension's own writes (a re-check of a dependent, a restore, the UPDATE a
//! CREATE OR REPLACE turns into, a superuser's pg_restore loading over a
//! shipped row) from a caller's. Nothing a caller controls may decide that:
//! not a setting (`set_config` is open to every role), not
//! `pg_trigger_depth()` (an admin's own trigger on a temp table raises it),
//! not a column value. So the mark is backend memory that only this
//! library writes: an *intent* stack. The extension's SECURITY DEFINER SQL
//! pushes an intent around its own statement (`_mm_intent_begin`, callable
//! by no role of the extension: see the privilege matrix) and pops it after;
//! the triggers ask `_mm_intent(name)`. Every intent pushed inside a
//! subtransaction that aborts is dropped with it, and the stack is emptied at
//! the end of every transaction, so an error between push and pop leaves
//! nothing behind.
//!
//! The caller is the role that runs the statement *outside* any SECURITY
//! DEFINER function (`GetOuterUserId`: the login role, or what SET ROLE
//! chose), which the extension's own functions cannot change.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;

/// The kinds of the extension's own writes, and one mode: `lenient`, pushed
/// around a re-check whose broken dependents are marked failed rather than
/// refusing the change (a built-in's registration), so that the re-checks it
/// sets off further down stay lenient. `_mm_intent` never answers `lenient`:
/// it is not a write.
pub(crate) const KINDS: [&str; 5] = ["replace", "recheck", "restore", "load", "lenient"];

/// What a trigger tells the extension's function whose statement fired it,
/// when the statement's own result cannot carry it: `replaced`, the view set
/// a CREATE OR REPLACE replaced (the definitions trigger turns the INSERT
/// into an UPDATE and returns no row; for `mm_create_view`); `created_job`,
/// the refresh job a new definition queued (for `mm_create_view`);
/// `retired`, the partitions and bytes a drop retired (for
/// `mm_drop_view`). Backend memory, like the intents: a setting would be
/// any role's to write.
const REPORTS: [&str; 3] = ["replaced", "created_job", "retired"];

/// `kind` as one of `REPORTS`; any other is an error of `function`'s (a
/// misspelt kind would otherwise never be reported, or never read).
fn report_kind(function: &str, kind: &str) -> &'static str {
    match REPORTS.iter().find(|k| **k == kind) {
        Some(kind) => kind,
        None => pgrx::error!("{function}: unknown report {kind:?}"),
    }
}

/// Whether an intent of `kind` is anywhere on the stack.
pub fn held(kind: &str) -> bool {
    INTENTS.with_borrow(|stack| stack.iter().any(|i| i.kind == kind))
}

struct Intent {
    kind: &'static str,
    /// The view set it applies to; `None`: every row (a re-check rewrites
    /// several rows in one statement).
    name: Option<String>,
    /// The subtransaction that pushed it: gone when that one aborts.
    subxact: pg_sys::SubTransactionId,
}

thread_local! {
    static INTENTS: RefCell<Vec<Intent>> = const { RefCell::new(Vec::new()) };
    /// What a trigger reports to the function whose statement fired it, by
    /// kind (see `REPORTS`).
    static REPORTED: RefCell<Vec<(&'static str, String)>> = const { RefCell::new(Vec::new()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_end(
    _event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    // Commit, abort, prepare, parallel variants: a transaction's intents never
    // outlive it (a correct path has popped them all before).
    INTENTS.with_borrow_mut(|stack| stack.clear());
    REPORTED.with_borrow_mut(Vec::clear);
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact_event(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        // Subtransaction ids grow within a transaction: whatever was pushed
        // at or above the aborted one was pushed inside it.
        INTENTS.with_borrow_mut(|stack| stack.retain(|i| i.subxact < my_subid));
    }
}

/// Called once from `_PG_init`.
pub fn register() {
    // SAFETY: registering two callbacks with the backend, on its own thread,
    // while the library loads; they only touch this module's thread-local.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact_end), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact_event), std::ptr::null_mut());
    }
}

/// Whether the caller is a superuser or has the privileges of
/// `micromegas_admin`: who may give one validation more than the default
/// time. Both the role outside every SECURITY DEFINER function and the
/// current one must be, outside a security-restricted operation: otherwise
/// a reader's index expression, run by autovacuum or an admin's ANALYZE
/// (as the table owner, with a superuser outside), would get an admin's
/// limit.
pub fn caller_is_admin() -> bool {
    // SAFETY: backend globals and syscache lookups on the backend's thread.
    unsafe {
        if pg_sys::InSecurityRestrictedOperation() {
            return false;
        }
        let admin = pg_sys::get_role_oid(c"micromegas_admin".as_ptr(), true);
        let is_admin = |role: pg_sys::Oid| {
            pg_sys::superuser_arg(role)
                || (admin != pg_sys::InvalidOid && pg_sys::has_privs_of_role(role, admin))
        };
        is_admin(pg_sys::GetOuterUserId()) && is_admin(pg_sys::GetUserId())
    }
}

mod micromegas {
    use super::*;

    /// Marks the statements that follow, until `_mm_intent_end`, as the
    /// extension's own write of `kind` on view set `name` (NULL: any).
    #[pg_extern(volatile, name = "_mm_intent_begin")]
    fn intent_begin(kind: &str, name: Option<&str>) {
        let Some(kind) = KINDS.iter().find(|k| **k == kind) else {
            pgrx::error!("_mm_intent_begin: unknown intent {kind:?}");
        };
        // SAFETY: a backend global read on the backend's thread.
        let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
        INTENTS.with_borrow_mut(|stack| {
            stack.push(Intent {
                kind,
                name: name.map(str::to_owned),
                subxact,
            })
        });
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_intent_begin(text,text) IS
  'Marks the extension''s own writes that follow (backend memory, dropped at subtransaction abort and transaction end)';"#,
        name = "comment_mm_intent_begin",
        requires = [intent_begin],
    );

    /// Ends the innermost intent, which must be of `kind`.
    #[pg_extern(volatile, name = "_mm_intent_end")]
    fn intent_end(kind: &str) {
        let popped = INTENTS.with_borrow_mut(|stack| stack.pop());
        match popped {
            Some(i) if i.kind == kind => {}
            Some(i) => pgrx::error!(
                "_mm_intent_end: innermost intent is {:?}, not {kind:?}",
                i.kind
            ),
            None => pgrx::error!("_mm_intent_end: no intent in progress"),
        }
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_intent_end(text) IS
  'Ends the innermost intent of this kind';"#,
        name = "comment_mm_intent_end",
        requires = [intent_end],
    );

    /// The innermost intent that applies to view set `name`, or NULL: a
    /// write made by a caller.
    #[pg_extern(volatile, name = "_mm_intent")]
    fn intent(name: Option<&str>) -> Option<&'static str> {
        INTENTS.with_borrow(|stack| {
            stack
                .iter()
                .rev()
                .filter(|i| i.kind != "lenient")
                .find(|i| i.name.is_none() || i.name.as_deref() == name)
                .map(|i| i.kind)
        })
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_intent(text) IS
  'The extension''s own write in progress for a view set (replace, recheck, restore, load), or NULL';"#,
        name = "comment_mm_intent",
        requires = [intent],
    );

    /// Whether an intent of `kind` is anywhere on the stack (`lenient`: a
    /// re-check further up marks broken dependents failed).
    #[pg_extern(volatile, name = "_mm_intent_held")]
    fn intent_held(kind: &str) -> bool {
        held(kind)
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_intent_held(text) IS
  'Whether an intent of this kind is anywhere on the backend''s stack (lenient: broken dependents are marked failed, not refused)';"#,
        name = "comment_mm_intent_held",
        requires = [intent_held],
    );

    /// A trigger reports `value` of `kind` (one of `REPORTS`) to the
    /// function whose statement fired it.
    #[pg_extern(volatile, name = "_mm_report")]
    fn report(kind: &str, value: &str) {
        let kind = report_kind("_mm_report", kind);
        REPORTED.with_borrow_mut(|reported| {
            reported.retain(|(k, _)| *k != kind);
            reported.push((kind, value.to_owned()));
        });
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_report(text,text) IS
  'A trigger reports what the statement''s result cannot carry (the view a replace replaced, the job a create queued, what a drop retired) to the function that ran it: backend memory no caller can write';"#,
        name = "comment_mm_report",
        requires = [report],
    );

    /// What was last reported of `kind`, forgotten once read (NULL: none).
    #[pg_extern(volatile, name = "_mm_take_report")]
    fn take_report(kind: &str) -> Option<String> {
        let kind = report_kind("_mm_take_report", kind);
        REPORTED.with_borrow_mut(|reported| {
            let at = reported.iter().position(|(k, _)| *k == kind)?;
            Some(reported.remove(at).1)
        })
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_take_report(text) IS
  'What a trigger last reported of a kind (_mm_report), forgotten once read';"#,
        name = "comment_mm_take_report",
        requires = [take_report],
    );

    /// The role running the statement outside every SECURITY DEFINER
    /// function: the login role, or the one SET ROLE chose.
    #[pg_extern(stable, name = "_mm_caller")]
    fn caller() -> String {
        // SAFETY: backend globals and a syscache lookup on the backend's thread.
        unsafe {
            let oid = pg_sys::GetOuterUserId();
            let name = pg_sys::GetUserNameFromId(oid, false);
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_caller() IS
  'The role running the statement outside any SECURITY DEFINER function (GetOuterUserId)';"#,
        name = "comment_mm_caller",
        requires = [caller],
    );

    /// Whether that role is a superuser (who alone may load dumped rows with
    /// their audit columns, as pg_restore does).
    #[pg_extern(stable, name = "_mm_caller_is_superuser")]
    fn caller_is_superuser() -> bool {
        // SAFETY: as above.
        unsafe { pg_sys::superuser_arg(pg_sys::GetOuterUserId()) }
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_caller_is_superuser() IS
  'Whether the role running the statement (outside SECURITY DEFINER functions) is a superuser';"#,
        name = "comment_mm_caller_is_superuser",
        requires = [caller_is_superuser],
    );
}
