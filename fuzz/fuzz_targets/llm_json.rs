//! Fuzz target `llm_json`: see `dentate_fuzz::run`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dentate_fuzz::run("llm_json", data);
});
