pop_common::main!(etcd_backup);
