//! `check --rollback-record`: any JSON a record file may hold (edited, truncated, from another
//! build), judged against a rollback table that moves every write back: warnings, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skewgate::skew::rollback::{RollbackCheck, record_warnings};

const TABLE: &str = "apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - {name: v1-35, version: v1.35, endpoints: [\"https://10.0.0.13:6444\"]}
  - {name: v1-36, version: v1.36, endpoints: [\"https://10.0.0.11:6444\"]}
writes:
  default: v1-36
  fence: 5s
  pins:
    - {name: keep-pods, namespaces: [gpu, \"/^ml-/\"], resources: [pods], backend: v1-36}
    - {name: everything, backend: v1-35, from: v1-36, flipAt: 2026-12-01T12:20:00Z}
reads:
  default: v1-36
";

fuzz_target!(|data: &[u8]| {
    let Ok(record) = serde_json::from_slice::<RollbackCheck>(data) else {
        return;
    };
    let Ok(table) = skewgate::config::parse_route_table(std::path::Path::new("r.yaml"), TABLE)
    else {
        return;
    };
    let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_000_000);
    let _ = record_warnings(&table, Some(&table), Some(&record), now);
});
