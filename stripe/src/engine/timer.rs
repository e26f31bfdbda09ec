//! Completions held back until an emulated device would have finished them: one thread for the
//! volume sleeps until the earliest deadline, so a slow emulated device holds no I/O thread.

use parking_lot::{Condvar, Mutex};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::io;
use std::time::Instant;

pub(crate) type Job = Box<dyn FnOnce() + Send>;

struct Due {
    at: Instant,
    seq: u64,
    job: Job,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    // The earliest deadline on top of the max-heap.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Queue {
    due: BinaryHeap<Due>,
    seq: u64,
    stop: bool,
}

pub(crate) struct Timer {
    queue: std::sync::Arc<(Mutex<Queue>, Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Timer {
    pub fn start() -> io::Result<Timer> {
        let queue = std::sync::Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let q = queue.clone();
        let thread = std::thread::Builder::new()
            .name("stripefs-timer".into())
            .spawn(move || {
                super::this_is_an_engine_thread();
                // Deadlines are an emulated device's (tens of microseconds for an SSD): the
                // kernel's default 50 us of slack would add more than the wait itself.
                // SAFETY: prctl with an integer argument, for this thread only.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64) };
                run(&q.0, &q.1)
            })?;
        Ok(Timer {
            queue,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Runs `job` on the timer thread at `at`.
    pub fn at(&self, at: Instant, job: Job) {
        let (lock, cv) = &*self.queue;
        let mut q = lock.lock();
        q.seq += 1;
        let seq = q.seq;
        let earliest = q.due.peek().is_none_or(|d| at < d.at);
        q.due.push(Due { at, seq, job });
        if earliest {
            cv.notify_one();
        }
    }

    /// Nothing is waiting for its time.
    pub fn idle(&self) -> bool {
        self.queue.0.lock().due.is_empty()
    }

    /// Runs what is still due at once, then ends the thread.
    pub fn stop(&self) {
        self.queue.0.lock().stop = true;
        self.queue.1.notify_one();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn run(lock: &Mutex<Queue>, cv: &Condvar) {
    let mut q = lock.lock();
    loop {
        let now = Instant::now();
        match q.due.peek() {
            Some(d) if d.at <= now || q.stop => {
                let d = q.due.pop().expect("peeked");
                drop(q);
                // The timer serves every emulated completion and deferred answer: a job that
                // panics costs its own request, not the thread.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(d.job)).is_err() {
                    log::error!("a timed job panicked; the timer goes on");
                }
                q = lock.lock();
            }
            Some(d) => {
                let at = d.at;
                cv.wait_until(&mut q, at);
            }
            None if q.stop => return,
            None => cv.wait(&mut q),
        }
    }
}
