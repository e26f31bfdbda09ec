use super::*;

struct Dirs {
    root: tempfile::TempDir,
}

impl Dirs {
    fn new(n: usize) -> Dirs {
        let root = tempfile::tempdir().unwrap();
        for i in 0..n {
            std::fs::create_dir(root.path().join(format!("d{i}"))).unwrap();
        }
        std::fs::write(root.path().join("plainfile"), b"x").unwrap();
        Dirs { root }
    }

    fn parse(&self, text: &str) -> Result<Config, ConfigError> {
        parse(text, &self.root.path().join("vol.toml"))
    }

    /// The error message with the temporary directory cut out, for readable assertions.
    fn error(&self, text: &str) -> String {
        let e = self.parse(text).expect_err("config should be refused");
        e.to_string()
            .replace(&format!("{}/", self.root.path().display()), "")
    }
}

#[test]
fn minimal_config_gets_defaults() {
    let d = Dirs::new(2);
    let c = d.parse("[volume]\ndevices = [\"d0\", \"d1\"]\n").unwrap();
    assert_eq!(c.volume.devices.len(), 2);
    assert!(c.volume.devices[0].is_absolute());
    assert_eq!(c.volume.stripe_size, 64 * 1024);
    assert_eq!(c.width(), 2);
    assert_eq!(c.mount, MountSection::default());
}

#[test]
fn full_config_reads_every_key() {
    let d = Dirs::new(4);
    let c = d
        .parse(
            r#"
[volume]
devices = ["d0", "d1", "d2", "d3"]
stripe_size = "128KiB"
width = 2
meta = "d0"

[mount]
allow_other = true
default_permissions = true
read_only = true
threads = 4
direct_io = "always"
transport = "dev"
dev_wait = "read"
uring_affinity = "any"
writeback_cache = true
attr_timeout = "250ms"
commit_interval = "2s"
fsname = "tank"
log_size = "16M"
"#,
        )
        .unwrap();
    assert_eq!(c.volume.stripe_size, 128 * 1024);
    assert_eq!(c.width(), 2);
    assert!(c.volume.meta.is_some());
    assert!(c.mount.allow_other && c.mount.default_permissions && c.mount.read_only);
    assert_eq!(c.mount.threads, Some(4));
    assert_eq!(c.mount.direct_io, DirectIo::Always);
    assert_eq!(c.mount.transport, Transport::Dev);
    assert_eq!(c.mount.dev_wait, DevWait::Read);
    assert_eq!(c.mount.uring_affinity, UringAffinity::Any);
    assert_eq!(c.mount.attr_timeout, Duration::from_millis(250));
    assert_eq!(c.mount.commit_interval, Duration::from_secs(2));
    assert_eq!(c.mount.fsname.as_deref(), Some("tank"));
    assert_eq!(c.mount.log_size, 16 << 20);
}

#[test]
fn stripe_size_spellings() {
    let d = Dirs::new(1);
    for (text, bytes) in [("\"8K\"", 8192), ("\"256K\"", 262144), ("65536", 65536)] {
        let c = d
            .parse(&format!(
                "[volume]\ndevices = [\"d0\"]\nstripe_size = {text}\n"
            ))
            .unwrap();
        assert_eq!(c.volume.stripe_size, bytes, "{text}");
    }
}

