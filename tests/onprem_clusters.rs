//! The on-premises clusters of the repository: `clusters/<name>/{onprem.json,secrets.sops.yaml}`,
//! committed, and `make ... CLUSTER=<name>`, which renders each into a folder of its own; a
//! config named by `PLATFORM_CONFIG` is rendered again at every run, so that switching configs
//! never reuses another cluster's render; `.sops.yaml` gives each cluster's file its recipients.
//! make runs as the operator runs it, with the recording helm and kubectl, the real sops.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::onprem_profile::{
    OnpremMake, TEST_RECIPIENT, assert_only_reads, key, output_text, sops_file, without_sops_keys,
    write_kubeconfig,
};

const TEST: &str = "onprem_clusters";

fn repo() -> PathBuf {
    testkit::workspace::root()
}

/// `clusters/<name>/` under `root` as docs/onprem.md has the operator make it: the example config
/// with its name, its own API server and the SOPS file beside it; returns its endpoint.
fn add_cluster(root: &Path, folder: &str, cluster_name: &str) -> String {
    let dir = root.join("clusters").join(folder);
    fs::create_dir_all(&dir).unwrap();
    let mut config: Value = serde_json::from_str(
        &fs::read_to_string(repo().join("config/onprem.example.json")).unwrap(),
    )
    .unwrap();
    let endpoint = format!("https://api.{cluster_name}.k8s.exemple.fr:6443");
    config["cluster_name"] = Value::String(cluster_name.to_owned());
    config["cluster_endpoint"] = Value::String(endpoint.clone());
    config["secrets"] = Value::String("secrets.sops.yaml".to_owned());
    fs::write(dir.join("onprem.json"), config.to_string()).unwrap();
    fs::copy(sops_file(), dir.join("secrets.sops.yaml")).unwrap();
    endpoint
}

/// The names the render shares with make, `KEY=value` a line.
fn status_name(render: &Path, key: &str) -> String {
    let text = fs::read_to_string(render.join("status.env")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .to_owned()
}

/// `make diff-platform` of a cluster through the kubeconfig `kubeconfig`.
fn diff(world: &OnpremMake, kubeconfig: &Path, how: &[String]) -> Output {
    let mut args = vec![
        format!("OUT={}", world.path("out").display()),
        format!("KUBECONFIG={}", kubeconfig.display()),
    ];
    args.extend_from_slice(how);
    world.make("diff-platform", &args)
}

#[test]
fn make_renders_each_cluster_of_the_repository_into_a_folder_of_its_own() {
    let Some(world) = OnpremMake::new() else {
        return;
    };
    let root = world.dir.path();
    let clusters = format!("CLUSTERS_DIR={}", root.join("clusters").display());
    let mut kubeconfigs = Vec::new();
    for name in ["alpha", "beta"] {
        let endpoint = add_cluster(root, name, name);
        let kubeconfig = root.join(format!("{name}.kubeconfig"));
        write_kubeconfig(&kubeconfig, &endpoint);
        kubeconfigs.push(kubeconfig);
    }
    for (name, kubeconfig) in ["alpha", "beta"].iter().zip(&kubeconfigs) {
        let out = diff(
            &world,
            kubeconfig,
            &[clusters.clone(), format!("CLUSTER={name}")],
        );
        assert!(out.status.success(), "{name}: {}", output_text(&out));
        assert!(
            world
                .take_calls()
                .iter()
                .any(|c| c.starts_with("kubectl diff"))
        );
    }
    let renders = root.join("out/clusters");
    assert_eq!(testkit::file_names(&renders), ["alpha", "beta"]);
    for name in ["alpha", "beta"] {
        let render = renders.join(name).join("platform-values");
        assert_eq!(status_name(&render, "CLUSTER_NAME"), name);
        assert!(render.join("components.tsv").is_file());
    }

    // alpha's render, beta's kubeconfig: refused before any call, never acted on with the
    // other's render.
    let out = diff(
        &world,
        &kubeconfigs[1],
        &[clusters.clone(), "CLUSTER=alpha".into()],
    );
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("api.alpha."),
        "{}",
        output_text(&out)
    );
    assert_eq!(world.take_calls(), Vec::<String>::new());

    // A folder whose config is another cluster's: refused naming the field, nothing rendered.
    add_cluster(root, "gamma", "alpha");
    let out = diff(
        &world,
        &kubeconfigs[0],
        &[clusters.clone(), "CLUSTER=gamma".into()],
    );
    assert_ne!(out.status.code(), Some(0));
    let text = output_text(&out);
    assert!(
        text.contains("cluster_name") && text.contains("`alpha` is not `gamma`"),
        "{text}"
    );
    assert!(!renders.join("gamma").exists(), "something was rendered");
    assert_eq!(world.take_calls(), Vec::<String>::new());
}

