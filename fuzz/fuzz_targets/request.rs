//! A client's byte stream through the broker's request decode path.
#![no_main]

// Each target uses part of the shared file.
#[allow(dead_code)]
#[path = "../../gateway/tests/fuzz_decode/targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::request_stream(data);
});
