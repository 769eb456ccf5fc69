# edgepop: an edge point of presence on Scaleway, in three layers.
#
#   make apply    infra -> platform -> edge      (each layer writes the JSON the next one reads)
#   make destroy  edge  -> platform -> infra     (the reverse, so nothing is left pointing at a dead cluster)
#
# Every recipe runs under bash -euo pipefail: a failure anywhere in a pipe stops the target.
# `make help` lists the targets, in the order of this file: the layers, then day to day, tear
# down, and the build, demo and tests.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules --warn-undefined-variables

include k8s/versions.env

# --- Paths and knobs (override on the command line: make apply-edge EDGE_CONFIG=...) -----------
OUT          ?= talos/_out
INPUTS       ?= $(OUT)/platform-inputs.json
INFRA_CONFIG ?= config/infra.json
# The Talos images' sha256, recorded by `make talos-image-digests` (untracked, per Talos version
# and schematic).
TALOS_DIGESTS ?= config/talos-image-digests.env
# An on-premises cluster of this repository (docs/onprem.md): CLUSTER=<name> acts on
# clusters/<name>/onprem.json, committed with its SOPS file beside it, with PROFILE=onprem, and
# renders it into a folder of its own, $(OUT)/clusters/<name>/. Without it, PLATFORM_CONFIG names
# the config, as before.
CLUSTER      ?=
CLUSTERS_DIR ?= clusters
ifneq ($(CLUSTER),)
ifneq ($(words $(CLUSTER))$(findstring /,$(CLUSTER)),1)
$(error CLUSTER=$(CLUSTER) is not a cluster's name: the name of a folder of $(CLUSTERS_DIR)/)
endif
ifeq ($(origin PLATFORM_CONFIG),command line)
$(error CLUSTER=$(CLUSTER) and PLATFORM_CONFIG=$(PLATFORM_CONFIG) both name the config: give one)
endif
endif
# The cluster profile of the platform layer: edge (this Scaleway edge) or onprem (an existing
# Talos cluster on premises, config/onprem.json or CLUSTER=<name>; render-platform --help).
PROFILE      ?= $(if $(CLUSTER),onprem,edge)
# Refused before anything else: an unknown word would be read as the name of a config file.
PROFILES     := edge onprem
ifneq ($(words $(PROFILE)) $(filter $(PROFILES),$(PROFILE)),1 $(strip $(PROFILE)))
$(error PROFILE=$(PROFILE) is not a profile: use one of edge, onprem)
endif
ifneq ($(CLUSTER),)
ifneq ($(PROFILE),onprem)
$(error CLUSTER=$(CLUSTER) names an on-premises cluster of $(CLUSTERS_DIR)/: PROFILE=$(PROFILE) has none)
endif
endif
PLATFORM_CONFIG ?= $(if $(CLUSTER),$(CLUSTERS_DIR)/$(CLUSTER)/onprem.json,$(if $(filter edge,$(PROFILE)),config/platform.json,config/$(PROFILE).json))
EDGE_CONFIG  ?= config/edge.json
# What `make publish-images` writes and the edge config's images.published names.
PUBLISHED_IMAGES ?= $(OUT)/published-images.json
SCHEMAS_DIR  ?= ../shared/schemas
CARGO        ?= cargo
CONFIRM      ?=
DEMO_PORT    ?= 8080
# The demo's metrics (/stats/prometheus) and their live page (/): the port an Istio gateway's pod
# serves its metrics on.
DEMO_METRICS_PORT ?= 15020
# Cargo's target folder: CARGO_TARGET_DIR when the environment sets it (read without a warning
# for an undefined variable when it does not).
BIN          := $(or $(if $(filter undefined,$(origin CARGO_TARGET_DIR)),,$(CARGO_TARGET_DIR)),target)/release
FIELD_MANAGER_EDGE := edgepop-edge

# The operator's clients (talosctl, kubectl, helm, sops, etcdutl) at their pins: `make tools`
# builds them into TOOLS_DIR, from the cache the tests' setup fills (pipelines/upstream.sh). Once
# it exists it comes first on every recipe's PATH, so an older kubectl or a Helm 4 elsewhere is not
# picked up; TOOLS_DIR= (empty) leaves PATH as it is.
XDG_CACHE_HOME ?= $(HOME)/.cache
TOOLS_DIR    ?= $(XDG_CACHE_HOME)/edgepop/tools/bin
TOOLS        := talosctl kubectl helm sops etcdutl
ifneq ($(wildcard $(TOOLS_DIR)),)
export PATH := $(abspath $(TOOLS_DIR)):$(PATH)
endif

# The cluster every kubectl, helm and wait-ready of this Makefile acts on: its own kubeconfig, or
# the one named on make's command line (make KUBECONFIG=FILE). A KUBECONFIG inherited from the
# shell is ignored: it may point at any cluster (production), where a target would uninstall and
# delete. Before any write, kubeconfig-guard checks that its current context is this cluster's
# API server (guard-cluster).
SHELL_KUBECONFIG := $(if $(filter environment%,$(origin KUBECONFIG)),$(KUBECONFIG))
ifneq ($(origin KUBECONFIG),command line)
override KUBECONFIG := $(abspath $(OUT))/kubeconfig
endif
export KUBECONFIG
# helm reads these over the kubeconfig: none from the shell is let through.
unexport HELM_KUBECONTEXT HELM_KUBEAPISERVER HELM_KUBETOKEN HELM_KUBECAFILE HELM_KUBEASUSER \
  HELM_KUBEASGROUPS HELM_KUBEINSECURE_SKIP_TLS_VERIFY HELM_KUBETLS_SERVER_NAME

# Tools are built in release mode when a recipe needs them; cargo leaves the binary untouched
# (older than its sources) when nothing changed, so file targets that depend on it stay fresh.
RUST_SOURCES := Cargo.toml $(wildcard Cargo.lock) $(shell find crates tools filter -name '*.rs' -o -name Cargo.toml -o -name '*.html' 2>/dev/null)
# Builds run without the Scaleway secret: a dependency's build script has no use for it.
WITHOUT_SECRETS = bash pipelines/without-secrets.sh
$(BIN)/%: $(RUST_SOURCES)
	@$(WITHOUT_SECRETS) $(CARGO) build --quiet --release --bin $*

# The filter module is a real file: rebuilt only when a source of the filter (Rust, page,
# lockfile) changed. It lands where cargo puts it, under CARGO_TARGET_DIR when that is set.
TARGET_DIR     := $(if $(filter undefined,$(origin CARGO_TARGET_DIR)),$(CURDIR)/target,$(CARGO_TARGET_DIR))
FILTER_WASM    := $(TARGET_DIR)/wasm32-wasip1/wasm-release/pow_filter.wasm
FILTER_SOURCES := Cargo.toml $(wildcard Cargo.lock) $(shell find filter -name '*.rs' -o -name Cargo.toml -o -name '*.html' -o -name '*.js' -o -name '*.css' 2>/dev/null)

# The layer inputs: say how to get them rather than make's "No rule to make target".
$(INFRA_CONFIG):
	@echo "make: $@ is missing: cp config/infra.example.json $@, then edit it" >&2; exit 1
$(PLATFORM_CONFIG):
	@$(if $(CLUSTER),echo "make: $@ is missing: a cluster of this repository is a folder $(CLUSTERS_DIR)/<name>/ (docs/onprem.md): mkdir -p $(@D) && cp config/onprem.example.json $@, then edit it (cluster_name $(CLUSTER), secrets secrets.sops.yaml)" >&2; exit 1)
	@echo "make: $@ is missing: cp $(patsubst %.json,%.example.json,$@) $@, then edit it" >&2; exit 1
$(EDGE_CONFIG):
	@echo "make: $@ is missing: cp config/edge.example.json $@, then edit it" >&2; exit 1
$(INPUTS):
	@echo "make: $@ is missing: it is written by make apply-infra (layer 1)" >&2; exit 1

.PHONY: have-kubeconfig guard-cluster
have-kubeconfig:
	@test -f '$(KUBECONFIG)' || { echo "make: $(KUBECONFIG) does not exist: run make apply-infra first" >&2; exit 1; }

# The kubeconfig's current context must be this cluster's API server (cluster_endpoint of
# platform-inputs.json); it prints CLUSTER_NAME and CLUSTER_ENDPOINT for the questions.
GUARD = $(BIN)/kubeconfig-guard --kubeconfig '$(KUBECONFIG)' --inputs '$(INPUTS)'
guard-cluster: have-kubeconfig $(INPUTS) $(BIN)/kubeconfig-guard
	@$(if $(SHELL_KUBECONFIG),echo "make: KUBECONFIG from the environment ($(SHELL_KUBECONFIG)) is ignored: this Makefile acts on $(KUBECONFIG) (make KUBECONFIG=FILE chooses another)" >&2;) \
	$(GUARD) >/dev/null

# What `make help` prints first: a first real run, in order, as the README's deployment block has
# it (tests/readme_walk.rs holds the two to the same make commands in the same order).
##! A first real run on Scaleway, in order (README.md; what each step checks: docs/operations.md):
##!   1. make tools                 talosctl, kubectl, helm, sops and etcdutl at their pins (needs Go)
##!   2. cp config/{infra,platform,edge}.example.json to config/*.json, then edit each
##!   3. make vendor                once: the pinned Gateway API CRDs, sha256-checked
##!   4. make talos-image-digests   once per Talos version: both images downloaded (kept for the
##!                                 apply) and their sha256 recorded in config/talos-image-digests.env
##!   5. make check                 names what is missing, and the step that brings it
##!   6. make apply                 infra (the worker's rescue boot and flash take the longest; an
##!                                 interrupted run is safe to run again), then platform, then edge

##@ Start (no cluster, no credential)
.PHONY: help tools check apply
help: ## List the targets (this text)
	@awk 'BEGIN {FS = ":.*## "} /^##!/ {print substr($$0, 5)} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

tools: ## Build talosctl, kubectl, helm, sops and etcdutl at their pins (Go module proxy, cached) into TOOLS_DIR, first on the recipes' PATH
	@$(if $(TOOLS_DIR),,echo "make tools: TOOLS_DIR is empty: name the folder to build the tools into" >&2; exit 2)
	@pipelines/upstream.sh install '$(TOOLS_DIR)' $(TOOLS)
	@echo "make tools: the Makefile's recipes use them; eval \"\$$(make kubeconfig)\" puts them first on your shell's PATH too" >&2

# It builds the tools that read the configs, so that each config is checked as its layer reads it.
CHECK_TOOLS = $(BIN)/render-platform $(if $(filter edge,$(PROFILE)),$(BIN)/scw-infra $(BIN)/render-edge,$(BIN)/kubeconfig-guard)
check: $(CHECK_TOOLS) ## Check the tools, credentials, configs (each as its layer reads it) and Talos image digests a real deployment needs (PROFILE=onprem: those of an existing cluster's platform layer)
	@PROFILE='$(PROFILE)' BIN='$(BIN)' INFRA_CONFIG='$(INFRA_CONFIG)' EDGE_CONFIG='$(EDGE_CONFIG)' INPUTS='$(INPUTS)' TALOS_DIGESTS='$(TALOS_DIGESTS)' $(if $(filter edge,$(PROFILE)),,PLATFORM_CONFIG='$(PLATFORM_CONFIG)' CLUSTER='$(CLUSTER)') pipelines/check-prereqs.sh

apply: ## Apply the three layers in order: infra, then platform, then edge
	$(MAKE) apply-infra
	$(MAKE) apply-platform
	$(MAKE) apply-edge

##@ Layer 1, infra: the Scaleway resources and the Talos cluster
.PHONY: apply-infra dry-run-infra talos-image-digests
# REFLASH=yes lets scw-rescue-flash write over a worker that runs another Talos image (a version
# or schematic bump), wiping it; without it such a worker is refused with the talosctl upgrade
# command that updates it in place.
REFLASH ?=
# WORKER_CERT_FINGERPRINT=<base64 SPKI sha256>, read on the worker's console, pins its first
# contact in maintenance mode instead of trusting the first certificate seen.
WORKER_CERT_FINGERPRINT ?=
# SNAPSHOT=FILE (a snapshot make etcd-snapshot wrote; SKIP_HASH_CHECK=yes for a copy of a
# member's data folder): after losing every control plane, the new ones get that etcd instead
# of a new empty one. A cluster that runs etcd stops the apply at the bootstrap, untouched.
apply-infra: $(INFRA_CONFIG) ## Scaleway resources, the worker flashed, Talos configured; writes talos/_out/kubeconfig and platform-inputs.json (SNAPSHOT=FILE: etcd recovered from it on new control planes)
	@$(WITHOUT_SECRETS) $(CARGO) build --quiet --release --bin scw-infra --bin scw-rescue-flash --bin talos-apply-insecure
	@OUT='$(OUT)' INFRA_CONFIG='$(INFRA_CONFIG)' TALOS_DIGESTS='$(TALOS_DIGESTS)' BIN='$(BIN)' REFLASH='$(REFLASH)' WORKER_CERT_FINGERPRINT='$(WORKER_CERT_FINGERPRINT)' SNAPSHOT='$(SNAPSHOT)' SKIP_HASH_CHECK='$(SKIP_HASH_CHECK)' TALOS_API_PORT='$(TALOS_API_PORT)' pipelines/infra.sh apply

talos-image-digests: $(BIN)/scw-infra $(INFRA_CONFIG) ## Download the Talos images of the pins once (Image Factory, https) and record their sha256 in config/talos-image-digests.env
	@OUT='$(OUT)' INFRA_CONFIG='$(INFRA_CONFIG)' TALOS_DIGESTS='$(TALOS_DIGESTS)' BIN='$(BIN)' pipelines/infra.sh digests

dry-run-infra: $(BIN)/scw-infra $(INFRA_CONFIG) ## The dry-run twin of scw-infra apply, with apply-infra's pins: reads the Scaleway API, prints the plan (a JSON line a step), changes nothing
	@OUT='$(OUT)' INFRA_CONFIG='$(INFRA_CONFIG)' TALOS_DIGESTS='$(TALOS_DIGESTS)' BIN='$(BIN)' SNAPSHOT='$(SNAPSHOT)' pipelines/infra.sh plan

##@ Layer 2, platform: Cilium, the Gateway API CRDs, cert-manager, Istio (PROFILE=onprem: the on-premises base)
.PHONY: vendor apply-platform diff-platform
PLATFORM_VALUES ?= $(if $(CLUSTER),$(OUT)/clusters/$(CLUSTER)/platform-values,$(OUT)/platform-values$(if $(filter edge,$(PROFILE)),,-$(PROFILE)))
DELETE_CRDS     ?=

# render-platform owns the profiles: it checks the profile's order, writes each component's
# rendered layer (Helm values with the declared flows' ports, objects, the edge's host firewall
# from the flows and the cluster's addresses in the platform inputs, the secrets' template) from
# the profile's config, and then components.tsv, the components in install order with their
# kinds, charts and pins, which platform.sh reads. It compiles k8s/versions.env in. Another
# profile than the edge is rendered again at every run: its render also depends on its SOPS file
# (the bouncer's name), and the same folder may hold the render of another config since.
PLATFORM_PLAN := $(PLATFORM_VALUES)/components.tsv
PLATFORM_ENV   = RENDERED_DIR='$(PLATFORM_VALUES)' RENDER_PLATFORM='$(BIN)/render-platform' TALOSCONFIG='$(OUT)/talosconfig'
# The edge's host firewall is made of the addresses of the cluster the infra layer wrote.
PLATFORM_INPUTS = $(if $(filter edge,$(PROFILE)),$(INPUTS))
$(BIN)/render-platform: k8s/versions.env
.PHONY: render-every-run
render-every-run: ;
# The edge profile's etcd backup runs the image the PublishedImages record pins, when there is one.
PLATFORM_PUBLISHED = $(if $(filter edge,$(PROFILE)),$(wildcard $(PUBLISHED_IMAGES)))
$(PLATFORM_PLAN): $(PLATFORM_CONFIG) $(PLATFORM_INPUTS) $(PLATFORM_PUBLISHED) $(BIN)/render-platform $(if $(filter edge,$(PROFILE)),,render-every-run)
	$(BIN)/render-platform --profile '$(PROFILE)' --config '$(PLATFORM_CONFIG)' $(if $(PLATFORM_INPUTS),--inputs '$(PLATFORM_INPUTS)') $(if $(PLATFORM_PUBLISHED),--published-images '$(PLATFORM_PUBLISHED)') $(if $(CLUSTER),--cluster '$(CLUSTER)') --out-dir '$(PLATFORM_VALUES)'

vendor: ## Fetch the pinned Gateway API CRDs into k8s/vendor/ and check each sha256 (once, before apply-platform)
	@pipelines/vendor.sh

# The edge's cluster is checked against its platform inputs (guard-cluster). Another profile acts
# on an existing cluster this Makefile did not make: its kubeconfig must be named on the command
# line, so that the edge's own default never receives another profile's components, and its
# current context must point at the cluster_endpoint of the profile's config (render-platform
# hands it on in status.env, with the cluster's name for the questions).
PLATFORM_GUARD = $(if $(filter edge,$(PROFILE)),guard-cluster,guard-profile-kubeconfig)
PROFILE_NAMES  = $(PLATFORM_VALUES)/status.env
PROFILE_GUARD  = $(BIN)/kubeconfig-guard --kubeconfig '$(KUBECONFIG)' \
  --endpoint "$$(sed -n 's/^CLUSTER_ENDPOINT=//p' '$(PROFILE_NAMES)')" \
  --cluster-name "$$(sed -n 's/^CLUSTER_NAME=//p' '$(PROFILE_NAMES)')"
.PHONY: guard-profile-kubeconfig profile-kubeconfig-named
profile-kubeconfig-named:
	@$(if $(filter command line,$(origin KUBECONFIG)),,echo "make: PROFILE=$(PROFILE) acts on an existing cluster: name its kubeconfig (make ... PROFILE=$(PROFILE) KUBECONFIG=FILE)" >&2; exit 1)
	@test -f '$(KUBECONFIG)' || { echo "make: $(KUBECONFIG) does not exist" >&2; exit 1; }
guard-profile-kubeconfig: profile-kubeconfig-named $(PLATFORM_PLAN) $(BIN)/kubeconfig-guard
	@$(PROFILE_GUARD) >/dev/null

apply-platform: $(PLATFORM_GUARD) $(PLATFORM_PLAN) ## The profile's components in order (PROFILE=edge|onprem): helm --wait --atomic, pinned; objects, secrets and the edge's host firewall
	@$(PLATFORM_ENV) pipelines/platform.sh apply

diff-platform: $(PLATFORM_GUARD) $(PLATFORM_PLAN) ## The dry-run twin of apply-platform: helm diff (or helm template | kubectl diff), kubectl diff, talosctl --dry-run, nothing changed
	@$(PLATFORM_ENV) pipelines/platform.sh diff

##@ Layer 3, edge: gateway, routes, certificates, origin, the challenge filter and its images
.PHONY: apply-edge dry-run-edge diff-edge check-manifests filter-image lists-image lists-musl backup-image backup-musl publish-images setup-images

# The edge objects are a real file: re-rendered only when an input, the config, a pinned version,
# the published images' record or the tool changes. render-edge compiles k8s/versions.env in (the
# images it renders), so a version bump rebuilds it too. Beside them, from the same inputs, the
# names the edge scripts share with the objects (render-edge --names).
EDGE_OBJECTS := $(OUT)/edge-objects.yaml
EDGE_NAMES   := $(OUT)/edge-names.env
EDGE_INPUTS  := $(INPUTS) $(EDGE_CONFIG) k8s/versions.env $(BIN)/render-edge $(wildcard $(PUBLISHED_IMAGES))
$(BIN)/render-edge: k8s/versions.env
$(EDGE_OBJECTS): $(EDGE_INPUTS)
	@mkdir -p $(OUT)
	$(BIN)/render-edge --inputs $(INPUTS) --config $(EDGE_CONFIG) > $@.tmp
	mv $@.tmp $@
$(EDGE_NAMES): $(EDGE_INPUTS)
	@mkdir -p $(OUT)
	$(BIN)/render-edge --inputs $(INPUTS) --config $(EDGE_CONFIG) --names > $@.tmp
	mv $@.tmp $@

apply-edge: guard-cluster $(EDGE_OBJECTS) $(EDGE_NAMES) ## Server-side apply of the edge objects; prunes what is no longer rendered
	@OBJECTS=$(EDGE_OBJECTS) NAMES=$(EDGE_NAMES) FIELD_MANAGER='$(FIELD_MANAGER_EDGE)' OUT='$(OUT)' pipelines/apply-edge.sh apply

dry-run-edge: guard-cluster $(EDGE_OBJECTS) $(EDGE_NAMES) ## The dry-run twin of apply-edge: the API server checks everything, nothing is persisted
	@OBJECTS=$(EDGE_OBJECTS) NAMES=$(EDGE_NAMES) FIELD_MANAGER='$(FIELD_MANAGER_EDGE)' OUT='$(OUT)' pipelines/apply-edge.sh dry-run

diff-edge: guard-cluster $(EDGE_OBJECTS) $(EDGE_NAMES) ## Show what apply-edge would change on the cluster
	@OBJECTS=$(EDGE_OBJECTS) NAMES=$(EDGE_NAMES) FIELD_MANAGER='$(FIELD_MANAGER_EDGE)' OUT='$(OUT)' pipelines/apply-edge.sh diff

check-manifests: $(BIN)/render-edge $(BIN)/manifest-check ## Render the committed edge examples (filter off and on) and validate every object against the upstream schemas
	@SCHEMAS_DIR='$(SCHEMAS_DIR)' BIN='$(BIN)' pipelines/check-manifests.sh

# The images the cluster runs, built without a container engine (tools/oci-image): reproducible
# OCI layouts under target/images, pushed by `make publish-images` to the edge config's
# images.registry; the PublishedImages record pins each by manifest digest for render-edge (the
# filter, the lists) and render-platform (the etcd backup).
IMAGES_DIR   := $(TARGET_DIR)/images
FILTER_IMAGE := $(IMAGES_DIR)/pow-filter
LISTS_IMAGE  := $(IMAGES_DIR)/lists-refresh
BACKUP_IMAGE := $(IMAGES_DIR)/etcd-backup
MUSL_TARGET  := x86_64-unknown-linux-musl
MUSL_BIN     := $(TARGET_DIR)/$(MUSL_TARGET)/release
CA_BUNDLE    ?= /etc/ssl/certs/ca-certificates.crt
# The tar entries' mtime; 0 unless the caller pins another (reproducible-builds.org convention).
SOURCE_DATE_EPOCH ?= 0

filter-image: $(FILTER_WASM) $(BIN)/oci-image ## The filter as a Wasm OCI image (Istio's compat layout) in target/images/pow-filter; prints its manifest digest
	@SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' $(BIN)/oci-image filter --wasm '$(FILTER_WASM)' --out '$(FILTER_IMAGE)'

# Static binaries: the images have no libc. ring compiles C, hence musl-gcc. The source paths are
# remapped so the binaries do not depend on where the checkout is; symbols are stripped, as the
# Dockerfile does (the lists layer goes from 5.8 to 5.2 MB). One command for both images, so
# they are built alike.
MUSL_BUILD = CC_$(subst -,_,$(MUSL_TARGET))=musl-gcc CARGO_PROFILE_RELEASE_STRIP=symbols \
	RUSTFLAGS='--remap-path-prefix=$(CURDIR)=/src --remap-path-prefix=$(if $(filter undefined,$(origin CARGO_HOME)),$(HOME)/.cargo,$(CARGO_HOME))=/cargo' \
	  $(WITHOUT_SECRETS) $(CARGO) build --quiet --locked --release --target $(MUSL_TARGET)
lists-musl: setup-images
	$(MUSL_BUILD) -p lists-refresh -p lists-gen-asn -p lists-gen-tor -p lists-gen-crawlers

lists-image: lists-musl $(BIN)/oci-image ## The lists-refresh image (static binaries, CA bundle, no base, uid 65532) in target/images/lists-refresh; prints its manifest digest
	@SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' $(BIN)/oci-image lists --bin-dir '$(MUSL_BIN)' --ca-bundle '$(CA_BUNDLE)' --out '$(LISTS_IMAGE)'

backup-musl: setup-images
	$(MUSL_BUILD) -p etcd-backup

# talosctl and age are the pinned upstream builds (static: CGO_ENABLED=0), from the cache of
# pipelines/upstream.sh, which builds what is missing (Go needed then) and prints `name<TAB>path`
# for each: `--talosctl PATH --age PATH` for oci-image, which refuses a binary that is not static.
backup-image: backup-musl $(BIN)/oci-image ## The etcd-backup image (etcd-backup with talosctl and age at their pins, static; CA bundle, no base, uid 65532) in target/images/etcd-backup; prints its manifest digest
	@built=$$(pipelines/upstream.sh build talosctl age); \
	upstream=(); \
	while IFS=$$'\t' read -r name path; do upstream+=("--$$name" "$$path"); done <<<"$$built"; \
	SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' $(BIN)/oci-image backup --bin-dir '$(MUSL_BIN)' "$${upstream[@]}" --ca-bundle '$(CA_BUNDLE)' --out '$(BACKUP_IMAGE)'

# Credentials: EDGEPOP_REGISTRY_USERNAME and EDGEPOP_REGISTRY_PASSWORD, or EDGEPOP_REGISTRY_AUTH_FILE
# (a 0600 docker-style auth.json), from the environment: never on the command line.
# The record goes to PUBLISHED_IMAGES, which must be the file the edge config's images.published
# names (oci-image checks it before pushing anything).
publish-images: filter-image lists-image backup-image $(EDGE_CONFIG) ## Push the filter, lists and etcd-backup images to the edge config's images.registry; writes talos/_out/published-images.json (pinned by digest)
	$(BIN)/oci-image publish --edge-config '$(EDGE_CONFIG)' --filter '$(FILTER_IMAGE)' --lists '$(LISTS_IMAGE)' --backup '$(BACKUP_IMAGE)' --record '$(PUBLISHED_IMAGES)'

setup-images:
	@pipelines/setup.sh images

##@ Day to day
.PHONY: up down kubeconfig cluster-status rotate-pow-secret
# make up: scw-infra powers the servers on; wait-ready hands back control only when every node is
# Ready, the nodes are uncordoned and every pod is Running and Ready (finished Jobs, evicted,
# shut-down and replaced pods aside). UNCORDON=all
# (default) uncordons every cordoned node, UNCORDON=a,b only those, UNCORDON= none.
UNCORDON     ?= all
UP_TIMEOUT   ?= 15m
UNCORDON_FLAGS = $(if $(filter all,$(UNCORDON)),--uncordon-all,$(foreach node,$(subst $(,), ,$(UNCORDON)),--uncordon $(node)))

up: guard-cluster $(BIN)/scw-infra $(BIN)/wait-ready $(INFRA_CONFIG) ## Power the control planes on, then the worker; wait until nodes are Ready and uncordoned and pods Running and Ready (UNCORDON=all|a,b|)
	@OUT='$(OUT)' INFRA_CONFIG='$(INFRA_CONFIG)' BIN='$(BIN)' pipelines/power.sh up
	$(BIN)/wait-ready --kubeconfig '$(KUBECONFIG)' --timeout '$(UP_TIMEOUT)' $(UNCORDON_FLAGS)

down: $(BIN)/scw-infra $(INFRA_CONFIG) ## Shut the worker down through Talos (drained) and stop it, then the control planes; Instances poweroff (not standby, still billed)
	@OUT='$(OUT)' INFRA_CONFIG='$(INFRA_CONFIG)' BIN='$(BIN)' pipelines/power.sh down

kubeconfig: ## Print the export lines for the cluster's kubeconfig and talosconfig (and the make tools folder): eval "$(make kubeconfig)"
	@test -f '$(KUBECONFIG)' || { echo "make $@: $(KUBECONFIG) does not exist: run make apply-infra first" >&2; exit 1; }
	@echo "export KUBECONFIG='$(KUBECONFIG)'"
	@$(if $(wildcard $(OUT)/talosconfig),echo "export TALOSCONFIG='$(abspath $(OUT))/talosconfig'")
	@$(if $(wildcard $(TOOLS_DIR)),echo "export PATH='$(abspath $(TOOLS_DIR))':\"\$$PATH\"")

# The edge's table finds its nodes by the label of render-platform's names (status.env) and its
# gateway's pods by render-edge's (edge-names.env).
cluster-status: $(PLATFORM_GUARD) $(PLATFORM_PLAN) $(if $(filter edge,$(PROFILE)),$(EDGE_NAMES)) ## One table (PROFILE=edge: nodes, Cilium, cert-manager, Istio, Gateways, a gateway pod on each edge node, Certificates, the filter; onprem: the seed's checks), exit 1 if a row is not ok
	@PROFILE='$(PROFILE)' NAMES='$(PROFILE_NAMES)' EDGE_NAMES='$(EDGE_NAMES)' pipelines/cluster-status.sh

rotate-pow-secret: guard-cluster $(EDGE_NAMES) ## New HMAC key for the filter; the old one stays valid as `previous` (nobody is logged out)
	@NAMES=$(EDGE_NAMES) OUT='$(OUT)' FIELD_MANAGER='$(FIELD_MANAGER_EDGE)' pipelines/rotate-pow-secret.sh

##@ Day 2: upgrades, etcd snapshots, restore and members (a restore is refused while etcd holds its quorum)
.PHONY: etcd-snapshot etcd-restore dry-run-etcd-restore etcd-remove-member dry-run-etcd-remove-member have-inventory snapshot-named node-named
.PHONY: upgrade-talos dry-run-upgrade-talos upgrade-k8s dry-run-upgrade-k8s
.PHONY: replace-control-plane dry-run-replace-control-plane
# The snapshots hold every object of the cluster, Secrets included: 0600 files in a 0700 folder
# under OUT (git-ignored), named <cluster>-<UTC time>.snapshot.
ETCD_SNAPSHOTS ?= $(OUT)/etcd
INVENTORY    := $(OUT)/inventory.json
# make etcd-restore SNAPSHOT=FILE; SKIP_HASH_CHECK=yes for a copy of a member's data folder
# (member/snap/db), which has no sha256 trailer.
SNAPSHOT        ?=
SKIP_HASH_CHECK ?=
# make etcd-restore ... RESET_EPHEMERAL=yes: the control planes whose etcd still holds data get
# their EPHEMERAL partition wiped and a reboot first, as Talos's disaster recovery does.
RESET_EPHEMERAL ?=
# talos-lifecycle runs the real talosctl (and etcdutl for the files) with the cluster's
# talosconfig, one control plane at a time; it never gets the Scaleway secret key.
# TALOS_API_PORT: where apid answers on every node (50000 unless a tunnel says otherwise).
TALOS_API_PORT ?= 50000
LIFECYCLE    = $(WITHOUT_SECRETS) $(BIN)/talos-lifecycle --talosconfig '$(OUT)/talosconfig' --talos-port '$(TALOS_API_PORT)'
RESTORE      = $(LIFECYCLE) restore --snapshot '$(SNAPSHOT)' $(if $(filter yes,$(SKIP_HASH_CHECK)),--skip-hash-check) $(if $(filter yes,$(RESET_EPHEMERAL)),--reset-ephemeral)
# make etcd-remove-member NODE=<cluster>-cp-N, the first step of replacing that control plane
# (docs/operations.md); FAILED=yes when its machine is gone: its member is removed through
# another control plane instead of leaving on its own.
NODE   ?=
FAILED ?=
REMOVE_MEMBER = $(LIFECYCLE) remove-member --node '$(NODE)' --out-dir '$(ETCD_SNAPSHOTS)' $(if $(filter yes,$(FAILED)),--failed)

have-inventory:
	@test -s '$(INVENTORY)' || { echo "make: $(INVENTORY) is missing: it is written by make apply-infra (layer 1)" >&2; exit 1; }
snapshot-named:
	@$(if $(SNAPSHOT),,echo "make: name the snapshot to restore: make $(filter etcd-restore dry-run-etcd-restore,$(MAKECMDGOALS)) SNAPSHOT=$(ETCD_SNAPSHOTS)/<file>.snapshot" >&2; exit 2)

node-named:
	@$(if $(NODE),,echo "make: name the control plane: make $(filter etcd-remove-member dry-run-etcd-remove-member replace-control-plane dry-run-replace-control-plane,$(MAKECMDGOALS)) NODE=<cluster>-cp-N" >&2; exit 2)

etcd-snapshot: have-inventory $(BIN)/talos-lifecycle ## Snapshot etcd from a healthy control plane into talos/_out/etcd/<cluster>-<UTC>.snapshot (0600), checked with etcdutl snapshot status
	@$(LIFECYCLE) snapshot --out-dir '$(ETCD_SNAPSHOTS)' < '$(INVENTORY)'

dry-run-etcd-restore: have-inventory snapshot-named $(BIN)/talos-lifecycle ## The dry-run twin of etcd-restore: the snapshot read, the quorum gate, the plan (a JSON line a step); changes nothing
	@$(RESTORE) --dry-run < '$(INVENTORY)'

# The plan is shown first (its gates refuse a cluster that holds its quorum before anything is
# asked), then the question names the cluster, then the same gates run again before the recovery.
etcd-restore: have-inventory snapshot-named $(BIN)/talos-lifecycle $(BIN)/scw-infra $(INFRA_CONFIG) ## Recover etcd from SNAPSHOT=FILE on one control plane: refused while etcd holds its quorum (RESET_EPHEMERAL=yes: control planes still holding etcd data are reset first); shows the plan, asks (CONFIRM=yes without a terminal)
	@$(RESTORE) --dry-run < '$(INVENTORY)'
	@cluster=$$($(BIN)/scw-infra names --config '$(INFRA_CONFIG)' | sed -n 's/^CLUSTER_NAME=//p'); \
	CONFIRM='$(CONFIRM)' pipelines/confirm.sh "the etcd state of the cluster $$cluster (everything written since the snapshot)$(if $(filter yes,$(RESET_EPHEMERAL)),$(,) and the EPHEMERAL partition of its control planes that hold etcd data$(,)) recovering it from $(SNAPSHOT)" "$$cluster"; \
	$(RESTORE) < '$(INVENTORY)'

dry-run-etcd-remove-member: have-inventory node-named $(BIN)/talos-lifecycle ## The dry-run twin of etcd-remove-member: the gate on the other members, the plan (a JSON line a step); changes nothing
	@$(REMOVE_MEMBER) --dry-run < '$(INVENTORY)'

etcd-remove-member: have-inventory node-named $(BIN)/talos-lifecycle $(BIN)/scw-infra $(INFRA_CONFIG) ## Take NODE's etcd member out after a snapshot (FAILED=yes: its machine is gone), only while every other member is healthy; shows the plan, asks
	@$(REMOVE_MEMBER) --dry-run < '$(INVENTORY)'
	@cluster=$$($(BIN)/scw-infra names --config '$(INFRA_CONFIG)' | sed -n 's/^CLUSTER_NAME=//p'); \
	CONFIRM='$(CONFIRM)' pipelines/confirm.sh "the etcd member of $(NODE) in the cluster $$cluster" "$$cluster"; \
	$(REMOVE_MEMBER) < '$(INVENTORY)'

# make replace-control-plane NODE=<cluster>-cp-N [FAILED=yes]: the whole replacement of one
# control plane through pipelines/infra.sh replace (docs/operations.md), each step's plan shown
# before the one question.
REPLACE_ENV = $(UPGRADE_ENV) NODE='$(NODE)' FAILED='$(FAILED)' CONFIRM='$(CONFIRM)' TALOS_DIGESTS='$(TALOS_DIGESTS)' REFLASH='$(REFLASH)' WORKER_CERT_FINGERPRINT='$(WORKER_CERT_FINGERPRINT)'

dry-run-replace-control-plane: have-inventory node-named $(BIN)/talos-lifecycle $(BIN)/scw-infra $(BIN)/scw-rescue-flash $(BIN)/talos-apply-insecure $(INFRA_CONFIG) ## The dry-run twin of replace-control-plane: the member's removal behind its gate, the Instance's destroy plan, the steps after; changes nothing
	@$(REPLACE_ENV) pipelines/infra.sh replace-plan

replace-control-plane: have-inventory node-named $(BIN)/talos-lifecycle $(BIN)/scw-infra $(BIN)/scw-rescue-flash $(BIN)/talos-apply-insecure $(INFRA_CONFIG) ## Replace control plane NODE (FAILED=yes: its machine is gone): member out, Node and Instance deleted, made again, waited for; shows each plan, asks
	@$(REPLACE_ENV) pipelines/infra.sh replace

# make add-worker NODE=<name> once the infra config lists it under workers; make remove-worker
# NODE=<name> once it no longer does (docs/operations.md). DNS_WAIT: seconds between its records'
# removal and its drain (default: the records' TTL); DRAIN_TIMEOUT: kubectl drain's bound.
DNS_WAIT      ?=
DRAIN_TIMEOUT ?= 10m
WORKER_ENV = $(REPLACE_ENV) DNS_WAIT='$(DNS_WAIT)' DRAIN_TIMEOUT='$(DRAIN_TIMEOUT)'
.PHONY: add-worker dry-run-add-worker remove-worker dry-run-remove-worker worker-named
worker-named:
	@$(if $(NODE),,echo "make: name the worker: make $(filter add-worker dry-run-add-worker remove-worker dry-run-remove-worker,$(MAKECMDGOALS)) NODE=<worker name>" >&2; exit 2)

dry-run-add-worker: worker-named $(BIN)/scw-infra $(INFRA_CONFIG) ## The dry-run twin of add-worker: NODE checked against the config, apply's plan, the steps after; changes nothing
	@$(WORKER_ENV) pipelines/infra.sh add-worker-plan

# The new worker gets its DNS records from the last apply-infra, once the edge runs on it.
add-worker: worker-named $(INFRA_CONFIG) ## Add worker NODE (listed under workers in the infra config first): ordered, flashed, configured, the platform and edge following, then its DNS records once it is Ready
	@$(WITHOUT_SECRETS) $(CARGO) build --quiet --release --bin scw-infra --bin scw-rescue-flash --bin talos-apply-insecure --bin wait-ready
	@$(WORKER_ENV) pipelines/infra.sh add-worker
	$(MAKE) apply-platform
	$(MAKE) apply-edge
	$(BIN)/wait-ready --kubeconfig '$(KUBECONFIG)' --timeout '$(UP_TIMEOUT)'
	$(MAKE) apply-infra

dry-run-remove-worker: worker-named have-inventory $(BIN)/scw-infra $(INFRA_CONFIG) ## The dry-run twin of remove-worker: NODE checked against the config, the steps and the server's destroy plan; changes nothing
	@$(WORKER_ENV) pipelines/infra.sh remove-worker-plan

remove-worker: worker-named have-inventory $(BIN)/scw-infra $(BIN)/scw-rescue-flash $(BIN)/talos-apply-insecure $(INFRA_CONFIG) ## Remove worker NODE (taken out of workers in the infra config first): out of DNS, a TTL's wait, drained, Node and server deleted, platform and edge following; shows the plan, asks
	@$(WORKER_ENV) pipelines/infra.sh remove-worker
	$(MAKE) apply-platform
	$(MAKE) apply-edge

# make upgrade-talos after a TALOS_VERSION bump in k8s/versions.env (and make
# talos-image-digests): every node to the pin, through pipelines/infra.sh upgrade. The plan
# (a JSON line a step) is shown first, its pre-flight checks and gates run as they will; the
# question names the cluster and the edge downtime; then the configs are regenerated, the snapshot
# taken, the nodes upgraded one at a time and the worker's upgrade recorded on its server.
UPGRADE_ENV = OUT='$(OUT)' INFRA_CONFIG='$(INFRA_CONFIG)' BIN='$(BIN)' TALOS_API_PORT='$(TALOS_API_PORT)' ETCD_SNAPSHOTS='$(ETCD_SNAPSHOTS)'

dry-run-upgrade-talos: have-inventory $(BIN)/talos-lifecycle $(BIN)/scw-infra $(INFRA_CONFIG) ## The dry-run twin of upgrade-talos: every node's version read, the path and installers checked, the plan (a JSON line a step); changes nothing
	@$(UPGRADE_ENV) pipelines/infra.sh upgrade-plan

upgrade-talos: have-inventory $(BIN)/talos-lifecycle $(BIN)/scw-infra $(BIN)/scw-rescue-flash $(INFRA_CONFIG) ## Upgrade Talos to the pin: snapshot, control planes one at a time behind the etcd gate, then the worker (edge downtime); shows the plan, asks (CONFIRM=yes without a terminal)
	@$(UPGRADE_ENV) pipelines/infra.sh upgrade-plan
	@cluster=$$($(BIN)/scw-infra names --config '$(INFRA_CONFIG)' | sed -n 's/^CLUSTER_NAME=//p'); \
	CONFIRM='$(CONFIRM)' pipelines/confirm.sh "the running Talos of every node of the cluster $$cluster (each upgraded to $(TALOS_VERSION) and rebooted, one at a time; the edge answers nothing while the worker is)" "$$cluster"; \
	$(UPGRADE_ENV) pipelines/infra.sh upgrade

# make upgrade-k8s after a KUBERNETES_VERSION bump (the same minor or the next): talosctl
# upgrade-k8s behind the same gate, after a snapshot; then the configs follow the pin.
dry-run-upgrade-k8s: have-inventory $(BIN)/talos-lifecycle $(BIN)/scw-infra $(INFRA_CONFIG) ## The dry-run twin of upgrade-k8s: the kubelets' versions read, the path and the nodes' support checked, the plan (a JSON line a step); changes nothing
	@$(UPGRADE_ENV) pipelines/infra.sh upgrade-k8s-plan

upgrade-k8s: have-inventory $(BIN)/talos-lifecycle $(BIN)/scw-infra $(INFRA_CONFIG) ## Upgrade Kubernetes to the pin through talosctl upgrade-k8s, after a snapshot, behind the etcd gate; shows the plan, asks (CONFIRM=yes without a terminal)
	@$(UPGRADE_ENV) pipelines/infra.sh upgrade-k8s-plan
	@cluster=$$($(BIN)/scw-infra names --config '$(INFRA_CONFIG)' | sed -n 's/^CLUSTER_NAME=//p'); \
	CONFIRM='$(CONFIRM)' pipelines/confirm.sh "the running Kubernetes of the cluster $$cluster (upgraded to $(KUBERNETES_VERSION): every API server, controller manager and scheduler, then every kubelet, restarted one at a time)" "$$cluster"; \
	$(UPGRADE_ENV) pipelines/infra.sh upgrade-k8s

##@ Tear down (reverse order; shows what goes and asks for the cluster's name unless CONFIRM=yes)
.PHONY: destroy destroy-edge destroy-platform destroy-infra
# scw-infra's plan of the Scaleway resources, shown before the question and then carried out
# exactly (refused if it no longer lists what exists).
DESTROY_PLAN ?= $(OUT)/destroy-plan.jsonl
DESTROY_ENV = OUT='$(OUT)' INFRA_CONFIG='$(INFRA_CONFIG)' BIN='$(BIN)' DESTROY_PLAN='$(DESTROY_PLAN)' CONFIRM='$(CONFIRM)'

destroy: $(BIN)/scw-infra $(INFRA_CONFIG) ## Show the infra plan, ask once, then destroy edge, platform (skipped, and said, when the cluster is off or gone) and infra
	@MAKE='$(MAKE)' EDGE_CONFIG='$(EDGE_CONFIG)' PLATFORM_CONFIG='$(PLATFORM_CONFIG)' $(DESTROY_ENV) pipelines/destroy.sh all

destroy-edge: guard-cluster $(EDGE_NAMES) ## Delete the edge objects the ApplySet proves ours, then its namespace
	@cluster=$$($(GUARD) | sed -n 's/^CLUSTER_NAME=//p'); \
	CLUSTER="$$cluster" CONFIRM='$(CONFIRM)' NAMES=$(EDGE_NAMES) pipelines/destroy-edge.sh delete

# The question names the cluster: the edge's, from its platform inputs; another profile's, from
# its config.
PLATFORM_CLUSTER = $$($(if $(filter edge,$(PROFILE)),$(GUARD),$(PROFILE_GUARD)) | sed -n 's/^CLUSTER_NAME=//p')
destroy-platform: $(PLATFORM_GUARD) $(PLATFORM_PLAN) ## Show what goes, ask, then uninstall the profile's components in reverse order; namespaces, CRDs and the releases whose templates are CRDs (istio-base, snapshot-controller) stay unless DELETE_CRDS=yes for the last two
	@cluster=$(PLATFORM_CLUSTER); \
	$(PLATFORM_ENV) DELETE_CRDS='$(DELETE_CRDS)' pipelines/platform.sh destroy-plan; \
	$(if $(filter yes,$(DELETE_CRDS)),groups=$$($(PLATFORM_ENV) pipelines/platform.sh crd-groups);) \
	CONFIRM='$(CONFIRM)' pipelines/confirm.sh "the platform layer ($(PROFILE), as listed above)$(if $(filter yes,$(DELETE_CRDS)), and every CRD of $$groups with every object of them,) of the cluster $$cluster" "$$cluster"; \
	$(PLATFORM_ENV) DELETE_CRDS='$(DELETE_CRDS)' pipelines/platform.sh destroy

destroy-infra: $(BIN)/scw-infra $(INFRA_CONFIG) ## Show scw-infra's destroy plan (cluster, project, each resource), ask, then delete exactly that
	@$(DESTROY_ENV) pipelines/destroy.sh infra

##@ Build, demo, tests
.PHONY: filter demo explain lists test lint bench bench-lists setup-demo setup-test setup-bench
$(FILTER_WASM): $(FILTER_SOURCES) | setup-demo
	$(WITHOUT_SECRETS) $(CARGO) build --quiet -p pow-filter --target wasm32-wasip1 --profile wasm-release
	@touch $@

filter: $(FILTER_WASM) ## Build the pow-filter .wasm module and print its sha256 (what the WasmPlugin pins)
	@echo "$(FILTER_WASM): $$(stat -c %s '$(FILTER_WASM)') bytes" >&2
	@sha256sum '$(FILTER_WASM)'

demo: setup-demo $(FILTER_WASM) ## Run the proof-of-work edge locally on 127.0.0.1:$DEMO_PORT in front of a demo origin, its metrics on $DEMO_METRICS_PORT
	@$(CARGO) run --quiet --release -p pow-demo --bin pow-demo -- --port '$(DEMO_PORT)' --metrics-port '$(DEMO_METRICS_PORT)' --wasm '$(FILTER_WASM)'

LISTS_SOURCES ?= config/lists-sources.example.json
LISTS_OUT     ?= $(OUT)/lists
# explain: the trusted agents' key directory files, NAME=FILE separated by spaces; an agent not
# named here is read from LISTS_OUT/<name>.directory.json (make lists writes it).
AGENT_DIRECTORIES ?=

# explain: the policy of EDGE_CONFIG tried on requests before it is deployed, by the real module.
explain: setup-demo $(FILTER_WASM) ## Decide the JSON request lines on stdin with EDGE_CONFIG's policy, the lists in LISTS_OUT (make lists) and the agents' AGENT_DIRECTORIES
	@$(CARGO) run --quiet --release -p pow-demo --bin pow-demo -- --wasm '$(FILTER_WASM)' explain --config '$(EDGE_CONFIG)' --lists '$(LISTS_OUT)'$(foreach d,$(AGENT_DIRECTORIES), --agent-directory '$(d)')
LISTS_SHARED  ?= $(if $(filter undefined,$(origin EDGEPOP_SHARED)),../shared,$(EDGEPOP_SHARED))

# lists-refresh runs each generator (found beside it) in its own process, as the CronJob does,
# and writes <name>.txt; a list that fails keeps its previous file and the run exits 1 naming it.
# FORCE=yes publishes a list that shrank beyond its threshold (lists-refresh --force), once the
# operator has checked the source really lost those networks.
FORCE ?=
ifneq ($(filter-out yes,$(FORCE)),)
$(error FORCE=$(FORCE) is not understood: FORCE=yes publishes lists that shrank, nothing else is forced)
endif
lists: $(BIN)/lists-refresh $(BIN)/lists-gen-asn $(BIN)/lists-gen-tor $(BIN)/lists-gen-crawlers ## Generate the policy lists (Tor exits, hosting ASNs, verified crawlers) from LISTS_SOURCES into talos/_out/lists/ (FORCE=yes: even those that shrank)
	$(BIN)/lists-refresh --sources '$(LISTS_SOURCES)' --out-dir '$(LISTS_OUT)'$(if $(FORCE), --force)

.PHONY: upstream
upstream: ## Build the upstream programs the tests run (etcd, etcdctl, etcdutl, Kubernetes, kwok, talosctl, sops, age) and helm at the pins, cached; print their paths
	@pipelines/upstream.sh build

test: setup-test $(FILTER_WASM) ## Run every test (unit, golden, schema, stand-ins, real .wasm, browsers)
	@CARGO='$(CARGO)' pipelines/test.sh

lint: setup-demo ## cargo fmt --check and clippy -D warnings, native and wasm32-wasip1
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p pow-filter -p bench-floor --target wasm32-wasip1 -- -D warnings

bench: setup-bench $(FILTER_WASM) ## Benchmarks: filter cost per request, page hash rate, image upload, image write over SSH, list generation
	$(CARGO) build --quiet -p bench-floor --target wasm32-wasip1 --profile wasm-release
	$(CARGO) bench --quiet -p pow-demo --bench filter
	$(CARGO) bench --quiet -p pow-core --bench filter
	$(CARGO) bench --quiet -p scaleway --bench upload
	$(CARGO) bench --quiet -p scw-rescue-flash --bench image_write
	$(MAKE) bench-lists

bench-lists: $(BIN)/lists-gen-asn ## lists-gen-asn on the full real IPv4 dataset vs awk | iprange and Python (needs iprange, hyperfine)
	@BIN='$(BIN)' SHARED='$(LISTS_SHARED)' pipelines/bench-lists.sh

# What each needs and a fresh machine lacks: pipelines/setup.sh holds the one list.
setup-demo:
	@pipelines/setup.sh demo
setup-test:
	@pipelines/setup.sh test
setup-bench:
	@pipelines/setup.sh bench

, := ,
