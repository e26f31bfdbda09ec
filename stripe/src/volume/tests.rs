//! The volume's own tests: striping, holes, fallocate, emulation and both engines.

use super::objects::OPEN_OBJECTS;
use super::*;
use crate::device::{format, FormatOptions};

pub(super) fn volume(n: usize, stripe: u32) -> (tempfile::TempDir, Volume) {
    let root = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..n)
        .map(|i| {
            let p = root.path().join(format!("d{i}"));
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    format(&FormatOptions {
        devices: &paths,
        stripe_size: stripe,
        width: n as u32,
        force: false,
    })
    .unwrap();
    let v = Volume::open(&paths).unwrap();
    (root, v)
}

#[test]
fn striped_bytes_land_where_the_layout_says() {
    let (_root, v) = volume(4, 65536);
    let layout = Layout::new(65536, 4, 1);
    let data: Vec<u8> = (0..1 << 20).map(|i| (i / 65536) as u8).collect();
    v.write(7, &layout, 0, &data).unwrap();
    for slot in 0..4u32 {
        let dev = v.device_of_slot(&layout, slot);
        let obj = std::fs::read(v.object_path(dev, 7)).unwrap();
        assert_eq!(obj.len(), 256 * 1024);
        // Object row r of slot s holds stripe r*4+s.
        for row in 0..4usize {
            assert!(obj[row * 65536..(row + 1) * 65536]
                .iter()
                .all(|&b| b as usize == row * 4 + slot as usize));
        }
    }
    let mut back = vec![0u8; data.len()];
    v.read(7, &layout, 0, &mut back).unwrap();
    assert_eq!(back, data);
    let mut mid = vec![0u8; 100_000];
    v.read(7, &layout, 12345, &mut mid).unwrap();
    assert_eq!(&mid[..], &data[12345..112345]);
}

#[test]
fn holes_truncate_and_remove() {
    let (_root, v) = volume(3, 8192);
    let layout = Layout::new(8192, 3, 2);
    v.write(9, &layout, 100_000, b"tail").unwrap();
    let mut buf = vec![1u8; 100_004];
    v.read(9, &layout, 0, &mut buf).unwrap();
    assert!(buf[..100_000].iter().all(|&b| b == 0));
    assert_eq!(&buf[100_000..], b"tail");
    v.truncate(9, &layout, 100_001).unwrap();
    let mut buf = vec![0u8; 4];
    v.read(9, &layout, 100_000, &mut buf).unwrap();
    assert_eq!(&buf, b"t\0\0\0");
    v.remove(9).unwrap();
    assert!(v.object_info(9).is_empty());
}

#[test]
fn fallocate_and_punch() {
    let (_root, v) = volume(2, 8192);
    let layout = Layout::new(8192, 2, 0);
    v.write(3, &layout, 0, &[7u8; 40000]).unwrap();
    v.fallocate(
        3,
        &layout,
        10000,
        10000,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    let mut buf = vec![0u8; 40000];
    v.read(3, &layout, 0, &mut buf).unwrap();
    assert!(buf[..10000].iter().all(|&b| b == 7));
    assert!(buf[10000..20000].iter().all(|&b| b == 0));
    assert!(buf[20000..].iter().all(|&b| b == 7));
    v.fallocate(3, &layout, 0, 1 << 20, 0).unwrap();
    let total: u64 = v.object_info(3).iter().map(|o| o.allocated).sum();
    assert!(total >= 1 << 20);
}

#[test]
fn emulated_device_keeps_data_and_reports_its_model() {
    let (_root, mut v) = volume(2, 65536);
    v.emulate(1, DeviceModel::profile("nvme").unwrap());
    let layout = Layout::new(65536, 2, 0);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    v.write(4, &layout, 0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    v.read(4, &layout, 0, &mut back).unwrap();
    assert_eq!(back, data);
    let models = v.models();
    assert!(models[0].is_none());
    assert_eq!(models[1].unwrap().name, "nvme");
}

#[test]
fn direct_device_io_keeps_data_and_mixes_with_buffered() {
    let (_root, v) = volume(2, 8192);
    v.set_direct_io(true);
    let layout = Layout::new(8192, 2, 0);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    // Aligned pieces go direct, the unaligned tail buffered.
    v.write(6, &layout, 0, &data).unwrap();
    v.write(6, &layout, 100, b"unaligned").unwrap();
    let mut back = vec![0u8; data.len()];
    v.read(6, &layout, 0, &mut back).unwrap();
    let mut want = data.clone();
    want[100..109].copy_from_slice(b"unaligned");
    assert_eq!(back, want);
}

#[test]
fn idle_object_files_are_closed_past_the_bound() {
    let (_root, v) = volume(2, 8192);
    let layout = Layout::new(8192, 2, 0);
    for ino in 0..(OPEN_OBJECTS as u64 + 100) {
        v.write(ino, &layout, 0, b"x").unwrap();
    }
    assert!(v.open.len() <= OPEN_OBJECTS + 1, "{}", v.open.len());
    let mut b = [0u8; 1];
    v.read(5, &layout, 0, &mut b).unwrap();
    assert_eq!(&b, b"x");
}

#[test]
fn migrate_copies_into_a_new_layout() {
    let (_root, v) = volume(3, 8192);
    let from = Layout::new(8192, 3, 0);
    let to = Layout::new(131072, 2, 1);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    v.write(5, &from, 0, &data).unwrap();
    v.copy_to(5, &from, data.len() as u64, 1000, &to, &mut |_| true)
        .unwrap();
    let mut back = vec![0u8; data.len()];
    v.read(1000, &to, 0, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(v.object_info(1000).len(), 2);
}

fn engines() -> [EngineChoice; 2] {
    [EngineChoice::Uring, EngineChoice::Threads]
}

/// A thread others wait for (a FUSE ring thread with requests queued) hands even a lone
/// request on an idle engine to the engine; alone, it does the I/O itself.
#[test]
fn a_thread_others_wait_for_never_does_device_io_itself() {
    for choice in engines() {
        let (root, v) = volume(1, 65536);
        if devices::ram_backed(root.path()) {
            return; // buffered I/O of memory runs on the caller anyway
        }
        v.start_engine(choice, 2).unwrap();
        let layout = Layout::new(65536, 1, 0);
        v.write(3, &layout, 0, &[5u8; 8192]).unwrap();
        let here = std::thread::current().id();
        for waiting in [false, true] {
            crate::engine::other_requests_wait_for_this_thread(waiting);
            // On a loaded machine the engine's threads may not have let go of the last
            // op yet: the first case is about an idle engine, so wait until it is one.
            let since = std::time::Instant::now();
            while !waiting && !v.idle() && since.elapsed().as_secs() < 5 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let (tx, rx) = std::sync::mpsc::channel();
            v.read_async(3, &layout, 0, 4096, move |r| {
                tx.send((std::thread::current().id(), r.map(|b| b[0]).ok()))
                    .unwrap()
            });
            let (on, byte) = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
            assert_eq!(byte, Some(5));
            // io_uring may complete a cached read at once, reaped by the submitter without
            // waiting; the threads engine never runs a handed-off op on it.
            // (Handed off, the request's end may still run here: the submitter holds the
            // request open until all its pieces are out, and a fast worker can finish
            // first; only the lone case is certain.)
            if choice == EngineChoice::Threads && !waiting {
                assert!(
                    on == here,
                    "a lone request on an idle engine was handed off"
                );
            }
            // What the write path asks before writing on this thread.
            assert_eq!(v.idle(), !waiting, "{choice:?}, others waiting: {waiting}");
        }
        crate::engine::other_requests_wait_for_this_thread(false);
    }
}

#[test]
fn both_engines_keep_many_requests_in_flight_and_their_data() {
    for choice in engines() {
        let (_root, v) = volume(4, 8192);
        assert_eq!(
            v.start_engine(choice, 2).unwrap().name(),
            format!("{choice:?}").to_lowercase()
        );
        let v = Arc::new(v);
        let layout = Layout::new(8192, 4, 1);
        let chunk = 24_576 + 100; // crosses stripes and devices, not block-aligned
        let (tx, rx) = std::sync::mpsc::channel();
        for k in 0..64u64 {
            let data: Vec<u8> = (0..chunk).map(|i| (i as u64 * 7 + k) as u8).collect();
            let tx = tx.clone();
            v.write_async(
                7,
                &layout,
                k * chunk as u64,
                IoBuf::copy_of(&data),
                move |r| tx.send(r.is_ok()).unwrap(),
            );
        }
        assert!(
            (0..64).all(|_| rx.recv().unwrap()),
            "{choice:?}: every write"
        );
        for k in 0..64u64 {
            let tx = tx.clone();
            v.read_async(7, &layout, k * chunk as u64, chunk, move |r| {
                let ok = r.is_ok_and(|b| {
                    b.iter()
                        .enumerate()
                        .all(|(i, &x)| x == (i as u64 * 7 + k) as u8)
                });
                tx.send(ok).unwrap()
            });
        }
        assert!(
            (0..64).all(|_| rx.recv().unwrap()),
            "{choice:?}: every read"
        );
    }
}

#[test]
fn a_flood_of_requests_waits_for_room_and_every_one_completes() {
    for choice in engines() {
        let (_root, v) = volume(2, 8192);
        v.start_engine(choice, 1).unwrap();
        let layout = Layout::new(8192, 2, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        // Far more than the engine keeps in flight: submitters wait, none is lost.
        for k in 0..1500u64 {
            let tx = tx.clone();
            v.write_async(
                9,
                &layout,
                k * 4096,
                IoBuf::copy_of(&[k as u8; 4096]),
                move |r| tx.send(r.is_ok()).unwrap(),
            );
        }
        assert!((0..1500).all(|_| rx.recv().unwrap()), "{choice:?}");
        assert!(v.idle());
        let mut back = vec![0u8; 4096];
        v.read(9, &layout, 1499 * 4096, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == (1499u64 as u8)));
    }
}

#[test]
fn reads_past_an_object_end_are_zeros_with_direct_io_too() {
    for choice in engines() {
        let (_root, v) = volume(2, 65536);
        v.start_engine(choice, 1).unwrap();
        v.set_direct_io(true);
        let layout = Layout::new(65536, 2, 0);
        v.write(3, &layout, 0, &[5u8; 5000]).unwrap();
        // Stale pool buffers must not show through: dirty one first.
        drop(IoBuf::copy_of(&vec![0xEE; 1 << 20]));
        let (tx, rx) = std::sync::mpsc::channel();
        v.read_async(3, &layout, 0, 1 << 20, move |r| tx.send(r).unwrap());
        let b = rx.recv().unwrap().unwrap();
        assert!(b[..5000].iter().all(|&x| x == 5), "{choice:?}");
        assert!(
            b[5000..].iter().all(|&x| x == 0),
            "{choice:?}: holes read as zeros"
        );
    }
}

#[test]
fn an_emulated_device_holds_the_completion_not_the_caller() {
    for choice in engines() {
        let (_root, mut v) = volume(1, 65536);
        let slow = DeviceModel {
            name: "custom".into(),
            read_bps: 1e9,
            write_bps: 1e9,
            access: std::time::Duration::from_millis(300),
            queue: 1,
            read_iops: None,
            write_iops: None,
            spindle: None,
        };
        v.emulate(0, slow);
        v.start_engine(choice, 1).unwrap();
        let layout = Layout::new(65536, 1, 0);
        v.write(1, &layout, 0, &[1u8; 4096]).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let d = done.clone();
        v.read_async(1, &layout, 0, 4096, move |r| {
            d.store(true, Relaxed);
            tx.send(r.is_ok()).unwrap()
        });
        // The call returned; the device's 300 ms access has not passed yet, and the
        // device is busy until then: the next request does not run on its submitter.
        assert!(!done.load(Relaxed), "{choice:?}");
        assert!(!v.idle(), "{choice:?}: idle with an emulated I/O pending");
        assert!(rx.recv().unwrap());
    }
}
