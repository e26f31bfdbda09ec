//! `stripefs bench`: measure a directory, sweep fresh volumes, run a preset, compare.

use crate::bench_cmd::{self as b, BenchAction, BenchOpts};
use crate::error::{Error, Result};
use std::path::PathBuf;

pub fn bench(action: Option<BenchAction>, target: Option<PathBuf>, opts: BenchOpts) -> Result<i32> {
    match (action, target) {
        (
            Some(BenchAction::Sweep {
                devices,
                stripe_sizes,
                widths,
                cache,
                emulate,
                device_io,
                controller,
            }),
            _,
        ) => b::sweep(
            &opts,
            &b::SweepArgs {
                devices,
                stripe_sizes,
                widths,
                cache,
                emulate,
                device_io,
                controller,
            },
        ),
        (Some(BenchAction::Preset { name, dir }), _) => b::preset(&opts, &name, &dir),
        (Some(BenchAction::Compare { dirs, no_fio }), _) => b::compare(&dirs, no_fio, &opts),
        (None, Some(dir)) => b::bench_dir(&dir, &opts),
        (None, None) => Err(Error::Usage(
            "give a directory to measure, or `sweep` or `preset` (see stripefs bench --help)"
                .into(),
        )),
    }
    .map(|()| 0)
}