#[test]
fn bad_configs_name_file_line_and_key() {
    let d = Dirs::new(2);
    let cases: &[(&str, &str)] = &[
        (
            "[volume]\ndevices = [\"d0\"]\nstripe_size = \"12K\"\n",
            "vol.toml:3: volume.stripe_size: stripe_size = \"12K\": must be a power of two from 8K to 256K",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\nstripe_size = \"4K\"\n",
            "vol.toml:3: volume.stripe_size: stripe_size = \"4K\": must be a power of two from 8K to 256K",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\nstripe_size = \"512K\"\n",
            "vol.toml:3: volume.stripe_size: stripe_size = \"512K\": must be a power of two from 8K to 256K",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\nstripe_size = 0\n",
            "vol.toml:3: volume.stripe_size: stripe_size = 0: must be a power of two from 8K to 256K",
        ),
        (
            "[volume]\ndevices = []\n",
            "vol.toml:2: volume.devices: at least one device directory is needed",
        ),
        (
            "[volume]\ndevices = [\"d0\", \"d0\"]\n",
            "vol.toml:2: volume.devices: \"d0\" is listed twice; each device may appear once",
        ),
        (
            "[volume]\ndevices = [\"d0\",\n  \"nope\"]\n",
            "vol.toml:3: volume.devices: \"nope\": does not exist (a lost device: --degraded mounts the rest read-only)",
        ),
        (
            "[volume]\ndevices = [\"plainfile\"]\n",
            "vol.toml:2: volume.devices: \"plainfile\" is not a directory; a device is a directory on its own disk",
        ),
        (
            "[volume]\ndevices = [\"d0\", \"d1\"]\nwidth = 3\n",
            "vol.toml:3: volume.width: width = 3: must be from 1 to the number of devices (2)",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\nwidth = 0\n",
            "vol.toml:3: volume.width: width = 0: must be from 1 to the number of devices (1)",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\nmeta = \"plainfile\"\n",
            "vol.toml:3: volume.meta: \"plainfile\" is not a directory",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\nallow_other = true\ndefault_permissions = false\n",
            "vol.toml:5: mount.default_permissions: default_permissions = false with allow_other: \
             stripefs does not check permissions itself, so every local user would get root's \
             access to every file; keep default_permissions (the kernel checks permissions), or \
             drop allow_other",
        ),
        (
            &format!("[volume]\ndevices = [{}]\n", vec!["\"d0\""; 257].join(", ")),
            "vol.toml:2: volume.devices: 257 devices: a volume has at most 256 (as md caps its members)",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\nthreads = 0\n",
            "vol.toml:4: mount.threads: threads = 0: must be from 1 to 64",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\nuring_depth = 0\n",
            "vol.toml:4: mount.uring_depth: uring_depth = 0: must be from 1 to 256",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\nuring_threads = -1\n",
            "vol.toml:4: mount.uring_threads: uring_threads = -1: must be from 0 (as many as the devices need) to 1024",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\nuring_affinity = \"cpu0\"\n",
            "vol.toml:4: mount.uring_affinity: uring_affinity = \"cpu0\": must be \"auto\", \"queue\" or \"any\"",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\ntransport = \"pipe\"\n",
            "vol.toml:4: mount.transport: transport = \"pipe\": must be \"auto\", \"uring\" or \"dev\"",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\ndirect_io = \"sometimes\"\n",
            "vol.toml:4: mount.direct_io: direct_io = \"sometimes\": must be \"auto\", \"always\" or \"never\"",
        ),
        (
            "[volume]\ndevices = [\"d0\"]\n[mount]\nattr_timeout = \"soon\"\n",
            "vol.toml:4: mount.attr_timeout: attr_timeout = \"soon\": must be a duration such as 500ms, 30s or 2m",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(&d.error(text), want, "config:\n{text}");
    }
}

#[test]
fn syntax_and_type_errors_point_at_the_line() {
    let d = Dirs::new(1);
    let unknown = d.error("[volume]\ndevices = [\"d0\"]\nstripesize = \"64K\"\n");
    assert!(
        unknown.starts_with("vol.toml:3: stripesize: unknown field `stripesize`"),
        "{unknown}"
    );
    let syntax = d.error("[volume]\ndevices = [\"d0\"\n");
    assert!(syntax.starts_with("vol.toml:"), "{syntax}");
    let wrong_type = d.error("[volume]\ndevices = \"d0\"\n");
    assert!(
        wrong_type.starts_with("vol.toml:2: devices: invalid type"),
        "{wrong_type}"
    );
    let bool_type = d.error("[volume]\ndevices = [\"d0\"]\n[mount]\nallow_other = \"yes\"\n");
    assert!(
        bool_type.starts_with("vol.toml:4: allow_other: invalid type"),
        "{bool_type}"
    );
    let missing = d.error("[mount]\nallow_other = true\n");
    assert!(missing.contains("missing field `volume`"), "{missing}");
    let unknown_table = d.error("[volume]\ndevices = [\"d0\"]\n[volumes]\n");
    assert!(
        unknown_table.contains("vol.toml:3: volumes: unknown field `volumes`"),
        "{unknown_table}"
    );
}

#[test]
fn emulated_devices() {
    let d = Dirs::new(3);
    let c = d
        .parse(
            "[volume]\ndevices = [\"d0\", \"d1\", \"d2\"]\n\
             [[volume.emulate]]\ndevice = 0\nprofile = \"hdd-5400\"\n\
             [[volume.emulate]]\ndevice = 2\nprofile = \"custom\"\nread_mbps = 100\nwrite_mbps = 50.5\naccess = \"2ms\"\nqueue = 4\n",
        )
        .unwrap();
    assert_eq!(c.volume.emulate.len(), 2);
    assert_eq!(c.volume.emulate[0].devices, vec![0]);
    assert_eq!(c.volume.emulate[1].write_mbps, Some(50.5));
    assert_eq!(c.volume.emulate[1].access, Some(Duration::from_millis(2)));
    let all = d
        .parse("[volume]\ndevices = [\"d0\", \"d1\"]\n[[volume.emulate]]\ndevice = \"all\"\nprofile = \"nvme\"\n")
        .unwrap();
    assert_eq!(all.volume.emulate[0].devices, vec![0, 1]);
    let disk = d
        .parse("[volume]\ndevices = [\"d0\"]\n[[volume.emulate]]\ndevice = 0\nprofile = \"custom\"\nread_mbps = 200\nwrite_mbps = 190\nrpm = 7200\ntrack_seek = \"800us\"\nfull_seek = \"16ms\"\ncapacity = \"4T\"\nncq = 32\n")
        .unwrap();
    let keys = &disk.volume.emulate[0].spindle;
    assert_eq!(keys.rpm, Some(7200.0));
    assert_eq!(keys.track_seek, Some(Duration::from_micros(800)));
    assert_eq!(keys.full_seek, Some(Duration::from_millis(16)));
    assert_eq!(keys.capacity, Some(4 << 40));
    assert_eq!(keys.ncq, Some(32));

    let head = "[volume]\ndevices = [\"d0\", \"d1\"]\n[[volume.emulate]]\n";
    let cases = [
        ("device = 2\nprofile = \"nvme\"\n", "vol.toml:4: volume.emulate.device: device = 2: must be a device index from 0 to 1, or \"all\""),
        ("device = 0\nprofile = \"floppy\"\n", "vol.toml:5: volume.emulate.profile: profile = \"floppy\": must be one of hdd-5400, sata-ssd, nvme, sata-port, custom"),
        ("device = 0\nprofile = \"custom\"\nread_mbps = 10\n", "vol.toml:3: volume.emulate: profile \"custom\" needs read_mbps, write_mbps and access (or rpm)"),
        ("device = 0\nprofile = \"hdd-5400\"\nrpm = 0\n", "vol.toml:6: volume.emulate.rpm: rpm = 0: must be revolutions per minute, from 1 to 100000"),
        ("device = 0\nprofile = \"hdd-5400\"\nncq = 0\n", "vol.toml:6: volume.emulate.ncq: ncq = 0: must be from 1 (in order) to 256 commands"),
        ("device = 0\nprofile = \"hdd-5400\"\ntrack_seek = \"3ms\"\nfull_seek = \"2ms\"\n", "vol.toml:7: volume.emulate.full_seek: must be at least track_seek"),
        ("device = 0\nprofile = \"hdd-5400\"\ncapacity = 0\n", "vol.toml:6: volume.emulate.capacity: capacity = 0: a spinning disk holds at least 1G"),
        ("device = 0\nprofile = \"nvme\"\naccess = \"1h\"\n", "vol.toml:6: volume.emulate.access: an access takes at most 10s"),
        ("device = 0\nprofile = \"hdd-5400\"\ntrack_seek = \"2s\"\n", "vol.toml:6: volume.emulate.track_seek: a seek takes at most 1s"),
        ("device = 0\nprofile = \"nvme\"\nrpm = 7200\nqueue = 8\n", "vol.toml:7: volume.emulate.queue: a spinning disk has one actuator: its queue is ncq"),
        ("device = 0\nprofile = \"hdd-5400\"\nrpm = 7200\naccess = \"5ms\"\n", "vol.toml:7: volume.emulate.access: a spinning disk (rpm, track_seek, full_seek, capacity, ncq) computes each access from its seeks and rotation: give one or the other"),
        ("device = 0\nprofile = \"nvme\"\nread_mbps = -1\n", "vol.toml:6: volume.emulate.read_mbps: read_mbps = -1: must be a positive number of MB/s"),
        ("device = 0\nprofile = \"nvme\"\nqueue = 0\n", "vol.toml:6: volume.emulate.queue: queue = 0: must be from 1 to 1024"),
        ("device = 0\nprofile = \"nvme\"\n[[volume.emulate]]\ndevice = \"all\"\nprofile = \"nvme\"\n", "vol.toml:7: volume.emulate.device: device 0 is emulated twice"),
    ];
    for (tail, want) in cases {
        assert_eq!(d.error(&format!("{head}{tail}")), want, "{tail}");
    }
}

#[test]
fn a_controller_section_and_its_errors() {
    let d = Dirs::new(2);
    let c = d
        .parse(
            "[volume]\ndevices = [\"d0\", \"d1\"]\n\
             [volume.controller]\ndevice = \"all\"\nprofile = \"lsi-9260-8i\"\n\
             command_cost = \"3us\"\nmax_commands = 64\ncache_size = \"256M\"\nread_ahead = false\n",
        )
        .unwrap();
    let ctl = c.volume.controller.unwrap();
    assert_eq!(ctl.devices, vec![0, 1]);
    assert_eq!(ctl.command_cost, Some(Duration::from_micros(3)));
    assert_eq!(ctl.max_commands, Some(64));
    assert_eq!(ctl.cache_size, Some(256 << 20));
    assert_eq!(ctl.read_ahead, Some(false));
    assert_eq!(ctl.cache, None);
    let iops = d
        .parse("[volume]\ndevices = [\"d0\"]\n[[volume.emulate]]\ndevice = 0\nprofile = \"sata-ssd\"\nread_iops = 1000\n")
        .unwrap();
    assert_eq!(iops.volume.emulate[0].read_iops, Some(1000.0));

    let head = "[volume]\ndevices = [\"d0\", \"d1\"]\n[volume.controller]\n";
    let cases = [
        ("device = 3\nprofile = \"lsi-9260-8i\"\n", "vol.toml:4: volume.controller.device: device = 3: must be a device index from 0 to 1, or \"all\""),
        ("device = 0\nprofile = \"raid5000\"\n", "vol.toml:5: volume.controller.profile: profile = \"raid5000\": must be one of lsi-9260-8i, custom"),
        ("device = 0\nprofile = \"custom\"\nlink_mbps = 100\n", "vol.toml:3: volume.controller: profile \"custom\" needs link_mbps, command_cost and processor_mbps"),
        ("device = 0\nprofile = \"lsi-9260-8i\"\nlink_mbps = 0\n", "vol.toml:6: volume.controller.link_mbps: link_mbps = 0: must be a positive number of MB/s"),
        ("device = 0\nprofile = \"lsi-9260-8i\"\nmax_commands = 0\n", "vol.toml:6: volume.controller.max_commands: max_commands = 0: must be from 1 to 65536"),
        ("device = 0\nprofile = \"lsi-9260-8i\"\ncommand_cost = \"fast\"\n", "vol.toml:6: volume.controller.command_cost: command_cost = \"fast\": must be a duration such as 500ms, 30s or 2m"),
        ("device = 0\nprofile = \"lsi-9260-8i\"\ncache_size = 0\n", "vol.toml:6: volume.controller.cache_size: cache_size = 0: must not be 0 (cache = false turns it off)"),
    ];
    for (tail, want) in cases {
        assert_eq!(d.error(&format!("{head}{tail}")), want, "{tail}");
    }
    let unknown = d.error(&format!(
        "{head}device = 0\nprofile = \"custom\"\nbus = 1\n"
    ));
    assert!(unknown.contains("unknown field `bus`"), "{unknown}");
}

#[test]
fn missing_file_is_named() {
    let e = load(Path::new("/nonexistent/vol.toml")).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/vol.toml: "), "{e}");
}

/// The corpus of bad configs: each is refused with one message naming file, line and key.
#[test]
fn bad_config_corpus() {
    let d = Dirs::new(2);
    std::fs::create_dir(d.root.path().join("ssd")).unwrap();
    let vol = "[volume]\ndevices = [\"d0\", \"d1\"]\n";
    let cache = "[cache]\nsize = \"4M\"\n";
    // (config after the volume section, line, key, words of the message)
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[cache]\nsize = 0\n",
            4,
            "cache.size",
            "must hold at least one line",
        ),
        ("[cache]\nsize = \"12Q\"\n", 4, "cache.size", "unknown unit"),
        (
            "[cache]\nsize = \"100T\"\nstore = \"file\"\npath = \"ssd\"\n",
            4,
            "cache.size",
            "larger than the device",
        ),
        (
            "[cache]\nsize = \"4M\"\nline_size = \"3K\"\n",
            5,
            "cache.line_size",
            "power of two from 4K to 256K",
        ),
        (
            "[cache]\nsize = \"4M\"\nline_size = \"512K\"\n",
            5,
            "cache.line_size",
            "power of two from 4K to 256K",
        ),
        (
            "[cache]\nsize = \"4M\"\nstore = \"tape\"\n",
            5,
            "cache.store",
            "must be \"ram\" or \"file\"",
        ),
        (
            "[cache]\nsize = \"4M\"\nstore = \"file\"\n",
            5,
            "cache.store",
            "needs cache.path",
        ),
        (
            "[cache]\nsize = \"4M\"\npath = \"ssd\"\n",
            5,
            "cache.path",
            "a RAM cache has no path",
        ),
        (
            "[cache]\nsize = \"4M\"\nstore = \"file\"\npath = \"nowhere/x\"\n",
            6,
            "cache.path",
            "no such directory",
        ),
        (
            "[cache]\nsize = \"4M\"\nstore = \"file\"\npath = \"d0\"\n",
            6,
            "cache.path",
            "inside a device",
        ),
        (
            "[cache]\nsize = \"4M\"\nmode = \"fast\"\n",
            5,
            "cache.mode",
            "must be wt, wb, wa, wi, wo or pt",
        ),
        (
            "[cache]\nsize = \"4M\"\ndefault = \"some\"\n",
            5,
            "cache.default",
            "\"all\" or \"targets\"",
        ),
        (
            "[cache]\nsize = \"4M\"\nemulate = \"floppy\"\n",
            5,
            "cache.emulate",
            "must be one of",
        ),
        (
            "[cache]\nsize = \"4M\"\ncolour = \"red\"\n",
            5,
            "colour",
            "unknown field",
        ),
        (
            "[cache]\nsize = \"4M\"\ndefault_priority = 256\n",
            5,
            "cache.default_priority",
            "from 0 (kept longest) to 255",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\nbatch = 0\n",
            6,
            "cache.cleaner.flush_max_buffers",
            "from 1 to 65536",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\nbatch = 4\nflush_max_buffers = 8\n",
            6,
            "cache.cleaner.batch",
            "older name of flush_max_buffers",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\ndirty_high = 0.5\ndirty_ratio_threshold = 50\n",
            6,
            "cache.cleaner.dirty_high",
            "replaced by dirty_ratio_threshold",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\npolicy = \"lazy\"\n",
            6,
            "cache.cleaner.policy",
            "\"alru\", \"acp\" or \"nop\"",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\ndirty_ratio_threshold = 101\n",
            6,
            "cache.cleaner.dirty_ratio_threshold",
            "percent from 0 to 100",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\nmax_mbps = -1\n",
            6,
            "cache.cleaner.max_mbps",
            "0 (no limit)",
        ),
        (
            "[cache]\nsize = \"4M\"\nerror_threshold = -3\n",
            5,
            "cache.error_threshold",
            "0 (never pass-through)",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.seq_cutoff]\npromotion_count = 0\n",
            6,
            "cache.seq_cutoff.promotion_count",
            "from 1 to 65535",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.promotion]\npolicy = \"nhit\"\ntrigger_threshold = 120\n",
            7,
            "cache.promotion.trigger_threshold",
            "from 0 to 100",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\ndirty_high = 1.5\n",
            6,
            "cache.cleaner.dirty_high",
            "at most 1",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.cleaner]\nstaleness = \"soon\"\n",
            6,
            "cache.cleaner.staleness",
            "duration",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.seq_cutoff]\npolicy = \"sometimes\"\n",
            6,
            "cache.seq_cutoff.policy",
            "\"always\", \"full\" or \"never\"",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.promotion]\npolicy = \"lottery\"\n",
            6,
            "cache.promotion.policy",
            "\"always\" or \"nhit\"",
        ),
        (
            "[mount]\non_event = \"alert.sh\"\n",
            4,
            "mount.on_event",
            "absolute path of an executable program",
        ),
        (
            "[cache]\nsize = \"4M\"\n[cache.promotion]\npolicy = \"nhit\"\nhits = 0\n",
            7,
            "cache.promotion.hits",
            "from 2 to 1000",
        ),
        (
            "[[cache.target]]\npath = \"vm\"\n",
            5,
            "cache.target.path",
            "from its root",
        ),
        (
            "[[cache.target]]\npath = \"/../etc\"\n",
            5,
            "cache.target.path",
            "without . or ..",
        ),
        (
            "[[cache.target]]\npath = \"/vm\"\n[[cache.target]]\npath = \"/vm/\"\n",
            7,
            "cache.target.path",
            "a target twice",
        ),
        (
            "[[cache.target]]\npath = \"/vm\"\npriority = 300\n",
            6,
            "cache.target.priority",
            "from 0 (kept longest) to 255",
        ),
        (
            "[[cache.target]]\npath = \"/vm\"\nallocation = 0.0\n",
            6,
            "cache.target.allocation",
            "above 0 and at most 1",
        ),
        (
            "[[cache.target]]\npath = \"/vm\"\nmode = \"bogus\"\n",
            6,
            "cache.target.mode",
            "must be wt, wb",
        ),
        (
            "[[volume.fault]]\ndevice = 5\n",
            4,
            "volume.fault.device",
            "from 0 to 1",
        ),
        (
            "[[volume.fault]]\ndevice = 0\nop = \"delete\"\n",
            5,
            "volume.fault.op",
            "\"read\", \"write\" or \"any\"",
        ),
        (
            "[[volume.fault]]\ndevice = 0\nerror = \"ebusy\"\n",
            5,
            "volume.fault.error",
            "\"eio\" or \"enospc\"",
        ),
        (
            "[[volume.fault]]\ndevice = 0\nrate = 2.0\n",
            5,
            "volume.fault.rate",
            "from 0 to 1",
        ),
        (
            "[[volume.fault]]\ndevice = 0\nrange = [10, 5]\n",
            5,
            "volume.fault.range",
            "start below end",
        ),
        (
            "[mount]\nthreads = \"four\"\n",
            4,
            "threads",
            "invalid type",
        ),
        (
            "[mount]\ncommit_interval = \"-3s\"\n",
            4,
            "mount.commit_interval",
            "duration",
        ),
        (
            "[mount]\nlog_size = \"4K\"\n",
            4,
            "mount.log_size",
            "at least 64K",
        ),
    ];
    for (tail, line, key, words) in cases {
        // Cases that need a cache section get the minimal one first.
        let text = if tail.starts_with("[[cache.target]]") {
            format!("{vol}{cache}{tail}")
        } else {
            format!("{vol}{tail}")
        };
        let line = if tail.starts_with("[[cache.target]]") {
            line + 1
        } else {
            *line
        };
        let msg = d.error(&text);
        let want = format!("vol.toml:{line}: {key}");
        assert!(
            msg.starts_with(&want),
            "want \"{want}...\" for\n{text}\ngot: {msg}"
        );
        assert!(msg.contains(words), "want \"{words}\" in: {msg}");
        assert_eq!(msg.lines().count(), 1, "one message: {msg}");
    }
    // With the other tests here the corpus passes thirty configs.
    assert!(cases.len() >= 30);
}

