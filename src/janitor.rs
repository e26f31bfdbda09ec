//! Threads for work that must not run where it arrived: the volume's slow chores that a
//! completion must not wait for (such as taking a file's data lock alone: one janitor thread,
//! jobs in order, one at a time), and requests that wait on the cache's devices (a pool, so
//! the transport's threads go back for the next request and the cache device sees the
//! application's queue depth).

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;

type Job = Box<dyn FnOnce() + Send>;

pub struct Janitor {
    queue: Arc<Queue>,
}

#[derive(Default)]
struct Queue {
    jobs: Mutex<Jobs>,
    /// Wakes one idle thread per job.
    ready: Condvar,
}

#[derive(Default)]
struct Jobs {
    waiting: VecDeque<Job>,
    /// The owner is gone: the threads end once `waiting` is empty.
    closed: bool,
}

impl Janitor {
    /// A janitor thread called `name`.
    pub fn start(name: &str) -> std::io::Result<Janitor> {
        Janitor::pool(name, 1)
    }

    /// `threads` threads called `name-N` taking jobs from one queue, in order of arrival.
    pub fn pool(name: &str, threads: usize) -> std::io::Result<Janitor> {
        // Dropped on a failed start, it ends the threads started so far.
        let janitor = Janitor {
            queue: Arc::new(Queue::default()),
        };
        for n in 0..threads {
            let queue = janitor.queue.clone();
            let name = if threads == 1 {
                name.to_string()
            } else {
                format!("{name}-{n}")
            };
            std::thread::Builder::new()
                .name(name)
                .spawn(move || queue.serve())?;
        }
        Ok(janitor)
    }

    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        self.queue.jobs.lock().waiting.push_back(Box::new(job));
        self.queue.ready.notify_one();
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        // The threads finish what is queued, then end.
        self.queue.jobs.lock().closed = true;
        self.queue.ready.notify_all();
    }
}

impl Queue {
    fn serve(&self) {
        let mut g = self.jobs.lock();
        loop {
            if let Some(job) = g.waiting.pop_front() {
                drop(g);
                // A panicking job loses its own request (its reply, dropped, says EIO), not
                // the thread and every job queued behind it.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                    log::error!("a job on {:?} panicked", std::thread::current().name());
                }
                g = self.jobs.lock();
            } else if g.closed {
                return;
            } else {
                self.ready.wait(&mut g);
            }
        }
    }
}
