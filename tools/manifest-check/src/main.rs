pop_common::main!(manifest_check);
