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

/// The values `talos/patches/` refer to as `${NAME}`.
pub fn placeholders(
    config: &InfraConfig,
    config_path: &Path,
    pins: &Pins<'_>,
) -> Result<BTreeMap<&'static str, String>, InputError> {
    let schematic = worker_schematic(config, config_path, pins)?;
    let first = config
        .workers
        .first()
        .ok_or_else(|| InputError::field(config_path, "workers", "is empty"))?;
    Ok(BTreeMap::from([
        ("API_HOSTNAME", config.api_host()),
        ("INSTALL_DISK", first.install_disk.clone()),
        ("WORKER_NAME", first.name.clone()),
        ("WORKER_INSTALLER_IMAGE", metal_installer(pins, &schematic)?),
    ]))
}

/// Which nodes a patch applies to, from its name (`NN-name[.controlplane|.worker].yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    All,
    ControlPlane,
    Worker,
}

impl Scope {
    pub fn of(name: &str) -> Scope {
        if name.ends_with(".controlplane.yaml") {
            Scope::ControlPlane
        } else if name.ends_with(".worker.yaml") {
            Scope::Worker
        } else {
            Scope::All
        }
    }

    /// The `talosctl gen config` flag that takes such a patch.
    pub fn flag(self) -> &'static str {
        match self {
            Scope::All => "--config-patch",
            Scope::ControlPlane => "--config-patch-control-plane",
            Scope::Worker => "--config-patch-worker",
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
    pub path: PathBuf,
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

/// Renders every `NN-*.yaml` of `patches` into `out_dir`, in name order: a file is written only
/// when its content changed (so its time says when it last changed), and any other `.yaml` left
/// in `out_dir` (a patch since removed) is deleted.
pub fn render_patches(
    values: &BTreeMap<&'static str, String>,
    patches: &Path,
    out_dir: &Path,
) -> Result<Vec<Rendered>, PatchError> {
    let io = |path: &Path, doing| {
        let path = path.to_path_buf();
        move |source| PatchError::Io {
            path,
            doing,
            source,
        }
    };
    let mut names: Vec<String> = fs::read_dir(patches)
        .map_err(io(patches, "cannot list the patches"))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml") && name.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    names.sort();
    fs::create_dir_all(out_dir).map_err(io(out_dir, "cannot create"))?;
    let mut rendered = Vec::new();
    for name in &names {
        let source = patches.join(name);
        let text = fs::read_to_string(&source).map_err(io(&source, "cannot read"))?;
        let filled = fill(&text, values)
            .map_err(|message| InputError::field(&source, "placeholder", message))?;
        let path = out_dir.join(name);
        if fs::read_to_string(&path).ok().as_deref() != Some(filled.as_str()) {
            let partial = out_dir.join(format!(".{name}.part"));
            fs::write(&partial, &filled).map_err(io(&partial, "cannot write"))?;
            fs::rename(&partial, &path).map_err(io(&path, "cannot replace"))?;
        }
        rendered.push(Rendered {
            scope: Scope::of(name),
            path,
        });
    }
    for entry in fs::read_dir(out_dir).map_err(io(out_dir, "cannot list"))? {
        let entry = entry.map_err(io(out_dir, "cannot list"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") && !names.contains(&name) {
            fs::remove_file(entry.path()).map_err(io(&entry.path(), "cannot remove"))?;
        }
    }
    Ok(rendered)
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
}