/// PLATFORM_CONFIG works as before beside CLUSTER, into the profile's one folder: a config
/// older than the render there, another cluster's, is rendered all the same.
#[test]
fn switching_platform_config_renders_again_even_from_an_older_file() {
    let Some(world) = OnpremMake::new() else {
        return;
    };
    let root = world.dir.path();
    let alpha = add_cluster(root, "alpha", "alpha");
    let beta = add_cluster(root, "beta", "beta");
    let config = |name: &str| {
        format!(
            "PLATFORM_CONFIG={}",
            root.join("clusters")
                .join(name)
                .join("onprem.json")
                .display()
        )
    };
    // beta's config was written before alpha's render.
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(root.join("clusters/beta/onprem.json"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    for (name, endpoint) in [("alpha", &alpha), ("beta", &beta)] {
        let kubeconfig = root.join(format!("{name}.kubeconfig"));
        write_kubeconfig(&kubeconfig, endpoint);
        let out = diff(
            &world,
            &kubeconfig,
            &["PROFILE=onprem".into(), config(name)],
        );
        assert!(out.status.success(), "{name}: {}", output_text(&out));
        let render = root.join("out/platform-values-onprem");
        assert_eq!(status_name(&render, "CLUSTER_NAME"), name);
    }

    // Both at once name the config twice: refused by make before anything.
    let out = world.make("diff-platform", &["CLUSTER=alpha".into(), config("alpha")]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        output_text(&out).contains("both name the config"),
        "{}",
        output_text(&out)
    );
}

/// The clusters' files are committed: nothing in .gitignore keeps them out.
#[test]
fn a_cluster_s_config_and_secrets_are_not_ignored_by_git() {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo())
        .args([
            "check-ignore",
            "--no-index",
            "--verbose",
            "clusters/demo/onprem.json",
            "clusters/demo/secrets.sops.yaml",
            "clusters/prod/onprem.json",
        ])
        .output()
        .unwrap();
    // 1: none of them is ignored.
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
}

/// The committed .sops.yaml with a cluster's rule added as docs/onprem.md says: sops encrypts
/// that cluster's file to the rule's recipients; a cluster without a rule is refused unless the
/// command line names its recipients, as for a file outside clusters/.
#[test]
fn sops_yaml_gives_each_cluster_s_file_its_rule_s_recipients() {
    let Some(sops) = testkit::upstream::program(TEST, "sops") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let committed = fs::read_to_string(repo().join(".sops.yaml")).unwrap();
    let rule = format!(
        "  - path_regex: ^clusters/alpha/secrets\\.sops\\.yaml$\n    age: {TEST_RECIPIENT}\n"
    );
    let at = committed.find("  # Any other file").unwrap();
    fs::write(
        dir.path().join(".sops.yaml"),
        format!("{}{rule}{}", &committed[..at], &committed[at..]),
    )
    .unwrap();
    let clear = dir.path().join("clear.yaml");
    fs::write(&clear, "ceph: {user_key: test-only-ceph-user-key}\n").unwrap();
    let encrypt = |target: &str, extra: &[&str]| {
        let mut cmd = Command::new(&sops);
        without_sops_keys(&mut cmd);
        cmd.current_dir(dir.path())
            .args(["encrypt", "--filename-override", target])
            .args(extra)
            .arg(&clear)
            .env("SOPS_AGE_KEY_FILE", key());
        cmd.output().unwrap()
    };
    let out = encrypt("clusters/alpha/secrets.sops.yaml", &[]);
    let text = testkit::process::success_stdout(&out);
    assert!(
        text.contains(&format!("recipient: {TEST_RECIPIENT}")),
        "{text}"
    );
    assert!(!text.contains("test-only-ceph-user-key"));

    let out = encrypt("clusters/beta/secrets.sops.yaml", &[]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        output_text(&out).contains("empty key group provided"),
        "{}",
        output_text(&out)
    );
    let out = encrypt(
        "clusters/beta/secrets.sops.yaml",
        &["--age", TEST_RECIPIENT],
    );
    testkit::process::success_stdout(&out);
}

/// `make destroy-platform CLUSTER=alpha` through alpha's own kubeconfig, `args` added, the
/// stand-ins' `env` given.
fn destroy_platform_of_alpha(world: &OnpremMake, args: &[String], env: &[(&str, &str)]) -> Output {
    let root = world.dir.path();
    let endpoint = add_cluster(root, "alpha", "alpha");
    let kubeconfig = root.join("alpha.kubeconfig");
    write_kubeconfig(&kubeconfig, &endpoint);
    let mut all = vec![
        format!("OUT={}", root.join("out").display()),
        format!("CLUSTERS_DIR={}", root.join("clusters").display()),
        "CLUSTER=alpha".into(),
        format!("KUBECONFIG={}", kubeconfig.display()),
    ];
    all.extend_from_slice(args);
    world.make_with("destroy-platform", &all, env)
}

/// make destroy-platform shows what goes, the CNI first among what the releases take with them,
/// then asks; without a terminal it is refused and nothing is changed.
#[test]
fn make_destroy_platform_shows_what_goes_before_it_asks() {
    let Some(world) = OnpremMake::new() else {
        return;
    };
    let out = destroy_platform_of_alpha(&world, &[], &[]);
    assert_ne!(out.status.code(), Some(0));
    let text = output_text(&out);
    let cni = text.find("Cilium is the cluster's CNI").expect(&text);
    let storage = text.find("its StorageClass ceph-rbd").expect(&text);
    let question = text
        .find(
            "refusing to destroy the platform layer (onprem, as listed above) of the cluster alpha",
        )
        .expect(&text);
    assert!(storage < cni && cni < question, "{text}");
    assert_only_reads(&world.take_calls());
}

/// DELETE_CRDS=yes deletes the CRDs of every group the profile's charts bring, Traefik Hub's
/// among them (Traefik's crds/ holds both groups), and no other.
#[test]
fn delete_crds_deletes_the_groups_of_traefik_s_crds_folder_and_no_other() {
    let Some(world) = OnpremMake::new() else {
        return;
    };
    let crd = |name: &str| format!("customresourcedefinition.apiextensions.k8s.io/{name}");
    let listed = [
        "middlewares.traefik.io",
        "apis.hub.traefik.io",
        "uplinks.hub.traefik.io",
        "widgets.example.com",
    ]
    .map(crd)
    .join(" ");
    let out = destroy_platform_of_alpha(
        &world,
        &["CONFIRM=yes".into(), "DELETE_CRDS=yes".into()],
        &[("STANDIN_KUBECTL_CRDS", &listed)],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("hub.traefik.io"),
        "{}",
        output_text(&out)
    );
    let calls = world.take_calls();
    let delete = calls
        .iter()
        .find(|c| c.starts_with("kubectl delete --wait"))
        .unwrap_or_else(|| panic!("no CRD deleted: {calls:#?}"));
    for ours in [
        "middlewares.traefik.io",
        "apis.hub.traefik.io",
        "uplinks.hub.traefik.io",
    ] {
        assert!(delete.contains(&crd(ours)), "{ours}: {delete}");
    }
    assert!(!delete.contains("widgets.example.com"), "{delete}");
}
