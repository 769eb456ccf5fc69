use std::ffi::OsString;

use super::*;

const RECIPIENT: &str = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";

fn env(pairs: &[(&str, &str)]) -> Env {
    Env::from_pairs(
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    )
}

/// Object Storage's keys as the CronJob's Secret gives them, and `extra` variables.
fn keys_and(extra: &[(&str, &str)]) -> Env {
    let mut pairs = vec![
        ("HOME", "/nonexistent"),
        ("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX"),
        ("SCW_SECRET_KEY", "11111111-1111-1111-1111-111111111111"),
        (
            "SCW_DEFAULT_PROJECT_ID",
            "22222222-2222-2222-2222-222222222222",
        ),
    ];
    pairs.extend_from_slice(extra);
    env(&pairs)
}

fn keys() -> Env {
    keys_and(&[])
}

/// The arguments of a CronJob's run with these three fields, and `extra`.
fn cli_of(cluster: &str, bucket: &str, recipient: &str, extra: &[&str]) -> Cli {
    let mut args = vec!["etcd-backup", "--cluster", cluster, "--bucket", bucket];
    args.extend([
        "--region",
        "fr-par",
        "--age-recipient",
        recipient,
        "--node",
        "10.0.0.2",
    ]);
    args.extend_from_slice(extra);
    Cli::parse_from(args)
}

fn cli(extra: &[&str]) -> Cli {
    cli_of("edge-par", "edgepop-edge-par-22222222", RECIPIENT, extra)
}

fn refused(cli: Cli, env: &Env, needle: &str) {
    match resolve(cli, env) {
        Err(err @ Error::Usage(_)) | Err(err @ Error::Credentials(_)) => {
            assert!(err.to_string().contains(needle), "`{needle}` not in: {err}");
        }
        other => panic!("not refused as a usage error: {other:?}"),
    }
}

#[test]
fn a_run_is_resolved_with_the_in_cluster_defaults() {
    let config = resolve(cli(&["--keep", "48"]), &keys()).unwrap();
    assert_eq!(config.prefix, "edge-par");
    assert_eq!(config.keep, Some(48));
    assert_eq!(config.s3_endpoint, "https://s3.fr-par.scw.cloud");
    assert_eq!(
        config.programs.talosconfig,
        Path::new("/var/run/secrets/talos.dev/config")
    );
    let moved = keys_and(&[
        ("SCW_S3_ENDPOINT", "http://127.0.0.1:9000"),
        ("TMPDIR", "/scratch"),
    ]);
    let config = resolve(cli(&["--prefix", "backups/etcd"]), &moved).unwrap();
    assert_eq!(config.s3_endpoint, "http://127.0.0.1:9000");
    assert_eq!(config.prefix, "backups/etcd");
    assert_eq!(config.work_dir.as_deref(), Some(Path::new("/scratch")));
}

#[test]
fn every_bad_field_is_refused_by_its_name() {
    refused(cli(&["--keep", "0"]), &keys(), "--keep: 0 would delete");
    refused(
        cli(&["--node", "talos.default"]),
        &keys(),
        "--node: \"talos.default\" is not an IP address",
    );
    refused(cli(&["--prefix", "a//b"]), &keys(), "--prefix: \"a//b\"");
    refused(cli(&["--prefix", "../x"]), &keys(), "--prefix");
    refused(
        cli_of("Edge_Par", "b-1", RECIPIENT, &[]),
        &keys(),
        "--cluster: `Edge_Par` is not a cluster name",
    );
    refused(
        cli_of("edge-par", "Bucket", RECIPIENT, &[]),
        &keys(),
        "--bucket: \"Bucket\" is not a bucket name",
    );
    for (recipient, says) in [
        (
            "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ",
            "--age-recipient: this is an age identity",
        ),
        (
            "/etc/age/key.pub",
            "--age-recipient: \"/etc/age/key.pub\" is not an age public key",
        ),
        ("age1short", "is not an age public key"),
    ] {
        refused(cli_of("edge-par", "b-1", recipient, &[]), &keys(), says);
    }
    refused(
        cli(&[]),
        &env(&[("HOME", "/nonexistent")]),
        "SCW_ACCESS_KEY",
    );
    let plain_http = keys_and(&[("SCW_S3_ENDPOINT", "http://s3.example.com")]);
    refused(cli(&[]), &plain_http, "SCW_S3_ENDPOINT");
}

