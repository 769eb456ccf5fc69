//! How edgepop's CronJobs run (the hourly list refresh, the etcd backup): one way for both, so
//! an operator reading one knows the other.

use serde_json::{Value, json};

/// A CronJob named by `metadata` that runs `pod` (a pod template: its metadata and spec) on
/// `schedule`:
/// - runs never overlap (`Forbid`): a slow run is not joined by the next;
/// - a run missed by more than ten minutes (the controller was down) is skipped, not started late;
/// - the last three runs of each outcome are kept, for `kubectl logs`;
/// - a failed pod is tried once more, and a run is stopped after `active_deadline_seconds`.
pub fn cron_job(
    metadata: Value,
    schedule: &str,
    active_deadline_seconds: u32,
    pod: Value,
) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata,
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {
                "backoffLimit": 1,
                "activeDeadlineSeconds": active_deadline_seconds,
                "template": pod,
            }},
        },
    })
}
