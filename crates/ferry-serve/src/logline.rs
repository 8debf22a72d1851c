//! Lines on stderr (the access log, audit lines, the server's complaints), each in one
//! write. `eprintln!` writes a line in pieces, a system call each (stderr is unbuffered),
//! under the lock every worker thread shares: an access line from serde_json was about a
//! hundred of them, and a worker the kernel paused meanwhile held the other one at the lock.
//! Still written before the request's task goes on: a delete's audit line is out before
//! the delete is answered, whatever kills the server after.

use std::io::Write;

/// Writes `line` and a newline to stderr in one call.
pub fn emit(line: impl std::fmt::Display) {
    let mut s = line.to_string();
    s.push('\n');
    // A log that cannot be written (stderr closed) does not stop the server.
    let _ = std::io::stderr().write_all(s.as_bytes());
}
