# shellcheck shell=bash
# Sourced by the pipelines that run programs which talk to the cluster, never to Scaleway
# (talosctl, talos-apply-insecure, curl): `without_secrets CMD...` runs CMD without the Scaleway
# secret key in its environment (the variable and its legacy aliases, as Scaleway's tools read
# them). Only scw-infra and scw-rescue-flash get it.
without_secrets() { env -u SCW_SECRET_KEY -u SCW_TOKEN -u SCALEWAY_TOKEN -u SCALEWAY_ACCESS_KEY "$@"; }
