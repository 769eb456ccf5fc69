//! What the Talos half of the infra layer takes from the config: the Image Factory schematic the
//! worker's offer needs (the one table mapping offers to kernel arguments), the worker's installer
//! image, and `talos/patches/` rendered with the config's values.
//!
//! Every value that goes into a patch is checked where it enters ([`InfraConfig::check`], with
//! pop-common's shared checks), and is replaced here as text: no `sed` program, no shell, is
//! ever built from it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use pop_common::input::InputError;
use pop_common::pins::Pins;

use crate::config::InfraConfig;

/// `k8s/versions.env` as it was when this binary was built.
pub const PINS: Pins<'static> = Pins::new(include_str!("../../../k8s/versions.env"));

/// The kernel arguments an Elastic Metal offer needs in the Talos image, by offer: the one place
/// that maps offers to arguments.
///
/// - EM-A110X/A111X/A115X/A116X-SSD (HP ProLiant DL320e Gen8 v2): with the IOMMU handling of
///   kernels >= 6.17.13 their SATA link degrades and resets, DMA errors fill the log and the
///   filesystem goes read-only; Scaleway's workaround is the IOMMU in passthrough mode
///   (docs-content pages/elastic-metal/troubleshooting/linux-kernel-incompatibility-ema11xx.mdx).
///   Talos v1.13 ships kernel 6.18 (pkg/machinery/constants DefaultKernelVersion).
const OFFER_KERNEL_ARGS: &[(&[&str], &[&str])] = &[(
    &[
        "EM-A110X-SSD",
        "EM-A111X-SSD",
        "EM-A115X-SSD",
        "EM-A116X-SSD",
    ],
    &["intel_iommu=on", "iommu=pt"],
)];

/// The kernel arguments `offer` needs (none for an offer the table does not name).
pub fn kernel_args(offer: &str) -> &'static [&'static str] {
    OFFER_KERNEL_ARGS
        .iter()
        .find(|(offers, _)| offers.contains(&offer))
        .map_or(&[], |(_, args)| *args)
}

/// An Image Factory schematic: only the customization this project uses, extra kernel arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schematic {
    pub extra_kernel_args: Vec<String>,
}

