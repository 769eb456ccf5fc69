pop_common::main!(scw_infra);
