//! See `micromegas_views_core::properties`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    micromegas_views_core::properties::fuzzing_panic_hook();
    micromegas_views_core::properties::schema_ipc_bytes(data);
});
