//! The security contexts of the pods edgepop renders, which the "restricted" Pod Security
//! Standard admits (kubernetes.io/docs/concepts/security/pod-security-standards): a non-root
//! user (65532, distroless's `nonroot`, which the project's images run as), no privilege
//! escalation, no capability, the runtime's seccomp profile, a read-only root.

use serde_json::{Value, json};

/// A pod's `securityContext`.
pub fn restricted_pod() -> Value {
    json!({
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// A container's `securityContext`.
pub fn restricted_container() -> Value {
    json!({
        "runAsNonRoot": true,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}
