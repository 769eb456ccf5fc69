//! The image's way onto the disk over the rescue session: root for the disk commands, the image
//! streamed (compressed or raw) or downloaded by the rescue system itself.

use scaleway::baremetal::RescuePassword;

use crate::cli::ImageUrl;
use crate::flash::FlashError;
use crate::image::Image;
use crate::progress::Progress;
use crate::read_ahead;
use crate::rescue::{Rescue, SshError};

/// How the disk commands get root on the rescue system.
pub(crate) enum Root {
    /// The SSH user is root (`--no-sudo`).
    Already,
    /// `sudo` without a password (the rescue image's sudoers may allow it).
    NoPassword,
    /// `sudo -S`, the rescue password on its standard input.
    Password(RescuePassword),
}

impl Root {
    /// What goes before a command that needs root. `-k` makes sudo ask even with cached
    /// credentials, so the password line is always read by sudo, never by the command.
    pub(crate) fn prefix(&self) -> &'static str {
        match self {
            Root::Already => "",
            Root::NoPassword => "sudo -n ",
            Root::Password(_) => "sudo -S -k -p '' ",
        }
    }

    /// What comes first on such a command's standard input.
    pub(crate) fn input(&self) -> Vec<u8> {
        match self {
            Root::Password(password) => format!("{}\n", password.expose()).into_bytes(),
            _ => Vec::new(),
        }
    }
}

/// `pipeline` as one command for the rescue shell, failing when any of its stages fails.
fn pipefail(pipeline: &str) -> String {
    format!("bash -c 'set -o pipefail; {pipeline}'")
}

/// Whether the rescue system can decompress the image itself.
pub(crate) fn has_zstd(session: &Rescue) -> Result<bool, SshError> {
    Ok(session.run("zstd --version")?.status == 0)
}

/// The rescue system downloads the .zst into its RAM (https only, no globbing, the URL given to
/// curl on its standard input, not its command line), checks its sha256 against the local copy's
/// before anything touches the disk, then expands it onto the disk as root.
pub(crate) fn download_and_write(
    session: &Rescue,
    image: &Image,
    root: &Root,
    write: &str,
    url: &ImageUrl,
    name: &str,
) -> Result<(), FlashError> {
    pop_common::info!("{name}: the rescue system downloads {}", url.shown());
    let temp = session.run("mktemp /tmp/edgepop-talos.XXXXXX")?;
    let file = temp.stdout.trim().to_owned();
    if temp.status != 0
        || !file.starts_with("/tmp/edgepop-talos.")
        || !file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
    {
        return Err(FlashError::Command {
            what: "mktemp on the rescue system",
            status: temp.status,
            stderr: temp.stderr.trim().to_owned(),
        });
    }
    // Redirects are followed (the Image Factory sends its assets' downloads to its CDN with a
    // 302), on the same protocols only: never from https down to http.
    let protocols = if url.loopback {
        "=http,https"
    } else {
        "=https"
    };
    let fetched = session.run_with_input(
        &format!(
            "curl -fsS --globoff --proto {protocols} -L --proto-redir {protocols} --retry 3 -K - -o {file} && sha256sum {file}"
        ),
        url.curl_config().as_bytes(),
    )?;
    let found = fetched
        .stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    if fetched.status != 0 {
        session.run(&format!("rm -f {file}"))?;
        return Err(FlashError::Command {
            what: "the download on the rescue system",
            status: fetched.status,
            stderr: fetched.stderr.trim().replace(&url.url, url.shown()),
        });
    }
    if found != image.compressed_sha256 {
        session.run(&format!("rm -f {file}"))?;
        return Err(FlashError::Download {
            url: url.shown().to_owned(),
            found,
            want: image.compressed_sha256.clone(),
        });
    }
    let ran = session.run_with_input(
        &format!(
            "{}{}",
            root.prefix(),
            pipefail(&format!("zstd -dc {file} | {write}"))
        ),
        &root.input(),
    )?;
    session.run(&format!("rm -f {file}"))?;
    if ran.status != 0 {
        return Err(FlashError::Command {
            what: "the write of the download on the rescue system",
            status: ran.status,
            stderr: ran.stderr.trim().to_owned(),
        });
    }
    Ok(())
}

/// Streams `image` into `write` (the `dd` on the rescue side, run as `root` says). With
/// `on_rescue`, the .zst goes as it is, into `zstd -dc | write` there: only the compressed bytes
/// cross the network and the SSH cipher, the part of the write that costs the most. Otherwise it
/// is decompressed here, in its own thread, so that the decompression overlaps the encryption
/// and sending.
pub(crate) fn send_image(
    session: &Rescue,
    image: &Image,
    root: &Root,
    write: &str,
    on_rescue: bool,
    name: &str,
) -> Result<(), FlashError> {
    write_image(
        session,
        image,
        root.prefix(),
        &root.input(),
        write,
        on_rescue,
        name,
    )
}

/// [`send_image`] with the root prefix and the line before the image given as they are (the
/// bench writes as the SSH user, with neither).
pub fn write_image(
    session: &Rescue,
    image: &Image,
    prefix: &str,
    input: &[u8],
    write: &str,
    on_rescue: bool,
    name: &str,
) -> Result<(), FlashError> {
    let (command, size, sent) = if on_rescue {
        let file = Image::open_file(&image.path)?;
        let size = image.compressed;
        pop_common::info!(
            "{name}: sending the compressed image ({size} bytes for {} raw); the rescue system decompresses it",
            image.size
        );
        let command = format!("{prefix}{}", pipefail(&format!("zstd -dc | {write}")));
        let mut progress = Progress::new(&format!("{name} (compressed)"), size);
        let sent = session.stream(
            &command,
            input,
            read_ahead::ReadAhead::new(file),
            &mut progress,
        )?;
        (command, size, sent)
    } else {
        pop_common::info!(
            "{name}: decompressing here, sending the raw image ({} bytes)",
            image.size
        );
        let command = format!("{prefix}{write}");
        let reader = read_ahead::ReadAhead::new(Image::open_at(&image.path)?);
        let mut progress = Progress::new(name, image.size);
        let sent = session.stream(&command, input, reader, &mut progress)?;
        (command, image.size, sent)
    };
    if sent != size {
        return Err(FlashError::Changed {
            sent,
            command,
            size,
        });
    }
    Ok(())
}
