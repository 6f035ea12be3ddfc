//! Helpers shared by the CLI's integration tests: the `dentate` binary and
//! running it to success.
// Each test binary includes this module and uses part of it.
#![allow(dead_code)]

use std::process::Command;

/// The `dentate` binary built for these tests.
pub fn dentate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dentate"))
}

/// Runs `cmd`, requires success and returns `(stdout, stderr)`.
pub fn run_ok_with_stderr(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().expect("run dentate");
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// Runs `cmd`, requires success and returns its stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    run_ok_with_stderr(cmd).0
}
