//! A lone request over several devices runs on its submitter's own io_uring: its pieces go
//! out together and its end runs on that thread before the call returns.

use super::tests::volume;
use super::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Waits (bounded) until every op the volume started has left the engine's count.
fn settle(v: &Volume) {
    let since = Instant::now();
    while !v.idle() && since.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(v.idle(), "ops left in flight");
}

#[test]
fn a_lone_request_over_several_devices_ends_on_its_submitter() {
    let (root, v) = volume(4, 8192);
    if devices::ram_backed(root.path()) {
        return; // I/O of memory-backed devices runs on the submitter anyway
    }
    if v.start_engine(EngineChoice::Uring, 2).is_err() {
        return; // no io_uring in this sandbox
    }
    let v = Arc::new(v);
    let layout = Layout::new(8192, 4, 0);
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 253) as u8).collect();
    let here = std::thread::current().id();
    settle(&v);
    let (tx, rx) = mpsc::channel();
    v.write_async(7, &layout, 0, IoBuf::copy_of(&data), move |r| {
        tx.send((std::thread::current().id(), r.is_ok())).unwrap()
    });
    assert_eq!(
        rx.try_recv().ok(),
        Some((here, true)),
        "the write ended here"
    );

    // A request submitted from the end of a lone one (its ring back in its cell by then:
    // the submitter's token of the request is let go after the pieces) runs and ends too.
    settle(&v);
    let (tx, rx) = mpsc::channel();
    let (v2, tx2) = (v.clone(), tx.clone());
    v.read_async(7, &layout, 0, data.len(), move |r| {
        tx.send(r.map(|b| b.to_vec()).ok()).unwrap();
        v2.read_async(7, &layout, 8192, 32768, move |r| {
            tx2.send(r.map(|b| b.to_vec()).ok()).unwrap()
        });
    });
    let first = rx.try_recv().expect("the read ended here");
    assert_eq!(first.as_deref(), Some(&data[..]));
    let nested = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(nested.as_deref(), Some(&data[8192..40960]));
    settle(&v);

    // Others waiting for this thread: the pieces are handed to the engine.
    crate::engine::other_requests_wait_for_this_thread(true);
    let (tx, rx) = mpsc::channel();
    v.read_async(7, &layout, 0, data.len(), move |r| {
        tx.send(r.map(|b| b.to_vec()).ok()).unwrap()
    });
    crate::engine::other_requests_wait_for_this_thread(false);
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got.as_deref(), Some(&data[..]));
    settle(&v);
}
