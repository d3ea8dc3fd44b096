#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| shortfirst_fuzz::tls_names(data));
