# Sourced by the edge scripts: the names they share with render-edge, read from the objects it
# rendered ($OBJECTS, its YAML stream), so that a name changed in the config or in the renderer
# (the HMAC Secret's, the lists ConfigMap's, the namespace...) is never re-typed here. The stream
# is render-edge's own output (sorted keys, two-space indents); tests/apply_edge.rs runs these
# scripts on it.

# The parent of the ApplySet that apply-edge.sh applies and prunes with (kind/name, in the
# namespace of the edge): destroy-edge.sh reads the set's kinds and id from it.
EDGE_APPLYSET_PARENT=configmap/edge-applyset

# edge_field KIND FIELD: FIELD of the first rendered object of KIND, where FIELD is `name`
# (metadata.name), `namespace` (metadata.namespace) or a top-level `spec` key with a scalar value
# (`gatewayClassName`).
edge_field() {
  awk -v kind="$1" -v field="$2" '
    /^---$/ { doc_kind = ""; section = ""; next }
    /^kind: / { doc_kind = $2; next }
    /^[a-zA-Z]/ { section = $1; sub(/:$/, "", section); next }
    doc_kind == kind && $0 ~ "^  " field ": " &&
      (field == "name" || field == "namespace" ? section == "metadata" : section == "spec") {
      sub("^  " field ": *", ""); gsub(/^'\''|'\''$/, ""); print; exit }
  ' "$OBJECTS"
}

# edge_namespace: the namespace of the edge layer (the rendered Namespace).
edge_namespace() { edge_field Namespace name; }

# edge_hmac_secret: the Secret holding the filter's keys, as the gateway overlay names it
# (secretKeyRef.name inside the edge-gateway-options ConfigMap); empty without the filter.
edge_hmac_secret() {
  grep -A2 'secretKeyRef:' "$OBJECTS" | sed -n 's/^ *name: *//p' | head -n1
}

# edge_lists_cronjob, edge_lists_configmap: the refresh CronJob and the ConfigMap it publishes
# into (its --configmap argument); empty without the filter.
edge_lists_cronjob() { edge_field CronJob name; }
edge_lists_configmap() { sed -n 's/^ *- --configmap=//p' "$OBJECTS" | head -n1; }

# edge_gateway_deployment: the Deployment istiod generates for the Gateway, <gateway>-<class>.
edge_gateway_deployment() {
  local gateway class
  gateway=$(edge_field Gateway name) class=$(edge_field Gateway gatewayClassName)
  [[ -n "$gateway" && -n "$class" ]] && printf '%s-%s\n' "$gateway" "$class"
}
