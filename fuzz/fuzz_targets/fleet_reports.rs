//! The replicas' reports as a Lease list holds them, read into a replica's gates of a pin's moves:
//! members, the timelines they say, the moves' times, and what this replica publishes of them.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    skewgate::fuzz_fleet_reports(data);
});
