//! libFuzzer target; the property is `harness::cluster_state` (see fuzz/harness.rs).
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::cluster_state(data));
