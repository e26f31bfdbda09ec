//! The portable engine: a fixed pool of I/O threads per device, each taking ops from its
//! device's queue and running them with blocking preadv/pwritev. For kernels or sandboxes
//! without io_uring (seccomp, `io_uring_disabled`).

use super::{run_blocking, timer::Timer, DevOp};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

#[derive(Default)]
struct DeviceQueue {
    ops: Mutex<(VecDeque<Box<DevOp>>, bool)>,
    ready: Condvar,
}

pub(crate) struct Threads {
    /// One queue per device; a device joining the volume gets its own.
    queues: RwLock<Vec<Arc<DeviceQueue>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    per_device: usize,
    timer: Arc<Timer>,
}

impl Threads {
    pub fn start(devices: usize, per_device: usize, timer: Arc<Timer>) -> io::Result<Threads> {
        let t = Threads {
            queues: RwLock::default(),
            threads: Mutex::default(),
            per_device: per_device.max(1),
            timer,
        };
        t.ensure_devices(devices)?;
        Ok(t)
    }

    /// A queue and its threads for each device up to `count` that has none yet. The queue
    /// is in place before its threads: one that cannot start leaves it served by fewer.
    pub fn ensure_devices(&self, count: usize) -> io::Result<()> {
        let mut queues = self.queues.write();
        while queues.len() < count {
            let (dev, q) = (queues.len(), Arc::<DeviceQueue>::default());
            queues.push(q.clone());
            for i in 0..self.per_device {
                let (q, timer) = (q.clone(), self.timer.clone());
                let thread = std::thread::Builder::new()
                    .name(format!("stripefs-io{dev}.{i}"))
                    .spawn(move || {
                        super::this_is_an_engine_thread();
                        work(&q, &timer)
                    })?;
                self.threads.lock().push(thread);
            }
        }
        Ok(())
    }

    pub fn submit(&self, ops: Vec<Box<DevOp>>) {
        let queues = self.queues.read();
        for op in ops {
            let q = &queues[op.device];
            q.ops.lock().0.push_back(op);
            q.ready.notify_one();
        }
    }

    pub fn stop(&mut self) {
        for q in self.queues.read().iter() {
            q.ops.lock().1 = true;
            q.ready.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

fn work(q: &DeviceQueue, timer: &Timer) {
    loop {
        let op = {
            let mut g = q.ops.lock();
            loop {
                if let Some(op) = g.0.pop_front() {
                    break op;
                }
                if g.1 {
                    return;
                }
                q.ready.wait(&mut g);
            }
        };
        run_blocking(timer, op);
    }
}
