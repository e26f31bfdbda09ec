//! Device I/O on a ring lent by the submitting thread (a FUSE-over-io_uring ring thread):
//! here a real io_uring that the test reaps itself, as a ring thread would between requests.

use super::tests::volume;
use super::*;
use crate::engine::lent::{lend_ring, LentRing};
use io_uring::{squeue, IoUring};
use std::cell::Cell;
use std::time::{Duration, Instant};

struct TestRing {
    ring: IoUring,
    pushed: Cell<usize>,
}

impl LentRing for TestRing {
    unsafe fn push(&self, sqe: squeue::Entry, user_data: u64) -> io::Result<()> {
        let sqe = sqe.user_data(user_data);
        // SAFETY: only this thread touches the ring; the engine keeps the op alive.
        if unsafe { self.ring.submission_shared().push(&sqe) }.is_err() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.pushed.set(self.pushed.get() + 1);
        Ok(())
    }

    fn submit(&self) {
        self.ring.submit().unwrap();
    }
}

impl TestRing {
    /// Submits what was pushed and hands completions back, as the ring thread does, until
    /// `done` says so (bounded: a lost completion fails the test instead of hanging it).
    fn run_until(&self, v: &Volume, done: impl Fn() -> bool) {
        let since = Instant::now();
        while !done() {
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "completions lost"
            );
            self.ring.submit().unwrap();
            // SAFETY: only this thread reads the completion queue.
            let cqes: Vec<(u64, i32)> = unsafe { self.ring.completion_shared() }
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (user_data, result) in cqes {
                // SAFETY: every SQE on this ring was queued by the volume's engine.
                lend_ring(self, || unsafe { v.complete_lent(user_data, result) });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Reads and writes nobody waits for go on the lent ring and finish from its completions;
/// a read the submitter waits for goes to the engine's own ring (on the lent one it would
/// wait forever); the threads engine never uses a lent ring.
#[test]
fn async_io_goes_on_the_lent_ring_and_waited_io_never_does() {
    for choice in [EngineChoice::Uring, EngineChoice::Threads] {
        let (root, v) = volume(4, 8192);
        if devices::ram_backed(root.path()) {
            return; // I/O of memory-backed devices runs on the submitter
        }
        if v.start_engine(choice, 2).is_err() {
            assert_eq!(
                choice,
                EngineChoice::Uring,
                "the threads engine always starts"
            );
            continue; // no io_uring in this sandbox
        }
        let Ok(ring) = IoUring::new(64) else {
            return;
        };
        let ring = TestRing {
            ring,
            pushed: Cell::new(0),
        };
        let layout = Layout::new(8192, 4, 0);
        let data: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        v.write(7, &layout, 0, &data).unwrap();
        // As a ring thread with requests queued: nothing runs inline.
        crate::engine::other_requests_wait_for_this_thread(true);
        let read: Arc<Mutex<Option<Result<IoBuf>>>> = Arc::default();
        let wrote = Arc::new(AtomicUsize::new(0));
        let (r, w) = (read.clone(), wrote.clone());
        lend_ring(&ring, || {
            v.read_async(7, &layout, 0, data.len(), move |res| *r.lock() = Some(res));
            let mut b = vec![0u8; 8192];
            v.read(7, &layout, 8192, &mut b).unwrap();
            assert_eq!(b, data[8192..16384]);
            let new = IoBuf::copy_of(&[9u8; 16384]);
            v.write_async(7, &layout, 65536, new, move |r| {
                r.unwrap();
                w.fetch_add(1, Relaxed);
            });
        });
        crate::engine::other_requests_wait_for_this_thread(false);
        match choice {
            EngineChoice::Uring => {
                // 4 reads (one per device) and 2 writes (16K over 8K stripes), submitted
                // at once rather than with the ring thread's next batch.
                assert_eq!(ring.pushed.get(), 6);
                // SAFETY: only this thread touches the ring.
                assert!(unsafe { ring.ring.submission_shared() }.is_empty());
                assert!(
                    read.lock().is_none(),
                    "done before its completion was handed back"
                );
                ring.run_until(&v, || wrote.load(Relaxed) == 1 && read.lock().is_some());
            }
            _ => {
                assert_eq!(ring.pushed.get(), 0);
                let since = Instant::now();
                while (wrote.load(Relaxed) == 0 || read.lock().is_none())
                    && since.elapsed() < Duration::from_secs(20)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let got = read.lock().take().expect("the read finished").unwrap();
        assert_eq!(&got[..], &data[..]);
        let mut back = vec![0u8; 16384];
        v.read(7, &layout, 65536, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 9), "{choice:?}");
        // Every op left the engine's count.
        let since = Instant::now();
        while !v.idle() && since.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(v.idle(), "{choice:?}");
    }
}

/// A lone answer held back for an emulated device waits on the lent ring as a timeout and runs
/// on the thread that lent it, not before its deadline; one held while another is, or with no
/// ring lent, waits on the timer thread.
#[test]
fn a_held_back_answer_waits_on_the_lent_ring_and_runs_on_its_thread() {
    let (_root, v) = volume(1, 8192);
    v.start_engine(EngineChoice::Threads, 1).unwrap();
    let Ok(ring) = IoUring::new(8) else {
        return; // no io_uring in this sandbox
    };
    let ring = TestRing {
        ring,
        pushed: Cell::new(0),
    };
    type Ran = Arc<Mutex<Option<(std::thread::ThreadId, Instant)>>>;
    let record = |ran: &Ran| {
        let ran = ran.clone();
        move || *ran.lock() = Some((std::thread::current().id(), Instant::now()))
    };
    let here = std::thread::current().id();

    let (lone, second) = (Ran::default(), Ran::default());
    let at = Instant::now() + Duration::from_millis(30);
    lend_ring(&ring, || {
        v.run_at(at, record(&lone));
        v.run_at(at, record(&second));
    });
    assert_eq!(
        ring.pushed.get(),
        1,
        "the lone one is a timeout on the lent ring"
    );
    assert!(
        lone.lock().is_none(),
        "ran before its completion was handed back"
    );
    ring.run_until(&v, || lone.lock().is_some() && second.lock().is_some());
    let (thread, when) = lone.lock().take().unwrap();
    assert_eq!(thread, here);
    assert!(when >= at, "ran {:?} early", at - when);
    let (thread, when) = second.lock().take().unwrap();
    assert_ne!(thread, here, "the timer thread runs the second");
    assert!(when >= at);

    let ran = Ran::default();
    let at = Instant::now() + Duration::from_millis(10);
    v.run_at(at, record(&ran));
    let since = Instant::now();
    while ran.lock().is_none() && since.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (thread, when) = ran.lock().take().expect("the timer ran it");
    assert_ne!(thread, here);
    assert!(when >= at);
    assert_eq!(ring.pushed.get(), 1);

    // Once the lone one is done, the next lone one goes to the ring again.
    let ran = Ran::default();
    lend_ring(&ring, || v.run_at(Instant::now(), record(&ran)));
    assert_eq!(ring.pushed.get(), 2);
    ring.run_until(&v, || ran.lock().is_some());
    assert_eq!(ran.lock().unwrap().0, here);

    // Other requests waiting for this thread: the timer takes it, the ring stays free.
    let ran = Ran::default();
    crate::engine::other_requests_wait_for_this_thread(true);
    lend_ring(&ring, || v.run_at(Instant::now(), record(&ran)));
    crate::engine::other_requests_wait_for_this_thread(false);
    assert_eq!(ring.pushed.get(), 2);
    let since = Instant::now();
    while ran.lock().is_none() && since.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_ne!(ran.lock().expect("the timer ran it").0, here);
}
