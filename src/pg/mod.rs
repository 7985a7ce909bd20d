//! The thin pgrx shell: SQL-callable steps, error mapping, settings, the
//! planning thread.

mod access;
pub(crate) mod api;
mod errors;
mod jobs;
mod legacy;
pub mod settings;
mod thread;
pub mod trust;
