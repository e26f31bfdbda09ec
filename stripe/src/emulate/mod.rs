//! Emulated hardware: a backing directory made to behave like an HDD, a SATA SSD or an NVMe
//! drive, and devices that share a RAID controller, for experiments on one machine. Each data
//! I/O is given a completion time by a model on a virtual clock and the caller's completion
//! is held until then (on the engine's timer), after doing the real I/O.

mod controller;
mod device;
mod spindle;

pub use controller::{
    predict_sequential, CacheModel, Controller, ControllerModel, ControllerState,
};
pub use device::{DeviceModel, ModelState};
pub use spindle::Spindle;

use std::sync::Mutex;
use std::time::Instant;

/// A model applied to one real device, on the wall clock.
pub struct Emulated {
    pub model: DeviceModel,
    state: Mutex<ModelState>,
    epoch: Instant,
}

impl Emulated {
    pub fn new(model: DeviceModel) -> Emulated {
        Emulated {
            state: Mutex::new(ModelState::new(&model)),
            model,
            epoch: Instant::now(),
        }
    }

    /// Books the I/O and returns when the emulated device would have finished it.
    pub fn book(&self, write: bool, object: u64, offset: u64, len: u64) -> Instant {
        let now = self.epoch.elapsed();
        let done = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .schedule(&self.model, now, write, object, offset, len);
        self.epoch + done
    }
}

/// A cache store on an emulated fast device (one file: object 0).
impl cache::Throttle for Emulated {
    fn book(&self, write: bool, offset: u64, len: u64) -> Instant {
        Emulated::book(self, write, 0, offset, len)
    }

    fn describe(&self) -> String {
        self.model.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn wall_clock_booking_waits_roughly_the_model_time() {
        let m = DeviceModel {
            name: "custom".into(),
            read_bps: 100e6,
            write_bps: 100e6,
            access: Duration::from_millis(5),
            queue: 1,
            read_iops: None,
            write_iops: None,
            spindle: None,
        };
        let e = Emulated::new(m);
        let until = e.book(false, 1, 0, 1_000_000);
        // 5 ms access + 10 ms transfer from the moment of booking, which lies between the
        // model's epoch and now: bounds that hold however slow this machine is.
        let service = Duration::from_millis(15);
        assert!(until >= e.epoch + service);
        assert!(until <= Instant::now() + service);
    }
}
