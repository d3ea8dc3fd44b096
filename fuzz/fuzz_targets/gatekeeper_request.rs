#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| shortfirst_fuzz::gatekeeper_request(data));
