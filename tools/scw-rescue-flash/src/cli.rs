//! The command line of `scw-rescue-flash`, checked and resolved into what `run` needs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pop_common::tool::Env;
use scaleway::Credentials;
use scaleway::http::UrlRefusal;

use crate::Error;

/// Write the Talos image onto the Elastic Metal nodes from rescue mode.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "scw-rescue-flash", version)]
pub struct Cli {
    /// The Talos disk image, zstd-compressed (metal-amd64.raw.zst from the Image Factory).
    #[arg(long, required_unless_present_any = ["tag_proven", "tag_upgraded"])]
    pub image: Option<PathBuf>,
    /// The disk to write on a node whose inventory records no install_disk (scw-infra apply
    /// records each worker's, from the infra config); Scaleway may present NVMe.
    #[arg(long)]
    pub disk: Option<String>,
    /// The SSH private key whose public half scw-infra registered [default: ~/.ssh/id_ed25519].
    #[arg(long)]
    pub ssh_key: Option<PathBuf>,
    /// SSH user in rescue [default: the server's rescue_server.user].
    #[arg(long)]
    pub ssh_user: Option<String>,
    #[arg(long, default_value_t = 22)]
    pub ssh_port: u16,
    /// How many times to check for the rescue system's SSH.
    #[arg(long, default_value_t = 60)]
    pub ssh_tries: u32,
    /// How many times to check for a change of the server's state (stopped, ready in a boot,
    /// its rescue credentials shown): by default two hours at the default interval, the bound
    /// Scaleway's SDK gives an Elastic Metal server's transient states (WaitForServer).
    #[arg(long, default_value_t = 720)]
    pub state_tries: u32,
    /// Seconds between two checks.
    #[arg(long, default_value_t = 10)]
    pub ssh_interval_seconds: u64,
    /// More Scaleway SSH key ids for the rescue system, besides the inventory's.
    #[arg(long = "ssh-key-id")]
    pub ssh_key_ids: Vec<String>,
    /// Let the rescue system download the image itself from this https URL (the same file as
    /// --image, whose sha256 the download must have before the disk is touched).
    #[arg(long, value_name = "URL")]
    pub image_url: Option<String>,
    /// Where the image is decompressed: `rescue` sends the .zst as it is and runs `zstd -dc`
    /// there, `local` sends the raw image, `auto` is `rescue` when the rescue system has zstd
    /// and the .zst is at most nine tenths of the raw image.
    #[arg(long, value_enum, default_value_t = DecompressOn::Auto)]
    pub decompress_on: DecompressOn,
    /// Run the disk commands without sudo (when the rescue user is root).
    #[arg(long)]
    pub no_sudo: bool,
    /// Seconds allowed for one API call, one SSH connection or one stalled SSH read/write.
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
    /// Write over a worker that runs another image of ours (a version bump): this wipes the
    /// node, which then needs its config again. Without it, such a worker is refused with the
    /// `talosctl upgrade` command that updates it in place. Also writes again a disk an earlier
    /// run wrote that never proved ours (someone else configured it first).
    #[arg(long)]
    pub reflash: bool,
    /// The installer of the new image, for the `talosctl upgrade` command a refusal gives.
    #[arg(long, value_name = "IMAGE")]
    pub installer_image: Option<String>,
    /// The talosconfig, for the `talosctl upgrade` command a refusal gives.
    #[arg(long, value_name = "FILE", default_value = "talos/_out/talosconfig")]
    pub talosconfig: PathBuf,
    /// Only write the flashed tag on the servers whose image is recorded and whose config
    /// talos-apply-insecure recorded (proved ours); flash nothing.
    #[arg(long, conflicts_with_all = ["image", "image_url", "reflash"])]
    pub tag_proven: bool,
    /// Only record, on every Elastic Metal server of the inventory, that it was upgraded in
    /// place with this installer (`talosctl upgrade --image IMAGE`, once it answers with the
    /// installer's version): its image tag becomes `edgepop-image-upgraded=IMAGE`, which a later
    /// flash of that installer's image takes as done. Flash nothing.
    #[arg(long, value_name = "IMAGE", conflicts_with_all = ["image", "image_url", "reflash", "tag_proven"])]
    pub tag_upgraded: Option<String>,
}

