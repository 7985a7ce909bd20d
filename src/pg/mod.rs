//! The thin pgrx shell: SQL-callable steps, error mapping, settings, the
//! helper process that runs core work.

mod access;
pub(crate) mod api;
mod errors;
mod jobs;
mod legacy;
pub mod settings;
pub(crate) mod helper;
pub mod trust;
