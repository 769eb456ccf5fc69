pop_common::main!(kubeconfig_guard);
