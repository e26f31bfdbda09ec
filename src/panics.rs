//! Damaged files must give errors, not panics. redb panics on some damaged pages (an
//! `unwrap` on an offset, an `unreachable!` page type); `catch` turns such a panic, on the
//! calling thread, into a value, and keeps the default hook from printing it meanwhile.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Set while this thread runs inside `catch`: a panic is caught, so it is not printed.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// What the caught panic said, and where.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let what = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", short(l.file()), l.line()))
                    .unwrap_or_default();
                CAUGHT.with(|c| *c.borrow_mut() = Some(format!("{what}{at}")));
            } else {
                previous(info);
            }
        }));
    });
}

/// A dependency's source path from the crate on (`redb-4.6.0/src/...`), not the registry's.
fn short(file: &str) -> &str {
    match file.find("/registry/src/") {
        Some(i) => file[i + "/registry/src/".len()..]
            .split_once('/')
            .map_or(file, |(_, rest)| rest),
        None => file,
    }
}

/// Runs `f`; a panic inside it comes back as `Err(message)` (what it said and where).
/// Only for code whose state a panic cannot leave half-changed for the caller: a store being
/// opened or read, which the caller drops on error.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let outer = CATCHING.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    result.map_err(|_| {
        CAUGHT
            .with(|c| c.borrow_mut().take())
            .unwrap_or_else(|| "unknown panic".into())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_panic_becomes_its_message() {
        let r: Result<(), String> = super::catch(|| panic!("page 7 is garbage"));
        let msg = r.unwrap_err();
        assert!(msg.starts_with("page 7 is garbage at "), "{msg}");
        assert_eq!(super::catch(|| 5), Ok(5));
    }
}