impl Schematic {
    /// The schematic of the Talos image for `offer`.
    pub fn for_offer(offer: &str) -> Schematic {
        Schematic {
            extra_kernel_args: kernel_args(offer).iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// Its canonical YAML, as the Image Factory marshals it before hashing it (gopkg.in/yaml.v3:
    /// four-space indent, empty fields left out, `customization` always there): what is posted
    /// to `/schematics`, and what the id is the digest of. The arguments come from
    /// [`OFFER_KERNEL_ARGS`], plain scalars that need no quoting (checked by a test).
    pub fn yaml(&self) -> String {
        if self.extra_kernel_args.is_empty() {
            return "customization: {}\n".to_owned();
        }
        let mut text = String::from("customization:\n    extraKernelArgs:\n");
        for arg in &self.extra_kernel_args {
            text.push_str(&format!("        - {arg}\n"));
        }
        text
    }

    /// The schematic's id: the sha256 of [`Schematic::yaml`] (image-factory
    /// pkg/schematic/schematic.go, `ID`).
    pub fn id(&self) -> String {
        pop_common::records::Digest::sha256(self.yaml().as_bytes())
            .hex()
            .to_owned()
    }
}

/// The pins this module reads.
pub const FACTORY_URL: &str = "TALOS_FACTORY_URL";
pub const WORKER_SCHEMATIC: &str = "TALOS_WORKER_SCHEMATIC";
pub const CONTROL_PLANE_SCHEMATIC: &str = "TALOS_CONTROL_PLANE_SCHEMATIC";
pub const TALOS_VERSION: &str = "TALOS_VERSION";

/// The workers' schematic id: the one each worker's offer needs, which must be the pinned one
/// (the pinned image digest goes with it), hence the same for every worker.
pub fn worker_schematic(
    config: &InfraConfig,
    config_path: &Path,
    pins: &Pins<'_>,
) -> Result<String, InputError> {
    let pinned = pins.require(WORKER_SCHEMATIC)?;
    for (i, worker) in config.workers.iter().enumerate() {
        let schematic = Schematic::for_offer(&worker.offer);
        let id = schematic.id();
        if id == pinned {
            continue;
        }
        let args = if schematic.extra_kernel_args.is_empty() {
            "no extra kernel argument".to_owned()
        } else {
            format!("kernel arguments {}", schematic.extra_kernel_args.join(" "))
        };
        return Err(InputError::field(
            config_path,
            config.worker_field(i, "offer"),
            format!(
                "{} needs the Image Factory schematic {id} ({args}), but {} pins \
                 {WORKER_SCHEMATIC}={pinned}: change that pin, then record its image \
                 (make talos-image-digests); every worker runs the one pinned image, so \
                 their offers must need the same kernel arguments",
                worker.offer,
                pop_common::pins::FILE
            ),
        ));
    }
    Ok(pinned.to_owned())
}

/// `<factory host>/metal-installer/<schematic>:<version>`: the worker's installer, which carries
/// the schematic's kernel arguments through every upgrade.
pub fn metal_installer(pins: &Pins<'_>, schematic: &str) -> Result<String, InputError> {
    installer(pins, "metal", schematic)
}

/// `<factory host>/scaleway-installer/<TALOS_CONTROL_PLANE_SCHEMATIC>:<version>`: the control
/// planes' installer. `talosctl upgrade --image` alone decides what is installed, and its
/// default (the release's installer) is the metal profile, whose kernel command line is not a
/// Scaleway Instance's (Talos pkg/imager/profile/default.go; platform/scaleway/scaleway.go).
pub fn scaleway_installer(pins: &Pins<'_>) -> Result<String, InputError> {
    let schematic = pins.require(CONTROL_PLANE_SCHEMATIC)?;
    installer(pins, "scaleway", schematic)
}

/// `<factory host>/<platform>-installer/<schematic>:<version>`, the Image Factory's name of an
/// installer for Talos >= 1.10 (image-factory docs/api.md).
fn installer(pins: &Pins<'_>, platform: &str, schematic: &str) -> Result<String, InputError> {
    let url = pins.require(FACTORY_URL)?;
    let host = url.strip_prefix("https://").ok_or_else(|| {
        InputError::field(
            Path::new(pop_common::pins::FILE),
            FACTORY_URL,
            format!("`{url}` is not an https:// URL"),
        )
    })?;
    let version = pins.require(TALOS_VERSION)?;
    Ok(format!(
        "{}/{platform}-installer/{schematic}:{version}",
        host.trim_end_matches('/')
    ))
}

/// The placeholders whose value is one worker's: only a patch rendered once for each worker
/// (`*.each-worker.yaml`) may use them, or every worker would get the first one's.
pub const WORKER_PLACEHOLDERS: [&str; 2] = ["INSTALL_DISK", "WORKER_NAME"];

/// The values `talos/patches/` refer to as `${NAME}`: the cluster's, the same for every node,
/// and each worker's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Values {
    /// `API_HOSTNAME`, `WORKER_INSTALLER_IMAGE`.
    pub shared: BTreeMap<&'static str, String>,
    /// Each worker's name and what its patches are filled with: the shared values and its own
    /// ([`WORKER_PLACEHOLDERS`]), in the config's order.
    pub workers: Vec<(String, BTreeMap<&'static str, String>)>,
}

/// The values of the config's placeholders (every worker's offer checked against the pinned
/// schematic first).
pub fn placeholders(
    config: &InfraConfig,
    config_path: &Path,
    pins: &Pins<'_>,
) -> Result<Values, InputError> {
    let schematic = worker_schematic(config, config_path, pins)?;
    let shared = BTreeMap::from([
        ("API_HOSTNAME", config.api_host()),
        ("WORKER_INSTALLER_IMAGE", metal_installer(pins, &schematic)?),
    ]);
    let workers = config
        .workers
        .iter()
        .map(|worker| {
            let mut values = shared.clone();
            values.insert("INSTALL_DISK", worker.install_disk.clone());
            values.insert("WORKER_NAME", worker.name.clone());
            (worker.name.clone(), values)
        })
        .collect();
    Ok(Values { shared, workers })
}

/// Which nodes a patch applies to, from its name
/// (`NN-name[.controlplane|.worker|.each-worker].yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    All,
    ControlPlane,
    Worker,
    /// Rendered once for each worker, with that worker's values, and applied to its own config
    /// (`talosctl machineconfig patch` of gen config's `worker.yaml`).
    EachWorker,
}

impl Scope {
    pub fn of(name: &str) -> Scope {
        if name.ends_with(".each-worker.yaml") {
            Scope::EachWorker
        } else if name.ends_with(".controlplane.yaml") {
            Scope::ControlPlane
        } else if name.ends_with(".worker.yaml") {
            Scope::Worker
        } else {
            Scope::All
        }
    }

