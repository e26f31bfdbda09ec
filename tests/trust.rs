//! Acknowledged data across crashes and cache mishaps: a truncate never leaves a mix, writes
//! past what the devices can hold are refused up front, and a cache file that holds data the
//! devices lack is never lost, replaced or served stale without the user saying so.

mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// A write-back cache file on its own "SSD" directory, with a cleaner that never runs on its
/// own (dirty lines stay until fsync makes them durable in the cache, or unmount).
fn file_cache(v: &TestVolume) -> (PathBuf, String) {
    let ssd = v.root.path().join("ssd");
    fs::create_dir_all(&ssd).unwrap();
    let section = format!(
        "[cache]\nstore = \"file\"\npath = \"{}\"\nsize = \"4M\"\nline_size = \"16K\"\nmode = \"wb\"\n\
         [cache.cleaner]\nstaleness = \"1h\"\n",
        ssd.display()
    );
    (ssd.join("stripefs.cache"), section)
}

/// The volume's config as mkfs made it, plus `extra`.
fn set_config(v: &TestVolume, base: &str, extra: &str) {
    fs::write(&v.config, format!("{base}{extra}")).unwrap();
}

/// A mount that must fail; returns its message.
fn mount_refused(v: &mut TestVolume, extra: &[&str]) -> String {
    let mut args = vec!["mount", v.cfg(), v.mnt_str()];
    args.extend_from_slice(extra);
    let out = stripefs(&args);
    if out.status.success() {
        v.umount_on_drop();
        panic!("mount {extra:?} was not refused");
    }
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Writes `data` to `rel` and fsyncs it.
fn write_synced(v: &TestVolume, rel: &str, data: &[u8]) {
    let f = File::create(v.path(rel)).unwrap();
    f.write_all_at(data, 0).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_truncate_then_a_crash_shows_the_old_or_the_new_file_never_a_mix() {
    for cached in [false, true] {
        let mut v = TestVolume::new(3, "16K", "");
        let base = fs::read_to_string(&v.config).unwrap();
        if cached {
            set_config(&v, &base, &file_cache(&v).1);
        }
        v.mount();
        let data = Rng::new(7).bytes(1 << 20);
        write_synced(&v, "f", &data);
        let cut = 100_003;
        OpenOptions::new()
            .write(true)
            .open(v.path("f"))
            .unwrap()
            .set_len(cut)
            .unwrap();
        // Acknowledged by fsync, the other file's cut is the only state allowed.
        write_synced(&v, "g", &data);
        let g = OpenOptions::new().write(true).open(v.path("g")).unwrap();
        g.set_len(cut).unwrap();
        g.sync_all().unwrap();
        v.crash();
        v.mount();
        assert_eq!(
            fs::read(v.path("g")).unwrap(),
            data[..cut as usize],
            "cached={cached}: an fsync'd truncate"
        );
        let now = fs::read(v.path("f")).unwrap();
        match now.len() as u64 {
            n if n == cut => assert_eq!(now, data[..cut as usize], "cached={cached}: new size"),
            n if n == data.len() as u64 => assert_eq!(now, data, "cached={cached}: old size"),
            n => panic!("cached={cached}: size {n} is neither the old nor the new one"),
        }
        // Grown again, the bytes past the cut read as zeros.
        let f = OpenOptions::new().write(true).open(v.path("f")).unwrap();
        f.set_len(1 << 20).unwrap();
        drop(f);
        let grown = fs::read(v.path("f")).unwrap();
        if now.len() as u64 == cut {
            assert!(
                grown[cut as usize..].iter().all(|&b| b == 0),
                "cached={cached}"
            );
        }
        v.umount();
        v.assert_fsck_clean("after a truncate and a crash");
    }
}

#[test]
fn writes_past_the_largest_file_are_refused_and_never_brick_the_volume() {
    let mut v = TestVolume::new(2, "64K", "");
    let base = fs::read_to_string(&v.config).unwrap();
    set_config(&v, &base, &file_cache(&v).1);
    v.mount();
    let f = File::create(v.path("huge")).unwrap();
    // The devices are ext4 here: 16 TiB per object, so about 32 TiB for a 2-wide file.
    let far = 1u64 << 62;
    let e = f.write_all_at(b"x", far).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "write at 2^62: {e}");
    let e = f.set_len(far).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "truncate to 2^62: {e}");
    // SAFETY: plain syscall on an open file.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, far as i64, 4096) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EFBIG)
    );
    // Far, but within what the devices hold: written, written back, read back.
    let tib = 1u64 << 40;
    f.write_all_at(b"far away", tib).unwrap();
    f.sync_all().unwrap();
    drop(f);
    v.crash();
    v.mount();
    let mut buf = [0u8; 8];
    File::open(v.path("huge"))
        .unwrap()
        .read_exact_at(&mut buf, tib)
        .unwrap();
    assert_eq!(&buf, b"far away");
    fs::remove_file(v.path("huge")).unwrap();
    v.remount();
}

