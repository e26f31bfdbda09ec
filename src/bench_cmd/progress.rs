//! Progress bars and Ctrl-C, shared by everything one bench command measures.

use crate::error::{Error, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Progress and Ctrl-C, shared by everything one command measures.
pub(super) struct Ctx {
    /// The whole run: tests done of all, with its ETA.
    pub(super) bar: ProgressBar,
    /// The test in progress: its time elapsed of its duration, with its ETA.
    pub(super) test: ProgressBar,
    pub(super) stop: Arc<AtomicBool>,
    /// Ends the thread that moves `test` along.
    pub(super) ticker: Arc<AtomicBool>,
    /// A counted test is running (it counts as done when the next starts, or at the end).
    pub(super) running: std::cell::Cell<bool>,
}

impl Ctx {
    /// `total` tests, each running `test_duration`. Bars only when stderr is a terminal.
    pub(super) fn new(total: u64, test_duration: std::time::Duration) -> Result<Ctx> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, stop.clone())
                .map_err(|e| Error::Usage(format!("cannot watch signals: {e}")))?;
        }
        let shown = std::io::stderr().is_terminal();
        let multi = MultiProgress::with_draw_target(if shown {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        let style = |t: &str| {
            ProgressStyle::with_template(t)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ")
        };
        let bar = multi.add(ProgressBar::new(total));
        bar.set_style(style(
            "all   {elapsed_precise} [{bar:30}] {pos}/{len} tests done, ETA {eta_precise}",
        ));
        let test = multi.add(ProgressBar::new(test_duration.as_millis().max(1) as u64));
        test.set_style(style("test  {prefix:>8} left [{bar:30}] {wide_msg}"));
        let ticker = Arc::new(AtomicBool::new(false));
        if shown {
            let (test, ticker) = (test.clone(), ticker.clone());
            std::thread::spawn(move || {
                while !ticker.load(Ordering::Relaxed) {
                    // Time left of a test of fixed duration: its own clock, not an estimate.
                    let done = test.elapsed().as_millis() as u64;
                    let left = test.length().unwrap_or(0).saturating_sub(done);
                    test.set_position(done);
                    test.set_prefix(format!("{:.1}s", left as f64 / 1000.0));
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            });
        }
        Ok(Ctx {
            bar,
            test,
            stop,
            ticker,
            running: std::cell::Cell::new(false),
        })
    }

    /// A test starts; `counts` when it is one of the total (not a fio cross-check).
    pub(super) fn start_test(&self, what: &str, counts: bool) {
        if self.running.replace(counts) {
            self.bar.inc(1);
        }
        self.test.reset();
        self.test.set_prefix(format!(
            "{:.1}s",
            self.test.length().unwrap_or(0) as f64 / 1000.0
        ));
        self.test.set_message(what.to_string());
    }

    pub(super) fn end_test(&self) {
        if self.running.replace(false) && !self.stop.load(Ordering::Relaxed) {
            self.bar.inc(1);
        }
        self.test.set_message(String::new());
    }

    pub(super) fn finish(&self) {
        self.end_test();
        self.ticker.store(true, Ordering::Relaxed);
        self.test.finish_and_clear();
        self.bar.finish_and_clear();
    }
}
