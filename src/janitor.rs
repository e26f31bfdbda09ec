//! One thread for the volume's slow chores that a completion must not wait for (such as taking
//! a file's data lock alone): jobs run in order, one at a time.

use std::sync::mpsc::{channel, Sender};

type Job = Box<dyn FnOnce() + Send>;

pub struct Janitor {
    jobs: Sender<Job>,
}

impl Janitor {
    /// A janitor thread called `name`.
    pub fn start(name: &str) -> std::io::Result<Janitor> {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })?;
        Ok(Janitor { jobs: tx })
    }

    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        // The thread lives as long as the sender: a send cannot fail while we exist.
        let _ = self.jobs.send(Box::new(job));
    }
}
