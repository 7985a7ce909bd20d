//! See `micromegas_views_core::properties::validate_any`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&selector, rest)) = data.split_first() {
        if let Ok(query) = std::str::from_utf8(rest) {
            micromegas_views_core::properties::validate_any(selector, query);
        }
    }
});