#[test]
fn talosctl_s_status_line_is_read_and_anything_else_is_not() {
    let said = "etcd snapshot saved to \"/tmp/x\" (20512 bytes)\n\
                snapshot info: hash 784c5685, revision 3, total keys 2, total size 20480\n";
    let status = parse_snapshot_info(said).unwrap();
    assert_eq!(
        (
            status.hash.as_str(),
            status.revision,
            status.total_keys,
            status.total_size
        ),
        ("784c5685", 3, 2, 20480)
    );
    for bad in [
        "",
        "snapshot info: hash 784c568, revision 3, total keys 2, total size 20480",
        "snapshot info: hash 784c5685, revision x, total keys 2, total size 20480",
        "snapshot info: hash 784c5685, revision 3, total size 20480",
    ] {
        assert_eq!(parse_snapshot_info(bad), None, "{bad}");
    }
}

#[test]
fn names_sort_as_times_and_only_this_cluster_s_backups_are_pruned() {
    // 2026-06-19T17:00:00Z
    assert_eq!(
        object_name("edge-par", 1_781_888_400),
        "edge-par-20260619T170000Z.snapshot.age"
    );
    let names: Vec<String> = [1_781_888_400, 1_781_892_000, 1_781_895_600]
        .into_iter()
        .map(|t| format!("edge-par/{}", object_name("edge-par", t)))
        .collect();
    let mut keys = vec![
        names[2].clone(),
        names[0].clone(),
        names[1].clone(),
        "edge-par/notes.txt".to_owned(),
        "edge-par/edge-par-2-20200101T000000Z.snapshot.age".to_owned(),
        "other/edge-par-20200101T000000Z.snapshot.age".to_owned(),
    ];
    assert_eq!(
        to_prune(&keys, "edge-par", "edge-par", 2),
        [names[0].clone()]
    );
    assert_eq!(
        to_prune(&keys, "edge-par", "edge-par", 1),
        names[..2].to_vec()
    );
    assert!(to_prune(&keys, "edge-par", "edge-par", 3).is_empty());
    keys.clear();
    assert!(to_prune(&keys, "edge-par", "edge-par", 1).is_empty());
    assert!(!is_backup_name(
        "edge-par",
        "edge-par-2026061T170000Z.snapshot.age"
    ));
    assert!(!is_backup_name(
        "edge-par",
        "edge-par-20260619T170000Z.snapshot"
    ));
}

#[test]
fn a_snapshot_whose_trailer_is_not_its_sha256_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let database = vec![7u8; 4096];
    let mut whole = database.clone();
    whole.extend_from_slice(&Sha256::digest(&database));
    std::fs::write(&path, &whole).unwrap();
    assert_eq!(check_trailer(&path).unwrap(), 4096 + 32);

    whole[100] ^= 1;
    std::fs::write(&path, &whole).unwrap();
    let err = check_trailer(&path).unwrap_err().to_string();
    assert!(err.contains("is not its trailer"), "{err}");

    std::fs::write(&path, &whole[..4000]).unwrap();
    let err = check_trailer(&path).unwrap_err().to_string();
    assert!(err.contains("4000 bytes: no sha256 trailer"), "{err}");
}

#[test]
fn without_node_the_control_planes_are_read_from_the_cluster_s_talos_endpoint_slice() {
    let bare = |extra: &[&str]| {
        let mut args = vec!["etcd-backup", "--cluster", "edge-par", "--bucket", "b-1"];
        args.extend(["--region", "fr-par", "--age-recipient", RECIPIENT]);
        args.extend_from_slice(extra);
        Cli::parse_from(args)
    };
    refused(
        bare(&[]),
        &keys(),
        "--node: none given, and not in a cluster",
    );
    let in_pod = keys_and(&[
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ]);
    let config = resolve(bare(&[]), &in_pod).unwrap();
    assert_eq!(
        config.nodes,
        Nodes::FromCluster(ClusterApi {
            base: "https://10.96.0.1:443".into(),
            ca_file: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt".into(),
            token_file: "/var/run/secrets/kubernetes.io/serviceaccount/token".into(),
        })
    );
    refused(
        bare(&["--api-server", "ftp://x"]),
        &keys(),
        "--api-server: \"ftp://x\" is not an http(s) URL",
    );
    assert!(
        Cli::try_parse_from([
            "etcd-backup",
            "--node",
            "10.0.0.2",
            "--api-server",
            "https://a"
        ])
        .is_err()
    );

    // As Talos writes it (endpoint.go l.331-358 at v1.13.9), and an endpoint another writer
    // marked not ready.
    let slice = serde_json::json!({
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1", "addressType": "IPv4",
        "metadata": {"name": "talos-ipv4", "namespace": "default"},
        "ports": [{"name": "apid", "port": 50000, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["172.16.0.2"], "conditions": {"ready": true, "serving": true, "terminating": false}},
            {"addresses": ["172.16.0.3"], "conditions": {"ready": false}},
            {"addresses": ["172.16.0.4"], "conditions": {"ready": true}},
        ],
    });
    assert_eq!(talos_api_addresses(&slice), ["172.16.0.2", "172.16.0.4"]);
    assert!(talos_api_addresses(&serde_json::json!({"endpoints": null})).is_empty());
}
