pop_common::main!(talos_apply_insecure);
