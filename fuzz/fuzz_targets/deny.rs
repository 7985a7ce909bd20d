//! See `micromegas_views_core::properties`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        micromegas_views_core::properties::deny_rule(text);
    }
});
