//! The portable engine: a fixed pool of I/O threads per device, each taking ops from its
//! device's queue and running them with blocking preadv/pwritev. For kernels or sandboxes
//! without io_uring (seccomp, `io_uring_disabled`).

use super::{run_blocking, timer::Timer, DevOp};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

#[derive(Default)]
struct DeviceQueue {
    ops: Mutex<(VecDeque<Box<DevOp>>, bool)>,
    ready: Condvar,
}

pub(crate) struct Threads {
    queues: Vec<Arc<DeviceQueue>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Threads {
    pub fn start(devices: usize, per_device: usize, timer: Arc<Timer>) -> io::Result<Threads> {
        let queues: Vec<Arc<DeviceQueue>> = (0..devices).map(|_| Arc::default()).collect();
        let mut threads = Vec::new();
        for (dev, q) in queues.iter().enumerate() {
            for i in 0..per_device.max(1) {
                let (q, timer) = (q.clone(), timer.clone());
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("stripefs-io{dev}.{i}"))
                        .spawn(move || work(&q, &timer))?,
                );
            }
        }
        Ok(Threads { queues, threads })
    }

    pub fn submit(&self, ops: Vec<Box<DevOp>>) {
        for op in ops {
            let q = &self.queues[op.device];
            q.ops.lock().0.push_back(op);
            q.ready.notify_one();
        }
    }

    pub fn stop(&mut self) {
        for q in &self.queues {
            q.ops.lock().1 = true;
            q.ready.notify_all();
        }
        for t in self.threads.drain(..) {
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
