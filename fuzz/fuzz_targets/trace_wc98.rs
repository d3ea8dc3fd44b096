#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| shortfirst_fuzz::trace_wc98(data));