#[test]
fn a_cache_mode_that_reaches_no_file_is_warned_about() {
    let d = Dirs::new(1);
    let base = "[volume]\ndevices = [\"d0\"]\n[cache]\nsize = \"1M\"\n";
    let warned = |extra: &str| d.parse(&format!("{base}{extra}")).unwrap().warnings;
    // default = "targets" with no target: the mode reaches nothing.
    let w = warned("mode = \"wb\"\ndefault = \"targets\"\n");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("vol.toml:5: cache.mode = \"wb\" is not used"),
        "{w:?}"
    );
    // Every target sets its own mode: the same.
    let w = warned(
        "mode = \"wb\"\ndefault = \"targets\"\n[[cache.target]]\npath = \"/a\"\nmode = \"wt\"\n",
    );
    assert!(
        w[0].contains("every [[cache.target]] sets its own mode"),
        "{w:?}"
    );
    // A target that takes the mode, default = "all", or no mode given: no warning.
    assert!(
        warned("mode = \"wb\"\ndefault = \"targets\"\n[[cache.target]]\npath = \"/a\"\n")
            .is_empty()
    );
    assert!(warned("mode = \"wb\"\ndefault = \"all\"\n").is_empty());
    assert!(warned("default = \"targets\"\n").is_empty());
}

