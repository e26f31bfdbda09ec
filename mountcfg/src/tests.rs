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
default_permissions = false
read_only = true
threads = 4
direct_io = "always"
writeback_cache = true
attr_timeout = "250ms"
commit_interval = "2s"
fsname = "tank"
"#,
        )
        .unwrap();
    assert_eq!(c.volume.stripe_size, 128 * 1024);
    assert_eq!(c.width(), 2);
    assert!(c.volume.meta.is_some());
    assert!(c.mount.allow_other && !c.mount.default_permissions && c.mount.read_only);
    assert_eq!(c.mount.threads, 4);
    assert_eq!(c.mount.direct_io, DirectIo::Always);
    assert_eq!(c.mount.attr_timeout, Duration::from_millis(250));
    assert_eq!(c.mount.commit_interval, Duration::from_secs(2));
    assert_eq!(c.mount.fsname.as_deref(), Some("tank"));
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
            "vol.toml:3: volume.devices: \"nope\": does not exist",
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
            "[volume]\ndevices = [\"d0\"]\n[mount]\nthreads = 0\n",
            "vol.toml:4: mount.threads: threads = 0: must be from 1 to 64",
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

    let head = "[volume]\ndevices = [\"d0\", \"d1\"]\n[[volume.emulate]]\n";
    let cases = [
        ("device = 2\nprofile = \"nvme\"\n", "vol.toml:4: volume.emulate.device: device = 2: must be a device index from 0 to 1, or \"all\""),
        ("device = 0\nprofile = \"floppy\"\n", "vol.toml:5: volume.emulate.profile: profile = \"floppy\": must be one of hdd-5400, sata-ssd, nvme, sata-port, custom"),
        ("device = 0\nprofile = \"custom\"\nread_mbps = 10\n", "vol.toml:3: volume.emulate: profile \"custom\" needs read_mbps, write_mbps and access"),
        ("device = 0\nprofile = \"nvme\"\nread_mbps = -1\n", "vol.toml:6: volume.emulate.read_mbps: read_mbps = -1: must be a positive number of MB/s"),
        ("device = 0\nprofile = \"nvme\"\nqueue = 0\n", "vol.toml:6: volume.emulate.queue: queue = 0: must be from 1 to 1024"),
        ("device = 0\nprofile = \"nvme\"\n[[volume.emulate]]\ndevice = \"all\"\nprofile = \"nvme\"\n", "vol.toml:7: volume.emulate.device: device 0 is emulated twice"),
    ];
    for (tail, want) in cases {
        assert_eq!(d.error(&format!("{head}{tail}")), want, "{tail}");
    }
}

#[test]
fn missing_file_is_named() {
    let e = load(Path::new("/nonexistent/vol.toml")).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/vol.toml: "), "{e}");
}
