//! Fuzz target `locomo`: see `dentate_fuzz::run`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dentate_fuzz::run("locomo", data);
});