    /// The `talosctl gen config` flag that takes such a patch; none for a worker's own patch,
    /// which gen config never sees.
    pub fn flag(self) -> Option<&'static str> {
        match self {
            Scope::All => Some("--config-patch"),
            Scope::ControlPlane => Some("--config-patch-control-plane"),
            Scope::Worker => Some("--config-patch-worker"),
            Scope::EachWorker => None,
        }
    }
}

/// Why the patches could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{}: {doing}: {source}", path.display())]
    Io {
        path: PathBuf,
        doing: &'static str,
        source: std::io::Error,
    },
}

/// One rendered patch: where it is and which nodes it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub scope: Scope,
    /// The worker it was rendered for (a `*.each-worker.yaml` patch), by name.
    pub worker: Option<String>,
    pub path: PathBuf,
}

impl Rendered {
    /// The first column of `scw-infra talos-patches`: the gen config flag of a shared patch,
    /// `--each-worker=<name>` for a worker's own (a line the infra pipeline reads as it is).
    pub fn label(&self) -> String {
        match &self.worker {
            Some(name) => format!("--each-worker={name}"),
            None => self.scope.flag().unwrap_or_default().to_owned(),
        }
    }
}

/// `text` with every `${NAME}` of `values` replaced; an unknown or unclosed placeholder is an
/// error naming it.
pub fn fill(text: &str, values: &BTreeMap<&'static str, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| {
            format!(
                "unclosed placeholder `${{{}`",
                after.lines().next().unwrap_or("")
            )
        })?;
        let name = &after[..end];
        let value = values.get(name).ok_or_else(|| {
            format!(
                "unknown placeholder `${{{name}}}` (known: {})",
                values.keys().copied().collect::<Vec<_>>().join(", ")
            )
        })?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn io_error(path: &Path, doing: &'static str) -> impl FnOnce(std::io::Error) -> PatchError {
    let path = path.to_path_buf();
    move |source| PatchError::Io {
        path,
        doing,
        source,
    }
}

/// `text` filled from `values`, its errors naming `source`'s placeholder. A shared patch
/// (`per_worker` false) that uses a worker's value is refused: one config for every worker
/// would carry the first worker's.
fn fill_patch(
    source: &Path,
    text: &str,
    values: &BTreeMap<&'static str, String>,
    per_worker: bool,
) -> Result<String, InputError> {
    if !per_worker
        && let Some(name) = WORKER_PLACEHOLDERS
            .iter()
            .find(|name| text.contains(&format!("${{{name}}}")))
    {
        return Err(InputError::field(
            source,
            "placeholder",
            format!(
                "`${{{name}}}` is one worker's value: only a patch named NN-name.each-worker.yaml, \
                 rendered once for each worker, may use it"
            ),
        ));
    }
    fill(text, values).map_err(|message| InputError::field(source, "placeholder", message))
}

/// Writes `text` to `path` only when its content differs (so the file's time says when it last
/// changed), through a partial file renamed over it.
fn write_if_changed(path: &Path, text: &str) -> Result<(), PatchError> {
    if fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let partial = path.with_file_name(format!(".{name}.part"));
    fs::write(&partial, text).map_err(io_error(&partial, "cannot write"))?;
    fs::rename(&partial, path).map_err(io_error(path, "cannot replace"))
}

/// Deletes every entry of `dir` that `stale` says is left over (a patch since removed, a
/// removed worker's folder).
fn remove_stale(dir: &Path, stale: impl Fn(&str, bool) -> bool) -> Result<(), PatchError> {
    for entry in fs::read_dir(dir).map_err(io_error(dir, "cannot list"))? {
        let entry = entry.map_err(io_error(dir, "cannot list"))?;
        let path = entry.path();
        let is_dir = entry
            .file_type()
            .map_err(io_error(&path, "cannot stat"))?
            .is_dir();
        if !stale(&entry.file_name().to_string_lossy(), is_dir) {
            continue;
        }
        let removed = if is_dir {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_error(&path, "cannot remove"))?;
    }
    Ok(())
}

