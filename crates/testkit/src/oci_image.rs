//! What the registry tests of `oci-image` share: two tiny filter layouts in a folder, with an edge
//! config naming a registry, and their `publish` with only the test's credentials.

#![allow(clippy::unwrap_used)] // a test helper: a failed write or spawn fails the test

use std::path::Path;
use std::process::{Command, Output};

/// The variables that give `oci-image` registry credentials; none of the machine's may reach a
/// test that gives its own.
const CREDENTIALS: [&str; 3] = [
    "EDGEPOP_REGISTRY_USERNAME",
    "EDGEPOP_REGISTRY_PASSWORD",
    "EDGEPOP_REGISTRY_AUTH_FILE",
];

/// In `dir`: the layouts `f` and `l`, each of a module that is the wasm header and its name
/// (what is pushed is not what these tests check), made by `oci_image filter`; and `edge.json`
/// naming the registry namespace `namespace`.
pub fn tiny_layouts(oci_image: impl Fn() -> Command, dir: &Path, namespace: &str) {
    for name in ["f", "l"] {
        std::fs::write(
            dir.join(format!("{name}.wasm")),
            format!("\0asm\x01\0\0\0{name}"),
        )
        .unwrap();
        let out = oci_image()
            .current_dir(dir)
            .args(["filter", "--wasm", &format!("{name}.wasm"), "--out", name])
            .env_remove("EDGEPOP_LOG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "oci-image filter {name}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(
        dir.join("edge.json"),
        serde_json::json!({"images": {"registry": namespace}}).to_string(),
    )
    .unwrap();
}

/// `oci_image publish` of the layouts [`tiny_layouts`] made in `dir`, with the credentials of
/// `env` and no others.
pub fn publish(mut oci_image: Command, dir: &Path, env: &[(&str, &str)]) -> Output {
    oci_image
        .current_dir(dir)
        .args([
            "publish",
            "--edge-config",
            "edge.json",
            "--filter",
            "f",
            "--lists",
            "l",
        ])
        .env_remove("EDGEPOP_LOG");
    for var in CREDENTIALS {
        oci_image.env_remove(var);
    }
    oci_image.envs(env.iter().copied()).output().unwrap()
}