/// What `run` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Flash this image.
    Flash(PathBuf),
    /// Tag the servers proved ours.
    TagProven,
    /// Tag the servers as upgraded in place with this installer.
    TagUpgraded(String),
}

/// What `run` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub mode: Mode,
    /// `--disk`: the disk of a node whose inventory records none.
    pub disk: Option<String>,
    pub ssh_key: PathBuf,
    pub ssh_user: Option<String>,
    pub ssh_port: u16,
    pub ssh_tries: u32,
    pub state_tries: u32,
    pub ssh_interval: Duration,
    pub ssh_key_ids: Vec<String>,
    pub image_url: Option<ImageUrl>,
    pub decompress_on: DecompressOn,
    pub sudo: bool,
    pub timeout: Duration,
    pub reflash: bool,
    pub installer_image: Option<String>,
    pub talosconfig: PathBuf,
    /// Resolved as Scaleway's own tools resolve them; the secret never printed.
    pub credentials: Credentials,
}

/// Where the image is decompressed on its way to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecompressOn {
    /// On the rescue system when it has zstd and the .zst saves a tenth of the bytes, else here.
    Auto,
    /// On the rescue system: the compressed image crosses the network.
    Rescue,
    /// Here: the raw image crosses the network.
    Local,
}

/// An image URL the rescue system may fetch: https (http only to a loopback host, for tests),
/// no character a shell, a curl config line or curl's globbing would read. Shown without its
/// query string (a presigned URL's signature).
#[derive(Clone, PartialEq, Eq)]
pub struct ImageUrl {
    pub(crate) url: String,
    pub(crate) loopback: bool,
}

impl ImageUrl {
    pub fn parse(url: &str) -> Result<ImageUrl, String> {
        let plain = url
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?&=%+,;@".contains(&b));
        if !plain {
            return Err(format!(
                "--image-url `{}`: only letters, digits and -._~:/?&=%+,;@ are taken (no quotes, spaces, shell or glob characters)",
                ImageUrl::shown_of(url)
            ));
        }
        let refused = |why: &str| format!("--image-url `{}`: {why}", ImageUrl::shown_of(url));
        let uri = scaleway::http::check_url(url).map_err(|why| {
            refused(match why {
                UrlRefusal::NotAUrl | UrlRefusal::NoHost => "no host",
                // An image URL never needs them: a presigned URL signs in its query string.
                UrlRefusal::Credentials => "no user or password before the host (`user:secret@`)",
                UrlRefusal::PlainHttp | UrlRefusal::NotHttp => {
                    "https only (a download over http could be anything)"
                }
            })
        })?;
        let loopback = uri.scheme_str() == Some("http");
        Ok(ImageUrl {
            url: url.to_owned(),
            loopback,
        })
    }

    fn shown_of(url: &str) -> &str {
        url.split_once('?').map_or(url, |(path, _)| path)
    }

    /// The URL without its query string: what the logs show.
    pub fn shown(&self) -> &str {
        ImageUrl::shown_of(&self.url)
    }

    /// What `curl -K -` reads: the URL never goes on the rescue system's command line.
    pub(crate) fn curl_config(&self) -> String {
        format!("url = \"{}\"\n", self.url)
    }
}

impl std::fmt::Debug for ImageUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.shown())
    }
}

/// An installer image reference as a server tag may hold it: `host/path:tag`, no space or
/// character outside an image reference's.
fn installer_ref(image: &str) -> Result<String, Error> {
    let plain = !image.is_empty()
        && image
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._/:@".contains(&b));
    if !plain || !image.contains('/') || !image.contains(':') {
        return Err(Error::Usage(format!(
            "--tag-upgraded `{image}`: not an image reference (host/path:tag)"
        )));
    }
    Ok(image.to_owned())
}

