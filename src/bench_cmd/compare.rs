//! `stripefs bench compare`: directories measured interleaved, the first as the baseline.

use super::{describe_target, plan, BenchOpts, Ctx};
use crate::error::{Error, Result};
use bench::report::Driver;
use bench::Target;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `stripefs bench compare BASE DIR...`: every test on every directory in turn, ratios to BASE.
pub fn compare(dirs: &[PathBuf], no_fio: bool, opts: &BenchOpts) -> Result<()> {
    let plan = plan(opts)?;
    let fio_here = Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let driver = if fio_here && !no_fio {
        Driver::FioLibaio
    } else {
        Driver::Engine
    };
    if plan.opts.resume.is_some() {
        return Err(Error::Usage(
            "compare measures its directories interleaved, test by test: it cannot resume \
             (--csv keeps its rows)"
                .into(),
        ));
    }
    let ctx = Ctx::new(plan.tests() * dirs.len() as u64, plan.spec.duration)?;
    let paths: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let measured = bench::report::compare(
        &paths,
        &plan.jobs,
        &plan.spec,
        plan.opts.runs,
        driver,
        &ctx.stop,
        &mut |t| ctx.start_test(t, true),
    );
    ctx.finish();
    let measured = measured.map_err(|e| Error::Usage(format!("measuring: {e}")))?;
    let mut targets: Vec<Target> = dirs
        .iter()
        .zip(measured)
        .map(|(d, results)| Target {
            results,
            ..describe_target(d)
        })
        .collect();
    if let Some(log) = &plan.log {
        let mut log = log.borrow_mut();
        for (k, t) in targets.iter().enumerate() {
            for r in &t.results {
                log.append(t, k == 0, r, &plan.spec)
                    .map_err(|e| Error::Usage(format!("{}: {e}", log.csv_path.display())))?;
            }
        }
    }
    let baseline = targets.remove(0);
    let mut report = plan.report(Some(baseline), targets);
    report.measured_by = driver.describe().into();
    plan.output(&report, None)
}
