# Sourced by the edge scripts: read_edge_names FILE sets the names they share with the rendered
# objects (EDGE_NAMESPACE, EDGE_HMAC_SECRET, EDGE_APPLYSET_PARENT...) from what
# `render-edge --names` printed, so that no script types a name again or reads it back out of
# the YAML. Each line is KEY=value; a key must be EDGE_ and capitals, and the value is assigned
# as text, never evaluated.
read_edge_names() {
  local file=${1:?read_edge_names FILE} key value n=0
  [[ -s "$file" ]] || { printf '%s: no names (render-edge --names writes them)\n' "$file" >&2; return 1; }
  while IFS='=' read -r key value; do
    n=$((n + 1))
    [[ "$key" =~ ^EDGE_[A-Z_]+$ ]] || { printf '%s:%d: not an EDGE_*=value line\n' "$file" "$n" >&2; return 1; }
    printf -v "$key" '%s' "$value"
  done < "$file"
  [[ -n "${EDGE_NAMESPACE:-}" && -n "${EDGE_APPLYSET_PARENT:-}" ]] ||
    { printf '%s: EDGE_NAMESPACE or EDGE_APPLYSET_PARENT is missing\n' "$file" >&2; return 1; }
}

# The label kubectl gives each member of an ApplySet, valued with the set's id.
APPLYSET_MEMBER_LABEL=applyset.kubernetes.io/part-of

# applyset_parent JSONPATH: reads the edge's ApplySet parent (nothing when it does not exist).
applyset_parent() {
  kubectl -n "$EDGE_NAMESPACE" get "$EDGE_APPLYSET_PARENT" --ignore-not-found -o jsonpath="$1"
}