#[test]
fn a_cache_file_holding_unwritten_data_must_be_there_at_mount() {
    let mut v = TestVolume::new(2, "16K", "");
    let base = fs::read_to_string(&v.config).unwrap();
    let (cache_file, section) = file_cache(&v);
    set_config(&v, &base, &section);
    v.mount();
    let data = Rng::new(3).bytes(300_000);
    write_synced(&v, "kept", &data);
    v.crash();

    // The SSD is not mounted yet: the cache file is missing.
    let away = v.root.path().join("cache.away");
    fs::rename(&cache_file, &away).unwrap();
    let msg = mount_refused(&mut v, &[]);
    assert!(
        msg.contains(&cache_file.display().to_string()) && msg.contains("missing"),
        "{msg}"
    );
    assert!(!cache_file.exists(), "no empty cache made in its place");
    // Another cache file in its place is not the one.
    fs::write(&cache_file, b"").unwrap();
    let msg = mount_refused(&mut v, &[]);
    assert!(msg.contains("not a stripefs cache file"), "{msg}");
    fs::remove_file(&cache_file).unwrap();
    // Nor may the volume be mounted without its cache.
    set_config(&v, &base, "");
    let msg = mount_refused(&mut v, &[]);
    assert!(msg.contains("not yet written"), "{msg}");
    set_config(&v, &base, &section);
    // --cache-reset alone would drop it: refused, and it says what would be lost.
    fs::rename(&away, &cache_file).unwrap();
    let msg = mount_refused(&mut v, &["--cache-reset"]);
    assert!(
        msg.contains("--discard-dirty") && msg.contains("LOST"),
        "{msg}"
    );
    // Back in place: everything acknowledged is there.
    v.mount();
    assert_eq!(fs::read(v.path("kept")).unwrap(), data);
    v.umount();
    // After a clean unmount the cache holds nothing unwritten: the volume mounts without it.
    set_config(&v, &base, "");
    v.mount();
    assert_eq!(fs::read(v.path("kept")).unwrap(), data);
    v.umount();
    v.assert_fsck_clean("at the end");
}

#[test]
fn discard_dirty_is_the_one_way_to_give_up_unwritten_data() {
    let mut v = TestVolume::new(1, "16K", "");
    let base = fs::read_to_string(&v.config).unwrap();
    let (cache_file, section) = file_cache(&v);
    set_config(&v, &base, &section);
    v.mount();
    write_synced(&v, "f", &[1u8; 50_000]);
    v.crash();
    fs::remove_file(&cache_file).unwrap();
    mount_refused(&mut v, &[]);
    v.mount_with(&["--cache-reset", "--discard-dirty"]);
    // The file's name and size were durable; its data never reached the devices.
    assert_eq!(fs::metadata(v.path("f")).unwrap().len(), 50_000);
    v.umount();
}

#[test]
fn a_volume_used_without_its_cache_never_serves_stale_lines() {
    let mut v = TestVolume::new(2, "16K", "");
    let base = fs::read_to_string(&v.config).unwrap();
    let (_, section) = file_cache(&v);
    set_config(&v, &base, &section);
    v.mount();
    write_synced(&v, "f", &[1u8; 64 << 10]);
    assert_eq!(fs::read(v.path("f")).unwrap(), vec![1u8; 64 << 10]);
    v.umount();
    // Without the cache, the file changes.
    set_config(&v, &base, "");
    v.mount();
    write_synced(&v, "f", &[2u8; 64 << 10]);
    v.umount();
    // With the cache again: the new data, not the lines it kept.
    set_config(&v, &base, &section);
    v.mount();
    assert_eq!(fs::read(v.path("f")).unwrap(), vec![2u8; 64 << 10]);
    v.umount();
}