#[test]
fn io_classes_are_read_with_their_defaults() {
    let d = Dirs::new(1);
    let c = d
        .parse(
            "[volume]\ndevices = [\"d0\"]\n[cache]\nsize = \"4M\"\nmode = \"wt\"\n\
             [[cache.class]]\nname = \"big-images\"\ndirectory = \"vm\"\n\
             extension = [\"img\", \".QCOW2\"]\nmin_size = \"1G\"\ndirection = \"write\"\n\
             mode = \"wb\"\npriority = 0\nallocation = 0.5\nmin_allocation = 0.1\n\
             [[cache.class]]\nname = \"small\"\nmax_size = \"64K\"\n\
             [[cache.class]]\nname = \"logs\"\nextension = \"log\"\nmode = \"wa\"\npinned = true\n",
        )
        .unwrap();
    let classes = &c.cache.unwrap().classes;
    assert_eq!(classes.len(), 3);
    let big = &classes[0];
    assert_eq!(big.name, "big-images");
    assert_eq!(big.directory.as_deref(), Some("/vm"));
    assert_eq!(big.extensions, ["img", "qcow2"]);
    assert_eq!((big.min_size, big.max_size), (Some(1 << 30), None));
    assert_eq!(big.direction, Some(Direction::Write));
    assert_eq!(big.mode, "wb");
    assert_eq!(
        (big.priority, big.allocation, big.min_allocation),
        (0, 0.5, 0.1)
    );
    assert_eq!(big.line, 6);
    let small = &classes[1];
    assert_eq!((small.min_size, small.max_size), (None, Some(65536)));
    assert_eq!(small.mode, "wt", "the cache's mode when none is given");
    assert_eq!(
        (
            small.priority,
            small.allocation,
            small.min_allocation,
            small.pinned
        ),
        (0, 1.0, 0.0, false)
    );
    assert_eq!(classes[2].extensions, ["log"]);
    assert!(classes[2].pinned);
}