/// Renders every `NN-*.yaml` of `patches`, in name order: the shared ones into `out_dir`, each
/// `*.each-worker.yaml` once for each worker into `out_dir/workers/<name>/`. Every patch is
/// filled before anything is written (a refused one leaves the folder as it was); a file is
/// written only when its content changed; any other `.yaml` left there (a patch since removed)
/// and the folder of a worker no longer in the config are deleted.
pub fn render_patches(
    values: &Values,
    patches: &Path,
    out_dir: &Path,
) -> Result<Vec<Rendered>, PatchError> {
    let mut names: Vec<String> = fs::read_dir(patches)
        .map_err(io_error(patches, "cannot list the patches"))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml") && name.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    names.sort();
    let (each, shared): (Vec<String>, Vec<String>) = names
        .into_iter()
        .partition(|name| Scope::of(name) == Scope::EachWorker);
    let workers_dir = out_dir.join("workers");
    let mut planned = Vec::new();
    for name in &shared {
        let source = patches.join(name);
        let text = fs::read_to_string(&source).map_err(io_error(&source, "cannot read"))?;
        let filled = fill_patch(&source, &text, &values.shared, false)?;
        let (scope, worker, path) = (Scope::of(name), None, out_dir.join(name));
        planned.push((
            Rendered {
                scope,
                worker,
                path,
            },
            filled,
        ));
    }
    // Then each worker's, in the config's order, each in name order.
    let mut texts = Vec::new();
    for name in &each {
        let source = patches.join(name);
        let text = fs::read_to_string(&source).map_err(io_error(&source, "cannot read"))?;
        texts.push((name, source, text));
    }
    for (worker, values) in &values.workers {
        for (name, source, text) in &texts {
            let filled = fill_patch(source, text, values, true)?;
            let path = workers_dir.join(worker).join(name);
            let worker = Some(worker.clone());
            planned.push((
                Rendered {
                    scope: Scope::EachWorker,
                    worker,
                    path,
                },
                filled,
            ));
        }
    }
    for (rendered, text) in &planned {
        let dir = rendered.path.parent().unwrap_or(out_dir);
        fs::create_dir_all(dir).map_err(io_error(dir, "cannot create"))?;
        write_if_changed(&rendered.path, text)?;
    }
    fs::create_dir_all(out_dir).map_err(io_error(out_dir, "cannot create"))?;
    remove_stale(out_dir, |name, is_dir| {
        !is_dir && name.ends_with(".yaml") && !shared.iter().any(|s| s == name)
    })?;
    if workers_dir.is_dir() {
        remove_stale(&workers_dir, |name, is_dir| {
            !is_dir || !values.workers.iter().any(|(worker, _)| worker == name)
        })?;
        for (worker, _) in &values.workers {
            let dir = workers_dir.join(worker);
            if dir.is_dir() {
                remove_stale(&dir, |name, is_dir| {
                    !is_dir && name.ends_with(".yaml") && !each.iter().any(|e| e == name)
                })?;
            }
        }
    }
    Ok(planned.into_iter().map(|(rendered, _)| rendered).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_default_schematic_has_the_id_the_image_factory_gives_it() {
        // image-factory README: "376567988ad3...: default schematic (without any
        // customizations)": the same digest, so the canonical form here is the factory's.
        let default = Schematic::for_offer("EM-B111X-SATA");
        assert_eq!(default.yaml(), "customization: {}\n");
        assert_eq!(
            default.id(),
            "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
        );
        assert_eq!(
            default.id(),
            PINS.require("TALOS_CONTROL_PLANE_SCHEMATIC").unwrap()
        );
    }

    #[test]
    fn each_kind_of_node_gets_its_platforms_installer_of_the_pinned_version() {
        let version = PINS.require(TALOS_VERSION).unwrap();
        assert_eq!(
            scaleway_installer(&PINS).unwrap(),
            format!(
                "factory.talos.dev/scaleway-installer/{}:{version}",
                PINS.require(CONTROL_PLANE_SCHEMATIC).unwrap()
            )
        );
        let worker = PINS.require(WORKER_SCHEMATIC).unwrap();
        assert_eq!(
            metal_installer(&PINS, worker).unwrap(),
            format!("factory.talos.dev/metal-installer/{worker}:{version}")
        );
    }

    #[test]
    fn every_em_a11xx_offer_gets_the_iommu_passthrough_schematic_that_is_pinned() {
        for offer in [
            "EM-A110X-SSD",
            "EM-A111X-SSD",
            "EM-A115X-SSD",
            "EM-A116X-SSD",
        ] {
            let schematic = Schematic::for_offer(offer);
            assert_eq!(schematic.extra_kernel_args, ["intel_iommu=on", "iommu=pt"]);
            assert_eq!(
                schematic.yaml(),
                "customization:\n    extraKernelArgs:\n        - intel_iommu=on\n        - iommu=pt\n"
            );
            assert_eq!(
                schematic.id(),
                PINS.require(WORKER_SCHEMATIC).unwrap(),
                "{offer}"
            );
        }
    }

    #[test]
    fn every_kernel_argument_is_a_plain_yaml_scalar() {
        for (_, args) in OFFER_KERNEL_ARGS {
            for arg in *args {
                assert!(
                    arg.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"=_.,-".contains(&b)),
                    "{arg}"
                );
            }
        }
    }

    #[test]
    fn placeholders_are_filled_and_an_unknown_one_is_named() {
        let values = BTreeMap::from([("A", "1".to_owned()), ("B", "two".to_owned())]);
        assert_eq!(
            fill("x ${A} y ${B}${A}\n", &values).unwrap(),
            "x 1 y two1\n"
        );
        assert_eq!(fill("no placeholder", &values).unwrap(), "no placeholder");
        let err = fill("disk: ${C}\n", &values).unwrap_err();
        assert!(
            err.contains("unknown placeholder `${C}` (known: A, B)"),
            "{err}"
        );
        let err = fill("disk: ${A\n", &values).unwrap_err();
        assert!(err.contains("unclosed placeholder"), "{err}");
    }

    /// Two workers' values, as [`placeholders`] makes them.
    fn two_workers() -> Values {
        let shared = BTreeMap::from([("API_HOSTNAME", "api.example.com".to_owned())]);
        let worker = |name: &str, disk: &str| {
            let mut values = shared.clone();
            values.insert("WORKER_NAME", name.to_owned());
            values.insert("INSTALL_DISK", disk.to_owned());
            (name.to_owned(), values)
        };
        Values {
            workers: vec![
                worker("edge-b", "/dev/nvme0n1"),
                worker("edge-a", "/dev/sda"),
            ],
            shared,
        }
    }

    fn patches(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    fn listing(rendered: &[Rendered], out: &Path) -> Vec<String> {
        rendered
            .iter()
            .map(|r| {
                let path = r.path.strip_prefix(out).unwrap().display();
                format!("{}\t{path}", r.label())
            })
            .collect()
    }

    #[test]
    fn each_worker_gets_its_own_patches_after_the_shared_ones_in_config_order() {
        let src = patches(&[
            ("10-all.yaml", "a: 1\n"),
            ("30-sans.controlplane.yaml", "san: ${API_HOSTNAME}\n"),
            ("50-disk.each-worker.yaml", "disk: ${INSTALL_DISK}\n"),
            ("70-label.worker.yaml", "label: x\n"),
            (
                "75-name.each-worker.yaml",
                "name: ${WORKER_NAME} of ${API_HOSTNAME}\n",
            ),
            ("README.md", "not a patch"),
        ]);
        let out = tempfile::tempdir().unwrap();
        let rendered = render_patches(&two_workers(), src.path(), out.path()).unwrap();
        assert_eq!(
            listing(&rendered, out.path()),
            [
                "--config-patch\t10-all.yaml",
                "--config-patch-control-plane\t30-sans.controlplane.yaml",
                "--config-patch-worker\t70-label.worker.yaml",
                "--each-worker=edge-b\tworkers/edge-b/50-disk.each-worker.yaml",
                "--each-worker=edge-b\tworkers/edge-b/75-name.each-worker.yaml",
                "--each-worker=edge-a\tworkers/edge-a/50-disk.each-worker.yaml",
                "--each-worker=edge-a\tworkers/edge-a/75-name.each-worker.yaml",
            ]
        );
        let read = |path: &str| fs::read_to_string(out.path().join(path)).unwrap();
        assert_eq!(
            read("workers/edge-a/50-disk.each-worker.yaml"),
            "disk: /dev/sda\n"
        );
        assert_eq!(
            read("workers/edge-b/50-disk.each-worker.yaml"),
            "disk: /dev/nvme0n1\n"
        );
        assert_eq!(
            read("workers/edge-b/75-name.each-worker.yaml"),
            "name: edge-b of api.example.com\n"
        );
        assert!(!out.path().join("50-disk.each-worker.yaml").exists());
    }

    #[test]
    fn a_rerun_rewrites_only_what_changed_and_removes_a_gone_workers_folder() {
        let src = patches(&[
            ("10-all.yaml", "a: 1\n"),
            ("75-name.each-worker.yaml", "name: ${WORKER_NAME}\n"),
        ]);
        let out = tempfile::tempdir().unwrap();
        let mut values = two_workers();
        render_patches(&values, src.path(), out.path()).unwrap();
        let a = out.path().join("workers/edge-a/75-name.each-worker.yaml");
        let a_time = fs::metadata(&a).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        // edge-b gone; edge-a's disk changed, which its name patch does not use.
        values.workers.remove(0);
        values.workers[0]
            .1
            .insert("INSTALL_DISK", "/dev/sdb".to_owned());
        fs::write(out.path().join("05-removed.yaml"), "x: 1\n").unwrap();
        fs::write(
            out.path()
                .join("workers/edge-a/05-removed.each-worker.yaml"),
            "x\n",
        )
        .unwrap();
        render_patches(&values, src.path(), out.path()).unwrap();
        assert!(!out.path().join("workers/edge-b").exists());
        assert_eq!(fs::metadata(&a).unwrap().modified().unwrap(), a_time);
        assert!(!out.path().join("05-removed.yaml").exists());
        assert!(
            !out.path()
                .join("workers/edge-a/05-removed.each-worker.yaml")
                .exists()
        );
        assert!(out.path().join("10-all.yaml").exists());
    }

    #[test]
    fn a_shared_patch_with_a_workers_value_is_refused_naming_it_and_nothing_is_written() {
        for placeholder in WORKER_PLACEHOLDERS {
            let src = patches(&[
                ("10-all.yaml", "a: 1\n"),
                (
                    "50-disk.worker.yaml",
                    &format!("disk: ${{{placeholder}}}\n"),
                ),
            ]);
            let out = tempfile::tempdir().unwrap();
            let err = render_patches(&two_workers(), src.path(), out.path())
                .unwrap_err()
                .to_string();
            testkit::process::assert_says_all(
                &err,
                &[
                    "50-disk.worker.yaml",
                    &format!("`${{{placeholder}}}` is one worker's value"),
                    ".each-worker.yaml",
                ],
            );
            assert_eq!(
                fs::read_dir(out.path()).unwrap().count(),
                0,
                "{placeholder}"
            );
        }
    }

    #[test]
    fn the_config_gives_each_worker_its_own_name_and_disk() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/infra.example.json");
        let mut raw: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&example).unwrap()).unwrap();
        let mut second = raw["workers"][0].clone();
        second["name"] = "edge-worker-2".into();
        second["install_disk"] = "/dev/nvme0n1".into();
        raw["workers"].as_array_mut().unwrap().push(second);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("infra.json");
        fs::write(&path, raw.to_string()).unwrap();
        let config = InfraConfig::load(&path, Some("/home/me")).unwrap();
        let values = placeholders(&config, &path, &PINS).unwrap();
        assert!(
            values
                .shared
                .keys()
                .all(|k| !WORKER_PLACEHOLDERS.contains(k))
        );
        let workers: Vec<(&str, &str, &str)> = values
            .workers
            .iter()
            .map(|(name, v)| {
                (
                    name.as_str(),
                    v["WORKER_NAME"].as_str(),
                    v["INSTALL_DISK"].as_str(),
                )
            })
            .collect();
        assert_eq!(
            workers,
            [
                ("edge-worker-1", "edge-worker-1", "/dev/sda"),
                ("edge-worker-2", "edge-worker-2", "/dev/nvme0n1")
            ]
        );
    }
}
