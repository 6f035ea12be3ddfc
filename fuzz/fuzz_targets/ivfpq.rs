//! Fuzz target `ivfpq`: see `dentate_fuzz::run`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dentate_fuzz::run("ivfpq", data);
});