#[test]
fn bad_io_classes_name_file_line_and_key() {
    let d = Dirs::new(1);
    let head = "[volume]\ndevices = [\"d0\"]\n[cache]\nsize = \"4M\"\n[[cache.class]]\n";
    // (the class's keys from line 6, the message)
    let cases: &[(&str, &str)] = &[
        (
            "name = \"x\"\nmode = \"wb\"\n",
            "vol.toml:6: cache.class: a class needs at least one condition: directory, extension, min_size, max_size or direction (a folder's own setting is a [[cache.target]])",
        ),
        (
            "name = \"x\"\nextension = \"tar.gz\"\n",
            "vol.toml:7: cache.class.extension: extension \"tar.gz\": the extension is what follows the last dot of a name (\"gz\", not \"tar.gz\")",
        ),
        (
            "name = \"x\"\nextension = []\n",
            "vol.toml:7: cache.class.extension: extension = []: list at least one, e.g. [\"img\", \"qcow2\"]",
        ),
        (
            "name = \"x\"\nmin_size = \"1G\"\nmax_size = \"1M\"\n",
            "vol.toml:8: cache.class.max_size: min_size = 1G is above max_size = 1M: no file would match",
        ),
        (
            "name = \"x\"\nmin_size = \"1Q\"\n",
            "vol.toml:7: cache.class.min_size: min_size = \"1Q\": unknown unit \"Q\" (use K, M, G or T)",
        ),
        (
            "name = \"x\"\ndirection = \"both\"\n",
            "vol.toml:7: cache.class.direction: direction = \"both\": must be \"read\" or \"write\"",
        ),
        (
            "name = \"x\"\ndirectory = \"/a/../b\"\n",
            "vol.toml:7: cache.class.directory: directory = \"/a/../b\": must be a folder of the volume, from its root (\"/vm-images\"), without . or ..",
        ),
        (
            "name = \"x y\"\ndirection = \"read\"\n",
            "vol.toml:6: cache.class.name: name = \"x y\": letters, digits, '-', '_' and '.' only",
        ),
        (
            "name = \"default\"\ndirection = \"read\"\n",
            "vol.toml:6: cache.class.name: name = \"default\" is the volume default's; choose another",
        ),
        (
            "name = \"x\"\ndirection = \"read\"\nallocation = 0.2\nmin_allocation = 0.5\n",
            "vol.toml:9: cache.class.min_allocation: min_allocation = 0.5: must be a share from 0 to the class's allocation (0.2)",
        ),
        (
            "name = \"x\"\ndirection = \"read\"\npriority = 256\n",
            "vol.toml:8: cache.class.priority: priority = 256: must be from 0 (kept longest, and chosen first) to 255",
        ),
        (
            "name = \"x\"\ndirection = \"read\"\nmode = \"fast\"\n",
            "vol.toml:8: cache.class.mode: mode = \"fast\": must be wt, wb, wa, wi, wo or pt (or write-through, write-back, ...)",
        ),
        (
            "name = \"x\"\ndirection = \"read\"\n[[cache.class]]\nname = \"x\"\ndirection = \"write\"\n",
            "vol.toml:9: cache.class.name: name = \"x\" is a class twice",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(&d.error(&format!("{head}{body}")), want, "{body}");
    }
    // An unknown key names its line, as every other section's do.
    let e = d.error(&format!("{head}name = \"x\"\nsuffix = \"img\"\n"));
    assert!(
        e.starts_with("vol.toml:7: suffix: unknown field `suffix`"),
        "{e}"
    );
}

#[test]
fn the_default_class_priority_is_read_and_defaults_to_1() {
    let d = Dirs::new(1);
    let cache = |extra: &str| {
        d.parse(&format!(
            "[volume]\ndevices = [\"d0\"]\n[cache]\nsize = \"4M\"\n{extra}"
        ))
        .unwrap()
        .cache
        .unwrap()
    };
    assert_eq!(cache("").default_priority, 1);
    assert_eq!(cache("default_priority = 7\n").default_priority, 7);
    assert_eq!(cache("default_priority = 0\n").default_priority, 0);
}

#[test]
fn cleaner_seq_cutoff_promotion_and_error_keys_are_read() {
    let d = Dirs::new(1);
    let cache = |extra: &str| {
        d.parse(&format!(
            "[volume]\ndevices = [\"d0\"]\n[cache]\nsize = \"4M\"\n{extra}"
        ))
        .unwrap()
        .cache
        .unwrap()
    };
    let c = cache("");
    assert_eq!(c.cleaner_policy, "alru");
    assert_eq!(c.wake_up, None);
    assert_eq!(c.staleness, Duration::from_secs(30));
    assert_eq!(c.flush_max_buffers, 128);
    assert_eq!(c.activity_threshold, Duration::ZERO);
    assert_eq!(
        (c.dirty_ratio_threshold, c.dirty_ratio_inertia),
        (80, 128 << 20)
    );
    assert_eq!((c.max_mbps, c.error_threshold), (0, 1000));
    assert_eq!((c.seq_promotion_count, c.seq_promotion_threshold), (8, 0));
    assert_eq!(c.promotion_trigger, 80);
    let c = cache(
        "error_threshold = 5\n[cache.cleaner]\npolicy = \"acp\"\nwake_up = \"20ms\"\n\
         staleness = \"2m\"\nflush_max_buffers = 64\nactivity_threshold = \"10s\"\n\
         dirty_ratio_threshold = 40\ndirty_ratio_inertia = \"64M\"\nmax_mbps = 200\n\
         [cache.seq_cutoff]\npromotion_count = 4\npromotion_threshold = \"8M\"\n\
         [cache.promotion]\npolicy = \"nhit\"\nhits = 2\ntrigger_threshold = 50\n",
    );
    assert_eq!(c.cleaner_policy, "acp");
    assert_eq!(c.wake_up, Some(Duration::from_millis(20)));
    assert_eq!(c.staleness, Duration::from_secs(120));
    assert_eq!(c.flush_max_buffers, 64);
    assert_eq!(c.activity_threshold, Duration::from_secs(10));
    assert_eq!(
        (c.dirty_ratio_threshold, c.dirty_ratio_inertia),
        (40, 64 << 20)
    );
    assert_eq!((c.max_mbps, c.error_threshold), (200, 5));
    assert_eq!(
        (c.seq_promotion_count, c.seq_promotion_threshold),
        (4, 8 << 20)
    );
    assert_eq!((c.promotion_hits, c.promotion_trigger), (Some(2), 50));
    // The older names still work.
    let c = cache("[cache.cleaner]\nbatch = 7\ndirty_high = 0.6\n");
    assert_eq!((c.flush_max_buffers, c.dirty_ratio_threshold), (7, 60));
}
