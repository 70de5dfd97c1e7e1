//! skewgate in front of two real kube-apiservers of adjacent minors over one etcd
//! (`tests/real/pair.sh`, kubeadm-style authentication), from `SKEWGATE_APISERVER_ASSETS`: the
//! folder with two `kube-apiserver-vX.Y.Z.xz` binaries (the project's shared envtest holds v1.36.3
//! and v1.35.6; any two adjacent minors do). Skipped, with the reason printed, when the variable is
//! unset or the machine lacks what the pair needs (etcd, unshare as root, openssl, xz, curl,
//! kubectl). The pair starts once, for one test that runs the checks in turn: what the simulator
//! could not show. Where it matters, the apiservers' own audit logs judge what reached which
//! version.
//!
//! | file | checks |
//! |---|---|
//! | `real/clients.rs` | certificate, token and anonymous clients reach each version as themselves; discovery lists a kind only the new version adds to a shared group/version; collection GETs with tricky list options named by skewgate as the apiserver's audit log names them |
//! | `real/fields.rs` | `skew` reports no false difference and finds the real one; the guard on a pod's status and main object; a pin keeps the field a status write through the old version wipes |
//! | `real/protobuf.rs` | skewgate reads the apiserver's protobuf as its JSON; the guard judges v1.35's protobuf encoding of a pod's status as its JSON (reject, preserve, warn; kubelet and controller-manager clients), in both directions, and passes one with nothing to lose |
//! | `real/controllers.rs` | a real v1.35 kube-controller-manager scales a Deployment through guards on all it updates |
//! | `real/moves.rs` | a pin moved by `flipAt` under 32 writers: every write 200, no overlap in the audit logs |
//! | `real/fleet.rs` | two replicas as a fleet, one with its route file 5 s late: the move waits for it, every write 200, no overlap in the audit logs |
//! | `real/supersede.rs` | two replicas, the pin moved four times, each table 3 s late on the second, which is frozen across two `flipAt`s: moves superseded before they were made, and moves spaced out; no overlap per object in the audit logs, every write 200 or 429 with `Retry-After` |
//! | `real/fleet_controllers.rs` | a real controller-manager and scheduler (v1.35) through the two replicas of a fleet while their namespace's pin moves four times, each table 3 s late on one: their protobuf updates pass, the Deployment settles, no overlap per object in the audit logs |
//! | `real/rehearsal.rs` | the whole upgrade as deploy/UPGRADE.md orders it, by deploy/kubeadm's own route files, and its rollback: real controller-managers and schedulers of both versions leading in turn, writers throughout, guards on; no object written by two versions at once, no component served by an older apiserver, no field lost, no 5xx, the Deployment scheduled at each step (`real/rehearsal_judge.rs`) |
//! | `real/rollback.rs` | what only v1.36 keeps (a pod status field, a MutatingAdmissionPolicy) written through skewgate and counted as it passes; `rollback-check --to` v1.35 names both and their namespace and fails; with its suggested pins the rollback table passes, `check` finds nothing in its record, and once loaded the pinned objects keep their fields on v1.36 while every other write goes to v1.35 (audit logs) |
//! | `real/share.rs` | kubelets' watches of the ConfigMap and Secret their pods mount, shared, equal each kubelet's straight watch (JSON, and protobuf byte for byte; from behind the shared watch; a 410; across a restart of skewgate); the Node authorizer refuses through skewgate, with the apiserver's own 403, a kubelet whose pod is gone and a watch of another node's pods, while the others go on; the audit log sees skewgate's watches, not the kubelets' |
//! | `real/cluster.rs` | the endpoints reconciler under deploy/'s RBAC; readiness while the old apiserver stops and returns; `User-Agent: skewgate/<version>` on its own requests |

#[path = "real/clients.rs"]
mod clients;
#[path = "real/cluster.rs"]
mod cluster;
mod common;
#[path = "real/controllers.rs"]
mod controllers;
#[path = "real/fields.rs"]
mod fields;
#[path = "real/fleet.rs"]
mod fleet;
#[path = "real/fleet_controllers.rs"]
mod fleet_controllers;
#[path = "real/h2client.rs"]
mod h2client;
#[path = "real/harness.rs"]
mod harness;
#[path = "real/moves.rs"]
mod moves;
#[path = "common/process.rs"]
mod process;
#[path = "real/protobuf.rs"]
mod protobuf;
#[path = "real/rehearsal.rs"]
mod rehearsal;
#[path = "real/rehearsal_judge.rs"]
mod rehearsal_judge;
#[path = "real/rehearsal_writers.rs"]
mod rehearsal_writers;
#[path = "real/rollback.rs"]
mod rollback;
#[path = "real/share.rs"]
mod share;
#[path = "real/supersede.rs"]
mod supersede;

