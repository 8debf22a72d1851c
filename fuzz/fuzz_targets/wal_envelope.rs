#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::run("wal_envelope", data));
