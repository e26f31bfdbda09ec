fn main() {
    // FAILPOINTS=name=action;... arms fault points from the start (builds with `failpoints`).
    #[cfg(feature = "failpoints")]
    let _faults = faultpoint::fail::FailScenario::setup();
    // A write past a file size rlimit is EFBIG for that call, not the end of the daemon.
    // SAFETY: setting a signal's disposition to ignore.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let args: Vec<String> = std::env::args().collect();
    // Before the CLI's own: a background daemon's log file is bounded, warnings rate-limited.
    stripefs::logging::init();
    // Installed as /sbin/mount.stripefs or /sbin/mount.fuse.stripefs, mount(8) calls us by that name.
    let invoked_as = std::path::Path::new(args.first().map(String::as_str).unwrap_or(""))
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    // And as /sbin/umount.fuse.stripefs, umount(8) calls us for a mount of type fuse.stripefs.
    let code = if invoked_as.starts_with("umount.") {
        stripefs::mount::helper::umount_helper_main(args)
    } else if invoked_as.starts_with("mount.") {
        stripefs::cli::mount_helper_main(args)
    } else {
        stripefs::cli::main(args)
    };
    std::process::exit(code);
}