/// Checks the arguments and reads the Scaleway credentials from the environment.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    if let Some(disk) = &cli.disk {
        pop_common::records::check_install_disk(disk)
            .map_err(|e| Error::Usage(format!("--disk {e}")))?;
    }
    if cli.ssh_tries == 0 {
        return Err(Error::Usage("--ssh-tries: must be at least 1".into()));
    }
    if cli.state_tries == 0 {
        return Err(Error::Usage("--state-tries: must be at least 1".into()));
    }
    let image_url = cli
        .image_url
        .as_deref()
        .map(ImageUrl::parse)
        .transpose()
        .map_err(Error::Usage)?;
    let credentials = scaleway::creds::load(env).map_err(|e| Error::Usage(e.to_string()))?;
    let ssh_key = match &cli.ssh_key {
        Some(path) => path.clone(),
        None => {
            let home = env
                .non_empty("HOME")
                .ok_or_else(|| Error::Usage("--ssh-key is not given and HOME is not set".into()))?;
            Path::new(home).join(".ssh/id_ed25519")
        }
    };
    if image_url.is_some() && cli.decompress_on == DecompressOn::Local {
        return Err(Error::Usage(
            "--decompress-on local cannot go with --image-url: the rescue system decompresses what it downloads".into(),
        ));
    }
    if let Some(user) = &cli.ssh_user
        && user.is_empty()
    {
        return Err(Error::Usage("--ssh-user: empty".into()));
    }
    let mode = match (cli.tag_proven, cli.tag_upgraded, cli.image) {
        (true, _, _) => Mode::TagProven,
        (false, Some(installer), _) => Mode::TagUpgraded(installer_ref(&installer)?),
        (false, None, Some(image)) => Mode::Flash(image),
        (false, None, None) => return Err(Error::Usage("--image: required".into())),
    };
    Ok(Config {
        mode,
        disk: cli.disk,
        ssh_key,
        ssh_user: cli.ssh_user,
        ssh_port: cli.ssh_port,
        ssh_tries: cli.ssh_tries,
        state_tries: cli.state_tries,
        ssh_interval: Duration::from_secs(cli.ssh_interval_seconds),
        ssh_key_ids: cli.ssh_key_ids,
        image_url,
        decompress_on: cli.decompress_on,
        sudo: !cli.no_sudo,
        timeout: Duration::from_secs(cli.timeout_seconds.max(1)),
        reflash: cli.reflash,
        installer_image: cli.installer_image,
        talosconfig: cli.talosconfig,
        credentials,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::Parser;
    use pop_common::exit::{Exit, Report};

    use super::*;

    fn env() -> Env {
        Env::from_pairs([
            ("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX"),
            ("SCW_SECRET_KEY", "11111111-1111-4111-8111-111111111111"),
            (
                "SCW_DEFAULT_PROJECT_ID",
                "22222222-2222-4222-8222-222222222222",
            ),
            // No config file: the environment alone.
            ("SCW_CONFIG_PATH", "/nonexistent/scw/config.yaml"),
            ("HOME", "/home/op"),
        ])
    }

    #[test]
    fn defaults_come_from_the_environment_and_the_secret_is_never_printed() {
        let cli = Cli::parse_from(["t", "--image", "talos.raw.zst"]);
        let config = resolve(cli, &env()).unwrap();
        assert_eq!(config.mode, Mode::Flash(PathBuf::from("talos.raw.zst")));
        assert!(!config.reflash);
        let tag = Cli::parse_from(["t", "--tag-proven"]);
        assert_eq!(resolve(tag, &env()).unwrap().mode, Mode::TagProven);
        let installer = "factory.talos.dev/metal-installer/b4f8:v1.13.12";
        let tag = Cli::parse_from(["t", "--tag-upgraded", installer]);
        assert_eq!(
            resolve(tag, &env()).unwrap().mode,
            Mode::TagUpgraded(installer.into())
        );
        for bad in ["", "v1.13.12", "metal installer:v1", "a/b:c;rm"] {
            let tag = Cli::parse_from(["t", "--tag-upgraded", bad]);
            let said = resolve(tag, &env()).unwrap_err().to_string();
            assert!(said.starts_with("--tag-upgraded"), "{bad}: {said}");
        }
        assert!(
            Cli::try_parse_from(["t", "--tag-upgraded", installer, "--reflash"]).is_err(),
            "an upgrade record never wipes"
        );
        assert!(
            Cli::try_parse_from(["t"]).is_err(),
            "--image or --tag-proven"
        );
        assert_eq!(config.ssh_key, PathBuf::from("/home/op/.ssh/id_ed25519"));
        assert_eq!(config.credentials.api_url, "https://api.scaleway.com");
        assert_eq!(
            (config.ssh_tries, config.ssh_interval),
            (60, Duration::from_secs(10))
        );
        // A state change may take the SDK's two hours, not the SSH bound's ten minutes.
        assert_eq!(
            config.ssh_interval * config.state_tries,
            Duration::from_secs(2 * 3600)
        );
        // No fallback disk: each node is written to the install_disk its inventory records.
        assert_eq!(config.disk, None);
        assert_eq!(config.decompress_on, DecompressOn::Auto);
        assert!(config.sudo);
        assert!(
            !format!("{config:?}").contains("11111111-1111"),
            "{config:?}"
        );
    }

    #[test]
    fn bad_arguments_and_missing_credentials_are_usage_errors() {
        for disk in ["/dev/sda; rm -rf /", "/dev/sda|e reboot", "sda"] {
            let unsafe_disk = Cli::parse_from(["t", "--image", "i", "--disk", disk]);
            let err = resolve(unsafe_disk, &env()).unwrap_err();
            assert_eq!(err.exit(), Exit::Usage);
            assert!(
                err.to_string().contains("--disk") && err.to_string().contains("device path"),
                "{err}"
            );
        }
        let cli = Cli::parse_from(["t", "--image", "i"]);
        let no_credentials = Env::from_pairs([
            ("HOME", "/h"),
            ("SCW_CONFIG_PATH", "/nonexistent/scw/config.yaml"),
        ]);
        let err = resolve(cli, &no_credentials).unwrap_err();
        assert!(err.to_string().contains("SCW_ACCESS_KEY"), "{err}");
        let zero = Cli::parse_from(["t", "--image", "i", "--ssh-tries", "0"]);
        assert!(resolve(zero, &env()).is_err());
        for (url, needle) in [
            ("ftp://x/i.zst", "https only"),
            ("http://factory.example/i.zst", "https only"),
            ("https://x/$(reboot)", "no quotes"),
            ("https://x/\"i", "no quotes"),
            ("https://x/a b", "no quotes"),
            ("https://x/img[1-9].zst", "glob"),
            ("https://x/{a,b}.zst", "glob"),
            // A loopback host only by its prefix: the host is after the `@`.
            ("http://127.0.0.1:x@evil.example/i.zst", "user or password"),
            ("http://localhost:80@evil.example/i.zst", "user or password"),
            ("https://user:secret@b.example/i.zst", "user or password"),
            ("http://127.0.0.1.evil.example/i.zst", "https only"),
            ("https:///i.zst", "no host"),
        ] {
            let cli = Cli::parse_from(["t", "--image", "i", "--image-url", url]);
            let err = resolve(cli, &env()).unwrap_err().to_string();
            assert!(
                err.contains("--image-url") && err.contains(needle),
                "{url}: {err}"
            );
        }
        // A presigned URL is shown without its query string, even when refused.
        let presigned = "http://bucket.example/i.zst?X-Amz-Signature=0123secret";
        let cli = Cli::parse_from(["t", "--image", "i", "--image-url", presigned]);
        let err = resolve(cli, &env()).unwrap_err().to_string();
        assert!(!err.contains("0123secret"), "{err}");
        let url = ImageUrl::parse("https://b.example/i.zst?X-Amz-Signature=0123secret").unwrap();
        assert_eq!(format!("{url:?}"), "https://b.example/i.zst");
        let download_raw = Cli::parse_from([
            "t",
            "--image",
            "i",
            "--image-url",
            "https://x/i.zst",
            "--decompress-on",
            "local",
        ]);
        let err = resolve(download_raw, &env()).unwrap_err().to_string();
        assert!(
            err.contains("--decompress-on local") && err.contains("--image-url"),
            "{err}"
        );
        let good = Cli::parse_from([
            "t",
            "--image",
            "i",
            "--image-url",
            "https://factory.talos.dev/image/3765/v1.13.11/metal-amd64.raw.zst",
        ]);
        assert!(resolve(good, &env()).is_ok());
    }
}