use harness::{missing, start_pair};

#[test]
fn skewgate_in_front_of_real_apiservers_of_two_versions() {
    if std::env::var("SKEWGATE_APISERVER_ASSETS").is_err() {
        println!(
            "SKIPPED: SKEWGATE_APISERVER_ASSETS is unset (the folder with two kube-apiserver-vX.Y.Z.xz; README)"
        );
        return;
    }
    if let Some(why) = missing() {
        println!("SKIPPED: {why}");
        return;
    }
    let pair = match start_pair() {
        Ok(pair) => pair,
        Err(why) => panic!("the pair did not start: {why}"),
    };
    println!(
        "pair: new {} ({}), old {} ({})",
        pair.var("NEW_URL"),
        pair.var("NEW_VERSION"),
        pair.var("OLD_URL"),
        pair.var("OLD_VERSION")
    );
    if wanted("clients") {
        clients::clients_reach_the_apiservers_as_themselves(&pair);
        clients::token_clients_are_routed_as_their_service_account(&pair);
        clients::discovery_lists_what_only_the_new_version_adds_to_a_shared_group_version(&pair);
        clients::a_watch_without_a_version_ends_through_skewgate_as_it_ends_straight(&pair);
        clients::the_apiserver_names_collection_requests_as_skewgate_does(&pair);
    }
    if wanted("fields")
        && let Some(field) = fields::skew_reports_only_real_differences(&pair)
    {
        fields::the_guard_judges_a_pod_as_the_apiserver_takes_it(&pair, &field);
        fields::a_pin_keeps_what_the_old_version_would_wipe(&pair);
        fields::the_guard_refuses_an_update_through_the_older_version_that_drops_a_field(&pair);
    }
    if wanted("protobuf") {
        protobuf::skewgate_reads_protobuf_as_the_apiserver_writes_json(&pair);
        if pair.minor("new") == "v1.36" && pair.minor("old") == "v1.35" {
            protobuf::the_guard_judges_a_v1_35_protobuf_update_as_its_json(&pair);
            protobuf::a_protobuf_update_with_nothing_to_lose_passes_as_it_came(&pair);
            protobuf::the_guard_refuses_a_newer_protobuf_update_the_older_version_would_strip(
                &pair,
            );
        }
        controllers::a_real_old_controller_manager_scales_a_deployment_through_the_guard(&pair);
    }
    if wanted("moves") {
        moves::a_pin_moved_by_flip_at_answers_every_write_in_flight(&pair);
    }
    if wanted("fleet") {
        fleet::a_fleet_moves_a_pin_when_its_late_replica_runs_the_move(&pair);
    }
    if wanted("supersede") {
        supersede::moves_that_supersede_pending_ones_never_overlap(&pair);
        supersede::spaced_moves_never_overlap(&pair);
        fleet_controllers::real_components_write_through_superseded_moves(&pair);
    }
    if wanted("rehearsal") {
        rehearsal::the_whole_upgrade_and_its_rollback(&pair);
    }
    if wanted("rollback") {
        rollback::rollback_check_names_what_only_v1_36_keeps_and_the_pins_keep_it(&pair);
    }
    if wanted("share") {
        share::shared_watches_are_what_each_kubelet_gets_straight(&pair);
    }
    if wanted("cluster") {
        cluster::the_endpoints_reconciler_writes_under_the_shipped_rbac(&pair);
        // Last: it stops the old apiserver and starts it again.
        cluster::readiness_follows_an_apiserver_that_stops_and_returns(&pair);
        cluster::skewgate_names_itself_in_the_audit_logs(&pair);
    }
}

/// Whether the checks of `real/<file>.rs` run: all, unless `SKEWGATE_REAL_ONLY` names some
/// (`moves,cluster`), for a developer after one of them.
fn wanted(file: &str) -> bool {
    std::env::var("SKEWGATE_REAL_ONLY").map_or(true, |only| only.split(',').any(|f| f == file))
}
