//! What the interposer tells: one line on stderr for what the application must know,
//! and the optional log file (`TESSERA_CUDA_LOG`) for the rest. Its own file so that
//! every part of the interposer can report without depending on the process state.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// The log file, once the settings named one (or none).
static FILE: OnceLock<Mutex<Option<std::fs::File>>> = OnceLock::new();

/// Log to `file` from now on (the first call wins: the settings are read once).
pub(crate) fn open(file: Option<std::fs::File>) {
    let _ = FILE.set(Mutex::new(file));
}

/// Append a line to the log file, if one was asked for.
pub fn line(line: std::fmt::Arguments<'_>) {
    if let Some(f) = FILE.get()
        && let Ok(mut guard) = f.lock()
        && let Some(f) = guard.as_mut()
    {
        let _ = writeln!(f, "{line}");
    }
}

/// [`line`], once per process for `flag`: for conditions every later call would repeat.
pub(crate) fn line_once(flag: &AtomicBool, line: std::fmt::Arguments<'_>) {
    if !flag.swap(true, Ordering::Relaxed) {
        self::line(line);
    }
}

/// One line on stderr, prefixed, for what the application must be told.
pub fn complain(message: &str) {
    let _ = writeln!(std::io::stderr(), "tessera: {message}");
}

/// [`complain`], once per process: for conditions every later call would repeat.
pub(crate) fn complain_once(flag: &AtomicBool, message: &str) {
    if !flag.swap(true, Ordering::Relaxed) {
        complain(message);
    }
}