#[test]
fn a_damaged_cache_record_refuses_the_mount() {
    let mut v = TestVolume::new(1, "16K", "");
    let base = fs::read_to_string(&v.config).unwrap();
    let (cache_file, section) = file_cache(&v);
    set_config(&v, &base, &section);
    v.mount();
    write_synced(&v, "f", &Rng::new(1).bytes(40_000));
    v.crash();
    // Flip one bit in every used record (the records start at 4 KiB, 64 bytes each).
    let mut bytes = fs::read(&cache_file).unwrap();
    let mut flipped = 0;
    for at in (4096..8192).step_by(64) {
        if bytes[at..at + 8] != [0xff; 8] {
            bytes[at + 20] ^= 0x01;
            flipped += 1;
        }
    }
    assert!(flipped > 0);
    fs::write(&cache_file, &bytes).unwrap();
    let msg = mount_refused(&mut v, &[]);
    assert!(msg.contains("damaged") && msg.contains("slot"), "{msg}");
    let msg = mount_refused(&mut v, &["--cache-reset"]);
    assert!(msg.contains("--discard-dirty"), "{msg}");
    // fsck names the file whose unwritten data the damaged records held, and leaves it.
    let out = stripefs(&["fsck", v.cfg()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(
        said.contains("cache-damaged-record") && said.contains("/f "),
        "{said}"
    );
}

#[test]
fn a_ram_cache_that_cannot_write_back_keeps_its_data_and_umount_says_so() {
    let mut v = TestVolume::new(1, "16K", "");
    let base = fs::read_to_string(&v.config).unwrap();
    let cache = "[cache]\nstore = \"ram\"\nsize = \"4M\"\nmode = \"wb\"\n[cache.cleaner]\nstaleness = \"1h\"\n";
    let fault = "[[volume.fault]]\ndevice = 0\nop = \"write\"\n";
    set_config(&v, &base, &format!("{fault}{cache}"));
    v.mount();
    let data = Rng::new(11).bytes(100_000);
    File::create(v.path("f"))
        .unwrap()
        .write_all_at(&data, 0)
        .unwrap();
    let out = stripefs(&["umount", v.mnt_str()]);
    lazy_umount(&v.mnt);
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "umount exited 0 having dropped data");
    assert!(msg.contains("stripefs.rescue"), "{msg}");
    // The device mended: the next mount writes the data back first.
    set_config(&v, &base, cache);
    v.mount();
    assert_eq!(fs::read(v.path("f")).unwrap(), data);
    v.umount();
    set_config(&v, &base, "");
    v.mount();
    assert_eq!(fs::read(v.path("f")).unwrap(), data, "on the devices");
    v.umount();
    v.assert_fsck_clean("after the rescue");
}

/// O_DSYNC (and O_SYNC) writes are durable when they return, direct I/O included (the
/// kernel asks for no fsync after a direct write): a crash right after keeps them.
#[test]
fn an_o_dsync_write_is_durable_when_it_returns() {
    use std::os::unix::fs::OpenOptionsExt;
    let mut v = TestVolume::new(2, "16K", "");
    let base = fs::read_to_string(&v.config).unwrap();
    let ram = "[cache]\nstore = \"ram\"\nsize = \"4M\"\nmode = \"wb\"\n[cache.cleaner]\nstaleness = \"1h\"\n";
    set_config(&v, &base, ram);
    v.mount();
    let data = Rng::new(21).bytes(8192);
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(v.path("f"))
        .unwrap();
    let mut aligned = vec![0u8; 8192 + 4096];
    let at = aligned.as_ptr().align_offset(4096);
    aligned[at..at + 8192].copy_from_slice(&data);
    f.write_all_at(&aligned[at..at + 8192], 0).unwrap();
    drop(f);
    v.crash();
    v.mount();
    assert_eq!(fs::read(v.path("f")).unwrap(), data);
    v.umount();
}
