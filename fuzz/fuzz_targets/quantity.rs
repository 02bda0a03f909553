//! libFuzzer target; the property is `harness::quantity` (see fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::quantity(data));
