//! The stripefs benchmark lab: CrystalDiskMark's workloads against any directory, results as
//! tables, JSON, CSV and charts. Mounting volumes for sweeps is the binary's job.

pub mod chart;
pub mod cpus;
pub mod engine;
pub mod fio;
pub mod heatmap;
pub mod log;
pub mod profile;
pub mod report;

pub use cpus::CpuList;
pub use engine::{Measured, RunSpec, TestFile};
pub use profile::Job;
pub use report::{Report, Target, TestResult};
