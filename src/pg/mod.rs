//! The thin pgrx shell: SQL-callable steps, error mapping, the planning thread.

mod api;
mod errors;
mod thread;
