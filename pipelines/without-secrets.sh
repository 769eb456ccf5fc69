# shellcheck shell=bash
# Sourced by the pipelines that run programs which talk to the cluster, never to Scaleway
# (talosctl, talos-apply-insecure, curl), and run by the Makefile around its builds (cargo runs
# every dependency's build script): `without_secrets CMD...` runs CMD without the Scaleway
# secret key in its environment (the variable and its legacy aliases, as Scaleway's tools read
# them). Only scw-infra and scw-rescue-flash get it.
without_secrets() { env -u SCW_SECRET_KEY -u SCW_TOKEN -u SCALEWAY_TOKEN -u SCALEWAY_ACCESS_KEY "$@"; }

# Run as a program (`bash pipelines/without-secrets.sh CMD...`): CMD without the secret.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  without_secrets "$@"
fi
